// The chat page: the controls, the conversation, and the Worker that runs plumb
// (worker.ts). The elements carry data-testid attributes that the Playwright test
// (tools/test-web.mjs) drives; see the README's "In the browser".

import type { BackendChoice, FromWorker, Settings, ToWorker } from "./messages";
import { readParams } from "./params";

/** What the page says about threads once a model is loaded. */
function threadsNote(threads: number, asked: number, shared: boolean): string {
  if (!shared)
    return (
      "Runs on 1 thread: this page is not cross-origin isolated (served without the headers " +
      "Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), " +
      "so WebAssembly cannot share memory between Workers."
    );
  const note = threads === 1 ? "Runs on 1 thread" : `Runs on ${threads} threads (Web Workers over shared memory)`;
  return threads < asked ? `${note}; ${asked} were asked for, and only ${threads} started.` : `${note}.`;
}

function element<T extends HTMLElement>(testid: string): T {
  return document.querySelector<T>(`[data-testid="${testid}"]`)!;
}

const ui = {
  file: element<HTMLInputElement>("model-file"),
  url: element<HTMLInputElement>("model-url"),
  loadUrl: element<HTMLButtonElement>("load-url"),
  progress: element<HTMLProgressElement>("load-progress"),
  prompt: element<HTMLTextAreaElement>("prompt"),
  send: element<HTMLButtonElement>("send"),
  stop: element<HTMLButtonElement>("stop"),
  tokensPerSecond: element<HTMLSpanElement>("tokens-per-second"),
  error: element<HTMLParagraphElement>("error"),
  status: element<HTMLElement>("status"),
  messages: document.querySelector<HTMLElement>(".messages")!,
  modelInfo: document.querySelector<HTMLElement>(".model-info")!,
  threads: document.querySelector<HTMLElement>(".threads")!,
  backend: element<HTMLElement>("backend"),
  compose: document.querySelector<HTMLFormElement>(".compose")!,
  newChat: document.querySelector<HTMLButtonElement>(".new-chat")!,
};

type State = "no model" | "loading" | "ready" | "generating";
let state: State = "no model";
let worker: Worker | null = null;
let reply: HTMLElement | null = null;
let settings: Settings = { temperature: 0.8, seed: 0, maxTokens: 1024 };
let pendingPrompt: string | null = null;
let askedThreads = 1;
let backendChoice: BackendChoice = "auto";

function setState(next: State) {
  state = next;
  ui.status.textContent = next;
  ui.send.disabled = next !== "ready";
  ui.stop.disabled = next !== "generating";
  ui.newChat.disabled = next !== "ready";
  ui.loadUrl.disabled = next === "loading" || next === "generating";
  ui.file.disabled = ui.loadUrl.disabled;
}

function showError(message: string | null) {
  ui.error.textContent = message ?? "";
  ui.error.hidden = message === null;
}

function addMessage(role: "user" | "assistant", text: string): HTMLElement {
  const div = document.createElement("div");
  div.className = `message ${role}`;
  div.textContent = text;
  ui.messages.append(div);
  div.scrollIntoView({ block: "end" });
  return div;
}

function tell(message: ToWorker) {
  worker?.postMessage(message);
}

function onWorker(event: MessageEvent<FromWorker>) {
  const message = event.data;
  switch (message.type) {
    case "progress":
      ui.progress.value = message.total > 0 ? message.received / message.total : 0;
      break;
    case "loaded":
      ui.progress.value = 1;
      ui.modelInfo.textContent = message.description;
      ui.backend.textContent = message.backend;
      ui.threads.textContent = message.backend.startsWith("wgpu")
        ? "Runs on the GPU through WebGPU, driven from one Worker."
        : threadsNote(message.threads, askedThreads, message.shared);
      setState("ready");
      if (pendingPrompt !== null) {
        const text = pendingPrompt;
        pendingPrompt = null;
        ui.prompt.value = "";
        send(text);
      }
      break;
    case "token":
      if (reply !== null) {
        reply.textContent += message.text;
        reply.scrollIntoView({ block: "end" });
      }
      break;
    case "done":
      ui.tokensPerSecond.textContent = message.stats.tokensPerSecond.toFixed(1);
      ui.tokensPerSecond.title =
        `${message.stats.nTokens} tokens, stop: ${message.stats.stop}; prompt: ` +
        `${message.stats.promptTokens} tokens at ${message.stats.promptTokensPerSecond.toFixed(1)}/s`;
      setState("ready");
      break;
    case "error":
      showError(message.message);
      // A failed load leaves no model; a failed reply leaves the model ready.
      setState(state === "loading" ? "no model" : "ready");
      break;
  }
}

/** Loads a model in a new Worker: the old one, and its memory, go. */
function load(source: File | string) {
  worker?.terminate();
  showError(null);
  ui.messages.replaceChildren();
  ui.progress.value = 0;
  ui.modelInfo.textContent = "";
  ui.backend.textContent = "–";
  ui.tokensPerSecond.textContent = "–";
  reply = null;
  setState("loading");
  worker = new Worker(new URL("./worker.ts", import.meta.url), { type: "module" });
  worker.onmessage = onWorker;
  worker.onerror = (event) => {
    showError(`the Worker failed: ${event.message}`);
    setState("no model");
  };
  tell({ type: "load", source, settings, threads: askedThreads, backend: backendChoice });
}

function send(text: string) {
  if (state !== "ready" || text.trim() === "") return;
  showError(null);
  addMessage("user", text);
  // Only the last assistant message carries data-testid="reply".
  reply?.removeAttribute("data-testid");
  reply = addMessage("assistant", "");
  reply.dataset.testid = "reply";
  setState("generating");
  tell({ type: "send", text });
}

ui.file.addEventListener("change", () => {
  const file = ui.file.files?.[0];
  if (file) load(file);
});
ui.loadUrl.addEventListener("click", () => {
  const url = ui.url.value.trim();
  if (url !== "") load(new URL(url, location.href).href);
});
ui.compose.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.prompt.value;
  ui.prompt.value = "";
  send(text);
});
ui.prompt.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    ui.compose.requestSubmit();
  }
});
ui.stop.addEventListener("click", () => tell({ type: "stop" }));
ui.newChat.addEventListener("click", () => {
  ui.messages.replaceChildren();
  reply = null;
  tell({ type: "reset" });
});

setState("no model");
try {
  const params = readParams(location.search);
  settings = params.settings;
  askedThreads = params.threads;
  backendChoice = params.backend;
  if (!crossOriginIsolated) ui.threads.textContent = threadsNote(1, askedThreads, false);
  if (params.prompt !== null) {
    ui.prompt.value = params.prompt;
    if (params.autorun) pendingPrompt = params.prompt;
  }
  if (params.model !== null) {
    ui.url.value = params.model;
    load(new URL(params.model, location.href).href);
  }
} catch (err) {
  showError(err instanceof Error ? err.message : String(err));
}
