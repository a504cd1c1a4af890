// Runs a wasm32-wasip1 program (a test binary, as cargo's runner) under node's WASI, so that
// plumb's tests run under WebAssembly with nothing but node installed.
//   node tools/wasi-run.mjs PROGRAM.wasm [ARGS...]
// The host's root directory is preopened as "/", and the environment is passed through, so that
// the tests find the models and the reference data by their absolute paths. The working
// directory is the host's, as cargo sets it for each test binary.
//
// Run node with --single-threaded-gc: with V8's concurrent garbage collector, node 20 crashes
// at random ("Unknown type", "Invalid bytecode") while a program grows its memory by hundreds
// of megabytes, as loading a model does; with it, never in our runs.
import { readFile } from "node:fs/promises";
import { WASI } from "node:wasi";
import process from "node:process";

const [program, ...args] = process.argv.slice(2);
if (!program) {
  console.error("usage: node tools/wasi-run.mjs PROGRAM.wasm [ARGS...]");
  process.exit(2);
}
const wasi = new WASI({
  version: "preview1",
  args: [program, ...args],
  env: { ...process.env, PWD: process.cwd() },
  preopens: { "/": "/" },
  returnOnExit: true,
});
const module = await WebAssembly.compile(await readFile(program));
const instance = await WebAssembly.instantiate(module, wasi.getImportObject());
process.exitCode = wasi.start(instance);
