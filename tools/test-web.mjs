// The chat page in headless Chromium, driven by playwright-core (tools/test-web.sh builds and
// runs it): smollm2-135m loaded from a URL, two prompts at temperature 0 on 1 thread whose
// replies must equal native `plumb run --chat` text for text, the first again on 2 threads and
// on a page that is not cross-origin isolated (single-threaded), a stop, and the errors of a
// truncated GGUF (loaded by URL) and of a file that is not GGUF (picked with the file input).
//
// Native plumb runs on its scalar kernels (PLUMB_CPU_ISA=scalar), whose lanes are as wide as
// the WebAssembly SIMD128 kernels' and sum in their order, so that greedy decoding picks the
// same tokens (this test compares the text; the logits are not compared). With its AVX2 or AVX-512 kernels (other lane widths, fused multiply-add)
// native plumb rounds differently, and a small model's greedy text can part after a few
// tokens; the test prints how far those agree, for information.
//
//   node tools/test-web.mjs   with CHROMIUM, PLUMB (the native binary), MODEL (smollm2-135m's
//   GGUF), DIST (web/dist) and OUT (a folder for the screenshot and the test files) set.

import { spawnSync } from "node:child_process";
import { statSync, writeFileSync, openSync, readSync, closeSync } from "node:fs";
import { join, normalize } from "node:path";
import { createRequire } from "node:module";
import { serveFiles } from "./web-server.mjs";

const require = createRequire(join(process.cwd(), "web", "package.json"));
const { chromium } = require("playwright-core");

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`test-web: set ${name}`);
  return value;
};
const [CHROMIUM, PLUMB, MODEL, DIST, OUT] = ["CHROMIUM", "PLUMB", "MODEL", "DIST", "OUT"].map(env);
const N = 24;
const PROMPTS = ["What is the capital of France?", "Write a haiku about the sea."];
const started = Date.now();
let failures = 0;
function check(ok, what, detail = "") {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${ok ? "" : `\n     ${detail}`}`);
  if (!ok) failures++;
}

// The files: the model, its first half, and a file that is not GGUF.
const truncated = join(OUT, "truncated.gguf");
const notGguf = join(OUT, "not-a-model.gguf");
{
  const half = Math.floor(statSync(MODEL).size / 2);
  const buffer = Buffer.alloc(half);
  const fd = openSync(MODEL, "r");
  readSync(fd, buffer, 0, half, 0);
  closeSync(fd);
  writeFileSync(truncated, buffer);
  writeFileSync(notGguf, "<!doctype html><title>404 Not Found</title>\n");
}
const MODELS = { "smollm2-135m.gguf": MODEL, "truncated.gguf": truncated };

// Native replies: the first prompt alone, the second after the first exchange; `isa` caps the
// kernels (undefined: the best this CPU has).
function native(prompt, history, isa) {
  const args = ["run", "-m", MODEL, "--backend", "cpu", "--chat", "--temp", "0", "-n", String(N), "-p", prompt];
  if (history.length > 0) {
    const transcript = join(OUT, "transcript.json");
    writeFileSync(transcript, JSON.stringify({ messages: history }));
    args.push("--messages", transcript);
  }
  const runEnv = { ...process.env };
  delete runEnv.PLUMB_CPU_ISA;
  if (isa) runEnv.PLUMB_CPU_ISA = isa;
  const run = spawnSync(PLUMB, args, { encoding: "utf8", env: runEnv });
  if (run.status !== 0) throw new Error(`plumb run failed: ${run.stderr}`);
  return run.stdout.replace(/\n$/, ""); // plumb run ends the text with one newline
}

// The page, and /models/ for the test files, with the page's headers; and the same from a
// plain static server, where the page is not cross-origin isolated.
const files = (path) => {
  if (path.startsWith("/models/")) return MODELS[path.slice("/models/".length)];
  const file = join(DIST, normalize(path === "/" ? "/index.html" : path));
  return file.startsWith(DIST) ? file : null;
};
const { server, base } = await serveFiles(files);
const plain = await serveFiles(files, { isolated: false });

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
try {
  const page = await browser.newPage({ viewport: { width: 900, height: 760 } });
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const byId = (id) => page.getByTestId(id);
  const idle = (replies) =>
    page.waitForFunction(
      (n) =>
        document.querySelector('[data-testid="status"]').textContent === "ready" &&
        document.querySelectorAll(".message.assistant").length === n,
      replies,
      { timeout: 120_000 },
    );

  const threadsNote = () => page.locator(".threads").textContent();

  // 1. The model by URL on 1 thread, the first prompt sent by autorun.
  // backend=cpu: this test holds the cpu builds (WebAssembly SIMD) to native; test-webgpu.mjs
  // tests the wgpu build.
  const query = (threads) =>
    new URLSearchParams({ model: "/models/smollm2-135m.gguf", backend: "cpu", temp: "0", n: String(N), seed: "1", threads, prompt: PROMPTS[0], autorun: "1" });
  await page.goto(`${base}/?${query("1")}`);
  await idle(1);
  check(/^Runs on 1 thread\.$/.test(await threadsNote()), `1 thread: ${await threadsNote()}`);
  const backend = await byId("backend").textContent();
  check(backend.startsWith("cpu"), `the page runs on the cpu backend: ${backend}`);
  const history = [];
  for (const [i, prompt] of PROMPTS.entries()) {
    if (i > 0) {
      await byId("prompt").fill(prompt);
      await byId("send").click();
      await idle(i + 1);
    }
    const reply = await byId("reply").textContent();
    const expected = native(prompt, history, "scalar");
    check(reply === expected, `reply ${i + 1} equals plumb run's: ${JSON.stringify(reply)}`, `native: ${JSON.stringify(expected)}`);
    const best = native(prompt, history);
    let same = 0;
    while (same < reply.length && reply[same] === best[same]) same++;
    console.log(`     (native on this CPU's best kernels: ${same === best.length && same === reply.length ? "the same text" : `the same first ${same} characters, then ${JSON.stringify(best.slice(same))}`})`);
    const rate = Number(await byId("tokens-per-second").textContent());
    check(rate > 0, `tokens/s shown: ${rate}`);
    history.push({ role: "user", content: prompt }, { role: "assistant", content: reply });
  }
  await page.screenshot({ path: join(OUT, "web-chat.png") });
  const first = native(PROMPTS[0], [], "scalar");

  // 2. Stop: a reply cut short once its first text has come.
  await byId("prompt").fill("Write a long story about a dragon.");
  await byId("send").click();
  await page.waitForFunction(() => document.querySelector('[data-testid="reply"]')?.textContent !== "");
  await byId("stop").click();
  await idle(3);
  const stats = await byId("tokens-per-second").getAttribute("title");
  check(/stop: interrupted/.test(stats) && Number(stats.split(" ")[0]) < N, `stop ends the reply: ${stats}`);

  // 3. Threads: the first prompt again on 2 threads (Web Workers over shared memory), and on
  // a page that is not cross-origin isolated, which runs the single-threaded build and says so.
  for (const [where, url, note] of [
    ["2 threads", base, /^Runs on 2 threads \(Web Workers over shared memory\)\.$/],
    ["not cross-origin isolated", plain.base, /^Runs on 1 thread: this page is not cross-origin isolated/],
  ]) {
    await page.goto(`${url}/?${query("2")}`);
    await idle(1);
    check(note.test(await threadsNote()), `${where}: ${await threadsNote()}`);
    const reply = await byId("reply").textContent();
    check(reply === first, `${where}: the reply equals plumb run's`, `page: ${JSON.stringify(reply)}\n     native: ${JSON.stringify(first)}`);
  }

  check(consoleErrors.length === 0, "no console errors", consoleErrors.join("\n"));

  // 4. A truncated GGUF by URL, and a file that is not GGUF by the file input.
  const shown = async () => {
    await page.waitForFunction(() => document.querySelector('[data-testid="status"]').textContent === "no model", null, { timeout: 60_000 });
    const visible = await byId("error").isVisible();
    return visible ? await byId("error").textContent() : "(no visible error)";
  };
  const clear = (message) => !/panicked|unreachable|RuntimeError|\.rs:\d|wasm-function|\n\s+at /.test(message);
  await byId("model-url").fill("/models/truncated.gguf");
  await byId("load-url").click();
  let message = await shown();
  check(/truncated/.test(message) && clear(message), `truncated GGUF: ${message}`);
  await byId("model-file").setInputFiles(notGguf);
  message = await shown();
  check(/not a GGUF file/.test(message) && clear(message), `not GGUF: ${message}`);
} finally {
  await browser.close();
  server.close();
  plain.server.close();
}
console.log(`test-web: ${failures === 0 ? "passed" : `${failures} failed`} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(failures === 0 ? 0 : 1);
