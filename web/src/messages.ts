// The messages between the page (main.ts) and the inference Worker (worker.ts).

/** Sampling a reply: temperature (0 is greedy), seed, and new tokens at most (-1: no limit). */
export interface Settings {
  temperature: number;
  seed: number;
  maxTokens: number;
}

/**
 * The backend a model runs on: wgpu (the page's WebGPU) or cpu (WebAssembly SIMD); auto is
 * wgpu where WebGPU gives an adapter and JSPI exists, else cpu.
 */
export type BackendChoice = "auto" | "wgpu" | "cpu";

export type ToWorker =
  | { type: "load"; source: File | string; settings: Settings; threads: number; backend: BackendChoice }
  | { type: "send"; text: string }
  | { type: "stop" }
  | { type: "reset" };

export interface ReplyStats {
  nTokens: number;
  stop: string;
  promptTokens: number;
  promptTokensPerSecond: number;
  tokensPerSecond: number;
}

export type FromWorker =
  | { type: "progress"; received: number; total: number }
  /**
   * `backend`: what the model runs on, and why where auto chose cpu; `threads`: what the cpu
   * backend computes on (1 on wgpu); `shared`: whether memory could be shared.
   */
  | { type: "loaded"; description: string; backend: string; threads: number; shared: boolean }
  | { type: "token"; text: string }
  | { type: "done"; stats: ReplyStats }
  | { type: "error"; message: string };
