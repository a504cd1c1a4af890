// plumb's chat page against wllama 3.8.1 (llama.cpp built with Emscripten) in the same
// headless Chromium, on 1 and on 2 threads each, on the same GGUFs and chat prompt at
// temperature 0, and native `plumb run` on as many threads beside them. The page is served
// cross-origin isolated (COOP/COEP), so both run their threaded builds for 2 threads; each
// says how many threads it ran on, and the script fails if that is not what was asked for.
// Run it under /work/bin/quiet-style isolation:
//
//   npm --prefix web ci && npm --prefix web run build && npm --prefix bench/web ci
//   cargo build --release -p plumb
//   node bench/web_compare.mjs MODEL.gguf...      (N=128 tokens, CHROMIUM=/usr/bin/chromium
//                                                  by default)
//
// Generation speed is each one's own count: plumb's page shows generated tokens over the time
// of their forward passes; wllama's `timings.predicted_per_second` is llama.cpp's.

import { spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, join, normalize, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { serveFiles } from "../tools/web-server.mjs";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const { chromium } = createRequire(join(root, "bench/web/package.json"))("playwright-core");
const models = process.argv.slice(2);
if (models.length === 0) throw new Error("usage: node bench/web_compare.mjs MODEL.gguf...");
const N = Number(process.env.N ?? "128");
const THREADS = [1, 2];
const PROMPT = "Write a long story about a dragon who learns to read.";
const chromiumPath = process.env.CHROMIUM ?? "/usr/bin/chromium";

const mounts = [
  ["/wllama/", join(root, "bench/web/node_modules/@wllama/wllama")],
  ["/bench/", join(root, "bench/web")],
  ["/", join(root, "web/dist")],
];
const { server, base } = await serveFiles((path) => {
  const model = /^\/model(\d+)\.gguf$/.exec(path);
  if (model) return models[Number(model[1])];
  for (const [prefix, dir] of mounts) {
    if (path.startsWith(prefix)) {
      const file = join(dir, normalize("/" + path.slice(prefix.length)));
      return existsSync(file) && statSync(file).isDirectory() ? join(file, "index.html") : file;
    }
  }
  return null;
});

const browser = await chromium.launch({ executablePath: chromiumPath, args: ["--no-sandbox"] });
const rows = [];
try {
  for (const [m, model] of models.entries()) {
    const url = `/model${m}.gguf`;
    for (const threads of THREADS) {
      const row = { model, threads };
      // plumb's page; it says how many threads it runs on.
      const page = await browser.newPage();
      const query = new URLSearchParams({ model: url, temp: "0", n: String(N), seed: "1", threads: String(threads), prompt: PROMPT, autorun: "1" });
      await page.goto(`${base}/?${query}`);
      await page.waitForFunction(() => document.querySelector('[data-testid="status"]').textContent === "ready" && document.querySelector('[data-testid="tokens-per-second"]').textContent !== "–", null, { timeout: 600_000 });
      const note = await page.locator(".threads").textContent();
      if (!note.startsWith(`Runs on ${threads} thread${threads === 1 ? "." : "s"}`)) throw new Error(`plumb's page, threads=${threads}: ${note}`);
      row.plumb = Number(await page.getByTestId("tokens-per-second").textContent());
      row.plumbDetail = await page.getByTestId("tokens-per-second").getAttribute("title");
      await page.close();

      // wllama; it says how many threads it runs on, and its pthreads are Web Workers.
      const wpage = await browser.newPage();
      let workers = 0;
      wpage.on("worker", () => workers++);
      await wpage.goto(`${base}/bench/wllama.html?${new URLSearchParams({ model: url, prompt: PROMPT, n: String(N), threads: String(threads) })}`);
      await wpage.waitForFunction(() => window.result !== undefined, null, { timeout: 600_000 });
      const w = await wpage.evaluate(() => window.result);
      await wpage.close();
      if (w.error) throw new Error(`wllama: ${w.error}`);
      if (w.threads !== threads) throw new Error(`wllama ran on ${w.threads} threads, not ${threads}`);
      row.wllama = w.timings.predicted_per_second;
      row.wllamaDetail = `${w.timings.predicted_n} tokens; prompt ${w.timings.prompt_n} tokens at ${w.timings.prompt_per_second.toFixed(1)}/s; getNumThreads() ${w.threads}, isMultithread() ${w.multithread}, ${workers} Web Workers`;

      // Native plumb, the same prompt and threads.
      const run = spawnSync(join(root, "target/release/plumb"), ["run", "-m", model, "--backend", "cpu", "--threads", String(threads), "--chat", "--temp", "0", "-n", String(N), "-p", PROMPT, "--json"], { encoding: "utf8" });
      if (run.status !== 0) throw new Error(`plumb run: ${run.stderr}`);
      const native = JSON.parse(run.stderr.trim().split("\n").pop());
      row.native = native.decode_tokens_per_second;
      row.nativeDetail = `${native.generated_tokens} tokens; prompt ${native.prompt_tokens} tokens at ${native.prompt_tokens_per_second.toFixed(1)}/s`;
      rows.push(row);
      console.error(JSON.stringify(row));
    }
  }
} finally {
  await browser.close();
  server.close();
}

console.log(`prompt ${JSON.stringify(PROMPT)}, at most ${N} tokens, temperature 0; generation tokens/s`);
console.log("| model | threads | plumb (browser) | wllama 3.8.1 (browser) | plumb / wllama | plumb (native) |");
console.log("|---|---|---|---|---|---|");
for (const r of rows) {
  const name = basename(r.model, ".gguf");
  console.log(`| ${name} | ${r.threads} | ${r.plumb.toFixed(2)} | ${r.wllama.toFixed(2)} | ${(r.plumb / r.wllama).toFixed(2)}× | ${r.native.toFixed(2)} |`);
}
for (const r of rows) {
  console.log(`${basename(r.model, ".gguf")}, ${r.threads} thread(s): plumb page: ${r.plumbDetail}; wllama: ${r.wllamaDetail}; native: ${r.nativeDetail}`);
}
