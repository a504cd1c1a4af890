// The inference Worker: loads a model into plumb's WebAssembly module and generates replies
// one forward pass at a time, posting each piece of text as it comes. Between passes it
// yields to its event loop, so that a stop request is taken within one token. A Worker holds
// one model; the page starts a new Worker to load another.
//
// Where the page is cross-origin isolated, so that WebAssembly memory can be shared, it runs
// the threaded build (src/wasm-threads/) and starts the Workers of its threads (thread.ts)
// before loading; elsewhere the single-threaded build (src/wasm/).

import * as single from "./wasm/plumb_web.js";
import singleUrl from "./wasm/plumb_web_bg.wasm?url";
import * as threaded from "./wasm-threads/plumb_web.js";
import threadedUrl from "./wasm-threads/plumb_web_bg.wasm?url";
import type { FromWorker, ReplyStats, Settings, ToWorker } from "./messages";

const wasm = self.crossOriginIsolated ? threaded : single;
const ready = wasm.default({ module_or_path: self.crossOriginIsolated ? threadedUrl : singleUrl });
let chat: single.Chat | null = null;

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

/**
 * Starts `n` Workers that become threads of the threaded build, each an instance over this
 * one's module and shared memory, and waits until every one is ready for work.
 */
async function startThreads(n: number) {
  const [module, memory] = threaded.shared_module();
  const started = [];
  for (let i = 0; i < n; i++) {
    const thread = new Worker(new URL("./thread.ts", import.meta.url), { type: "module" });
    started.push(
      new Promise<void>((resolve, reject) => {
        thread.onmessage = () => resolve();
        thread.onerror = (event) => reject(new Error(`a thread's Worker failed: ${event.message}`));
      }),
    );
    thread.postMessage({ module, memory });
  }
  await Promise.all(started);
}

async function load(source: File | string, settings: Settings, threads: number) {
  await ready;
  if (wasm === threaded && threads > 1) await startThreads(threads - 1);
  const { total, stream } = await open(source);
  const loader = new wasm.ModelLoader(total);
  const reader = stream.getReader();
  let received = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    loader.push(value);
    received += value.length;
    post({ type: "progress", received, total });
  }
  chat = loader.load(settings.temperature, settings.seed, settings.maxTokens, threads);
  post({ type: "loaded", description: chat.describe(), threads: chat.threads(), shared: self.crossOriginIsolated });
}

async function generate(text: string) {
  if (chat === null) throw new Error("load a model first");
  chat.send(text);
  const onText = (piece: string) => {
    if (piece !== "") post({ type: "token", text: piece });
  };
  for (;;) {
    const reply = chat.step(onText);
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
        await load(message.source, message.settings, message.threads);
        break;
      case "send":
        await generate(message.text);
        break;
      case "stop":
        chat?.stop();
        break;
      case "reset":
        chat?.reset();
        break;
    }
  } catch (err) {
    post({ type: "error", message: errorMessage(err) });
  }
};
