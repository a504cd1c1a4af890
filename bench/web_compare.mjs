// plumb's chat page against wllama 3.8.1 (llama.cpp built with Emscripten) in the same
// headless Chromium, one thread each, on the same GGUF and chat prompt at temperature 0, and
// native `plumb run` on one thread beside them. Run it under /work/bin/quiet-style isolation:
//
//   npm --prefix web ci && npm --prefix web run build && npm --prefix bench/web ci
//   cargo build --release -p plumb
//   node bench/web_compare.mjs MODEL.gguf [N]      (CHROMIUM=/usr/bin/chromium by default)
//
// Generation speed is each one's own count: plumb's page shows generated tokens over the time
// of their forward passes; wllama's `timings.predicted_per_second` is llama.cpp's.

import { spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serveFiles } from "../tools/web-server.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { chromium } = createRequire(join(root, "bench/web/package.json"))("playwright-core");
const [model, nText = "128"] = process.argv.slice(2);
if (!model) throw new Error("usage: node bench/web_compare.mjs MODEL.gguf [N]");
const N = Number(nText);
const PROMPT = "Write a long story about a dragon who learns to read.";
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

const mounts = [
  ["/wllama/", join(root, "bench/web/node_modules/@wllama/wllama")],
  ["/bench/", join(root, "bench/web")],
  ["/", join(root, "web/dist")],
];
const { server, base } = await serveFiles((path) => {
  if (path === "/model.gguf") return model;
  for (const [prefix, dir] of mounts) {
    if (path.startsWith(prefix)) {
      const file = join(dir, normalize("/" + path.slice(prefix.length)));
      return existsSync(file) && statSync(file).isDirectory() ? join(file, "index.html") : file;
    }
  }
  return null;
});

const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
const results = [];
try {
  // plumb's page.
  const page = await browser.newPage();
  const query = new URLSearchParams({ model: "/model.gguf", temp: "0", n: String(N), seed: "1", threads: "1", prompt: PROMPT, autorun: "1" });
  await page.goto(`${base}/?${query}`);
  await page.waitForFunction(() => document.querySelector('[data-testid="status"]').textContent === "ready" && document.querySelector('[data-testid="tokens-per-second"]').textContent !== "–", null, { timeout: 600_000 });
  const stats = await page.getByTestId("tokens-per-second").getAttribute("title");
  results.push({ engine: "plumb (browser, wasm SIMD128)", tokensPerSecond: Number(await page.getByTestId("tokens-per-second").textContent()), detail: stats });
  await page.close();

  // wllama.
  const wpage = await browser.newPage();
  await wpage.goto(`${base}/bench/wllama.html?${new URLSearchParams({ model: "/model.gguf", prompt: PROMPT, n: String(N) })}`);
  await wpage.waitForFunction(() => window.result !== undefined, null, { timeout: 600_000 });
  const w = await wpage.evaluate(() => window.result);
  if (w.error) throw new Error(`wllama: ${w.error}`);
  results.push({ engine: "wllama 3.8.1 (browser)", tokensPerSecond: w.timings.predicted_per_second, detail: `${w.timings.predicted_n} tokens; prompt ${w.timings.prompt_n} tokens at ${w.timings.prompt_per_second.toFixed(1)}/s` });
} finally {
  await browser.close();
  server.close();
}

// Native plumb, one thread, the same prompt.
const run = spawnSync(join(root, "target/release/plumb"), ["run", "-m", model, "--backend", "cpu", "--threads", "1", "--chat", "--temp", "0", "-n", String(N), "-p", PROMPT, "--json"], { encoding: "utf8" });
if (run.status !== 0) throw new Error(`plumb run: ${run.stderr}`);
const native = JSON.parse(run.stderr.trim().split("\n").pop());
results.push({ engine: "plumb (native, 1 thread)", tokensPerSecond: native.decode_tokens_per_second, detail: `${native.generated_tokens} tokens; prompt ${native.prompt_tokens} tokens at ${native.prompt_tokens_per_second.toFixed(1)}/s` });

console.log(`model ${model}, prompt ${JSON.stringify(PROMPT)}, at most ${N} tokens, temperature 0, 1 thread`);
for (const r of results) console.log(`${r.engine.padEnd(32)} ${r.tokensPerSecond.toFixed(2).padStart(8)} tokens/s   (${r.detail})`);
