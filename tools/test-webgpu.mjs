// The chat page on the wgpu backend, in headless Chromium with its software WebGPU adapter
// (SwiftShader, on Vulkan), driven by playwright-core (tools/test-web.sh builds and runs it):
// smollm2-135m loaded with backend=wgpu, the page must say it runs on wgpu (a silent fallback
// to the cpu build fails), and one reply at temperature 0 must equal native
// `plumb run --backend ref --chat` text for text. SwiftShader's speed means nothing. Then,
// in Chromium without those flags (no adapter), backend=wgpu must show an error, and the
// default must fall back to cpu and say why.
//
// The reference is the ref backend (plain f32), not native wgpu on lavapipe: the wgpu backend
// follows the reference's logits to within rounding (plumb verify), and the page's WebGPU
// kernels are not lavapipe's (wgpu exposes no subgroups on WebGPU, so its matrix products
// reduce through workgroup memory), so the reference is what both must agree with. On this prompt native
// wgpu (lavapipe) and ref give the same text; the cpu backend, whose products quantize the
// activations, does not.
//
//   node tools/test-webgpu.mjs   with CHROMIUM, PLUMB (the native binary), MODEL (smollm2-135m's
//   GGUF) and DIST (web/dist) set.

import { spawnSync } from "node:child_process";
import { join, normalize } from "node:path";
import { createRequire } from "node:module";
import { serveFiles } from "./web-server.mjs";

const require = createRequire(join(process.cwd(), "web", "package.json"));
const { chromium } = require("playwright-core");

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`test-webgpu: set ${name}`);
  return value;
};
const [CHROMIUM, PLUMB, MODEL, DIST] = ["CHROMIUM", "PLUMB", "MODEL", "DIST"].map(env);
// 12 tokens: the prompt (38 tokens, the products of more than 4 tokens) and 11 decoding steps
// (the mat-vec products, one token each), the last of which writes position 48, the first of
// a new 16-position block of the KV cache. On SwiftShader on two idle cores the first token
// came after 64 s and each decoding step took about 6 s more (20 tokens: 188 s in all).
const N = 12;
const PROMPT = "Write a haiku about the sea.";
// Chromium's WebGPU on SwiftShader, its CPU Vulkan implementation, with no GPU needed.
const WEBGPU_ARGS = ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-webgpu-adapter=swiftshader"];
const started = Date.now();
let failures = 0;
function check(ok, what, detail = "") {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}${ok ? "" : `\n     ${detail}`}`);
  if (!ok) failures++;
}

const run = spawnSync(PLUMB, ["run", "-m", MODEL, "--backend", "ref", "--chat", "--temp", "0", "-n", String(N), "-p", PROMPT], {
  encoding: "utf8",
});
if (run.status !== 0) throw new Error(`plumb run failed: ${run.stderr}`);
const expected = run.stdout.replace(/\n$/, ""); // plumb run ends the text with one newline

const { server, base } = await serveFiles((path) => {
  if (path === "/models/smollm2-135m.gguf") return MODEL;
  const file = join(DIST, normalize(path === "/" ? "/index.html" : path));
  return file.startsWith(DIST) ? file : null;
});

const browser = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox", ...WEBGPU_ARGS] });
try {
  const page = await browser.newPage();
  const consoleErrors = [];
  page.on("console", (m) => m.type() === "error" && consoleErrors.push(m.text()));
  page.on("pageerror", (e) => consoleErrors.push(String(e)));
  const byId = (id) => page.getByTestId(id);
  const query = new URLSearchParams({
    model: "/models/smollm2-135m.gguf",
    backend: "wgpu",
    temp: "0",
    n: String(N),
    seed: "1",
    prompt: PROMPT,
    autorun: "1",
  });
  await page.goto(`${base}/?${query}`);
  // A reply, or an error (no adapter, a kernel WebGPU rejects) that ends the wait at once.
  await page.waitForFunction(
    () =>
      (document.querySelector('[data-testid="status"]').textContent === "ready" &&
        document.querySelectorAll(".message.assistant").length === 1) ||
      !document.querySelector('[data-testid="error"]').hidden,
    null,
    { timeout: 540_000 },
  );
  const error = (await byId("error").isVisible()) ? await byId("error").textContent() : null;
  check(error === null, "no error shown", error);
  const backend = await byId("backend").textContent();
  check(backend.startsWith("wgpu"), `the page runs on the wgpu backend: ${backend}`);
  const reply = error === null ? await byId("reply").textContent() : "";
  check(reply === expected, `reply equals plumb run --backend ref's: ${JSON.stringify(reply)}`, `native: ${JSON.stringify(expected)}`);
  check(consoleErrors.length === 0, "no console errors", consoleErrors.join("\n"));
} finally {
  await browser.close();
}

// Without the flags this Chromium's WebGPU gives no adapter: backend=wgpu must say so in
// `error`, and the default must fall back to cpu and say why.
const plain = await chromium.launch({ executablePath: CHROMIUM, args: ["--no-sandbox"] });
try {
  const page = await plain.newPage();
  const byId = (id) => page.getByTestId(id);
  const load = async (params) => {
    await page.goto(`${base}/?${new URLSearchParams({ model: "/models/smollm2-135m.gguf", ...params })}`);
    await page.waitForFunction(() => !["loading", "no model"].includes(document.querySelector('[data-testid="status"]').textContent) || !document.querySelector('[data-testid="error"]').hidden, null, { timeout: 60_000 });
  };
  await load({ backend: "wgpu" });
  const error = (await byId("error").isVisible()) ? await byId("error").textContent() : "(no visible error)";
  check(/^backend=wgpu: .*adapter/.test(error), `no adapter, backend=wgpu: ${error}`);
  await load({});
  const backend = await byId("backend").textContent();
  check(/^cpu .*not wgpu: .*adapter/.test(backend), `no adapter, by default: ${backend}`);
} finally {
  await plain.close();
  server.close();
}
console.log(`test-webgpu: ${failures === 0 ? "passed" : `${failures} failed`} in ${((Date.now() - started) / 1000).toFixed(1)} s`);
process.exit(failures === 0 ? 0 : 1);
