// The inference Worker: loads a model into plumb's WebAssembly module and generates replies
// one forward pass at a time, posting each piece of text as it comes. Between passes it
// yields to its event loop, so that a stop request is taken within one token. A Worker holds
// one model; the page starts a new Worker to load another.

import init, { Chat, ModelLoader } from "./wasm/plumb_web.js";
import wasmUrl from "./wasm/plumb_web_bg.wasm?url";
import type { FromWorker, ReplyStats, Settings, ToWorker } from "./messages";

const ready = init({ module_or_path: wasmUrl });
let chat: Chat | null = null;

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

async function load(source: File | string, settings: Settings) {
  await ready;
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
  chat = loader.load(settings.temperature, settings.seed, settings.maxTokens);
  post({ type: "loaded", description: chat.describe() });
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
        await load(message.source, message.settings);
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
