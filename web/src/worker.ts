// The inference Worker: loads a model into plumb's WebAssembly module and generates replies
// one forward pass at a time, posting each piece of text as it comes. Between passes it
// yields to its event loop, so that a stop request is taken within one token. A Worker holds
// one model; the page starts a new Worker to load another.
//
// There are three builds of the module (web/build-wasm.sh): plumb_web, on the cpu backend
// (WebAssembly SIMD), single-threaded; the same with threads (src/wasm-threads/), which runs
// where the page is cross-origin isolated, so that WebAssembly memory can be shared, and
// starts the Workers of its threads (thread.ts) before loading; and plumb_web_wgpu, on the
// wgpu backend over the page's WebGPU. The wgpu build waits for the GPU inside its calls
// through JSPI (WebAssembly JavaScript Promise Integration), so its `load` and `step` return
// promises; this Worker awaits both in every build, and calls nothing else on a chat while a
// step is under way.

import cpuWasm from "./wasm/plumb_web_bg.wasm?url";
import threadedWasm from "./wasm-threads/plumb_web_bg.wasm?url";
import wgpuWasm from "./wasm/plumb_web_wgpu_bg.wasm?url";
import type { BackendChoice, FromWorker, ReplyStats, Settings, ToWorker } from "./messages";

/** What this Worker uses of either build's API. */
interface ReplyInfo {
  n_tokens: number;
  stop: string;
  prompt_tokens: number;
  prompt_tokens_per_second: number;
  tokens_per_second: number;
  free(): void;
}
interface Chat {
  describe(): string;
  backend(): string;
  /** The cpu builds only: the threads the model computes on. */
  threads?(): number;
  send(text: string): void;
  step(onText: (piece: string) => void): ReplyInfo | undefined | Promise<ReplyInfo | undefined>;
  stop(): void;
  reset(): void;
}
interface ModelLoader {
  push(chunk: Uint8Array): void;
  /** `threads`: the cpu builds' thread count; the wgpu build takes no such argument. */
  load(temperature: number, seed: number, maxTokens: number, threads: number): Chat | Promise<Chat>;
}
type LoaderClass = new (length: number) => ModelLoader;

/**
 * Starts the chosen build's module: its ModelLoader class, and for the threaded build a
 * function that starts `n` more threads.
 */
async function startModule(
  backend: "wgpu" | "cpu",
): Promise<{ ModelLoader: LoaderClass; startThreads?: (n: number) => Promise<void> }> {
  if (backend === "wgpu") {
    const glue = await import("./wasm/plumb_web_wgpu.js");
    await glue.default({ module_or_path: wgpuWasm });
    return { ModelLoader: glue.ModelLoader as unknown as LoaderClass };
  }
  if (!self.crossOriginIsolated) {
    const glue = await import("./wasm/plumb_web.js");
    await glue.default({ module_or_path: cpuWasm });
    return { ModelLoader: glue.ModelLoader as unknown as LoaderClass };
  }
  const glue = await import("./wasm-threads/plumb_web.js");
  await glue.default({ module_or_path: threadedWasm });
  const [module, memory] = glue.shared_module();
  return { ModelLoader: glue.ModelLoader as unknown as LoaderClass, startThreads: (n) => startThreads(n, module, memory) };
}

/** How long a thread's Worker may take to instantiate the module and report ready. */
const THREAD_START_SECONDS = 30;

/**
 * Starts `n` Workers that become threads of the threaded build, each an instance over this
 * one's `module` and shared `memory`, and waits until every one is ready for work.
 */
async function startThreads(n: number, module: WebAssembly.Module, memory: WebAssembly.Memory) {
  const threads: Worker[] = [];
  const started = [];
  for (let i = 0; i < n; i++) {
    const thread = new Worker(new URL("./thread.ts", import.meta.url), { type: "module" });
    threads.push(thread);
    started.push(
      new Promise<void>((resolve, reject) => {
        // A thread that never says it is ready would leave the load waiting forever.
        const timer = setTimeout(
          () => reject(new Error(`a thread's Worker did not start within ${THREAD_START_SECONDS} s; try threads=1`)),
          THREAD_START_SECONDS * 1000,
        );
        thread.onmessage = () => {
          clearTimeout(timer);
          resolve();
        };
        thread.onerror = (event) => {
          clearTimeout(timer);
          reject(new Error(`a thread's Worker failed: ${event.message}`));
        };
      }),
    );
    thread.postMessage({ module, memory });
  }
  try {
    await Promise.all(started);
  } catch (err) {
    for (const thread of threads) thread.terminate();
    throw err;
  }
}

interface GpuAdapter {
  info?: { vendor: string; architecture: string; description: string };
}

/** The WebGPU adapter the wgpu build would get, described; or why the build cannot run here. */
async function webGpuAdapter(): Promise<{ adapter: string } | { missing: string }> {
  if (typeof (WebAssembly as { Suspending?: unknown }).Suspending !== "function")
    return { missing: "this browser has no WebAssembly JSPI (WebAssembly.Suspending), which the wgpu build needs" };
  const gpu = (navigator as { gpu?: { requestAdapter(options?: object): Promise<GpuAdapter | null> } }).gpu;
  if (gpu === undefined) return { missing: "this browser has no WebGPU (navigator.gpu)" };
  const adapter = await gpu.requestAdapter({ powerPreference: "high-performance" }).catch(() => null);
  if (adapter === null) return { missing: "WebGPU gave no adapter" };
  const info = adapter.info;
  const words = info ? [info.vendor, info.architecture, info.description].filter((w) => w !== "") : [];
  return { adapter: words.length > 0 ? words.join(" ") : "an adapter that does not say" };
}

/**
 * The backend to load on: the one asked for, else wgpu where it can run; and what the page
 * shows after the backend's name (the adapter, or why not wgpu).
 */
async function chooseBackend(asked: BackendChoice): Promise<{ backend: "wgpu" | "cpu"; note: string }> {
  if (asked === "cpu") return { backend: "cpu", note: " (WebAssembly SIMD)" };
  const found = await webGpuAdapter();
  if ("adapter" in found) return { backend: "wgpu", note: ` (WebGPU: ${found.adapter})` };
  if (asked === "wgpu") throw new Error(`backend=wgpu: ${found.missing}`);
  return { backend: "cpu", note: ` (WebAssembly SIMD; not wgpu: ${found.missing})` };
}

let chat: Chat | null = null;
/** A stop asked for while a step is under way, passed on before the next step. */
let stopAsked = false;

function post(message: FromWorker) {
  postMessage(message);
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/** Resolves after the messages already queued for this Worker have been handled. */
const channel = new MessageChannel();
let wake: (() => void) | null = null;
channel.port1.onmessage = () => wake?.();
function yieldToEvents(): Promise<void> {
  return new Promise((resolve) => {
    wake = resolve;
    channel.port2.postMessage(null);
  });
}

/** The bytes of a picked file or of a URL, chunk by chunk, and the total length. */
async function open(source: File | string): Promise<{ total: number; stream: ReadableStream<Uint8Array> }> {
  if (typeof source !== "string") return { total: source.size, stream: source.stream() };
  const response = await fetch(source);
  if (!response.ok) throw new Error(`${source}: HTTP ${response.status} ${response.statusText}`);
  const length = response.headers.get("Content-Length");
  if (length === null || response.body === null)
    throw new Error(`${source}: the server did not say how long the file is (no Content-Length)`);
  return { total: Number(length), stream: response.body };
}

async function load(source: File | string, settings: Settings, threads: number, asked: BackendChoice) {
  const { backend, note } = await chooseBackend(asked);
  const { ModelLoader, startThreads } = await startModule(backend);
  if (startThreads !== undefined && threads > 1) await startThreads(threads - 1);
  const { total, stream } = await open(source);
  const loader = new ModelLoader(total);
  const reader = stream.getReader();
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    loader.push(value);
    received += value.length;
    post({ type: "progress", received, total });
  }
  chat = await loader.load(settings.temperature, settings.seed, settings.maxTokens, threads);
  post({
    type: "loaded",
    description: chat.describe(),
    backend: chat.backend() + note,
    threads: chat.threads?.() ?? 1,
    shared: self.crossOriginIsolated,
  });
}

async function generate(text: string) {
  if (chat === null) throw new Error("load a model first");
  chat.send(text);
  stopAsked = false;
  const onText = (piece: string) => {
    if (piece !== "") post({ type: "token", text: piece });
  };
  for (;;) {
    if (stopAsked) chat.stop();
    const reply = await chat.step(onText);
    if (reply !== undefined) {
      const stats: ReplyStats = {
        nTokens: reply.n_tokens,
        stop: reply.stop,
        promptTokens: reply.prompt_tokens,
        promptTokensPerSecond: reply.prompt_tokens_per_second,
        tokensPerSecond: reply.tokens_per_second,
      };
      reply.free();
      post({ type: "done", stats });
      return;
    }
    await yieldToEvents();
  }
}

onmessage = async (event: MessageEvent<ToWorker>) => {
  const message = event.data;
  try {
    switch (message.type) {
      case "load":
        await load(message.source, message.settings, message.threads, message.backend);
        break;
      case "send":
        await generate(message.text);
        break;
      case "stop":
        stopAsked = true;
        break;
      case "reset":
        chat?.reset();
        break;
    }
  } catch (err) {
    post({ type: "error", message: errorMessage(err) });
  }
};
