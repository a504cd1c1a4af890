// A thread of the threaded build: an instance over the inference Worker's module and shared
// memory (worker.ts, startThreads) that waits in plumb's start_thread for work and never
// returns. It says "ready" once plumb counts it.

import init, { start_thread } from "./wasm-threads/plumb_web.js";

onmessage = async (event: MessageEvent<{ module: WebAssembly.Module; memory: WebAssembly.Memory }>) => {
  const { module, memory } = event.data;
  await init({ module_or_path: module, memory });
  start_thread(() => postMessage("ready"));
};
