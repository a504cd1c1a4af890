// The messages between the page (main.ts) and the inference Worker (worker.ts).

/** Sampling a reply: temperature (0 is greedy), seed, and new tokens at most (-1: no limit). */
export interface Settings {
  temperature: number;
  seed: number;
  maxTokens: number;
}

export type ToWorker =
  | { type: "load"; source: File | string; settings: Settings; threads: number }
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
  /** `threads`: what the model computes on; `shared`: whether memory could be shared. */
  | { type: "loaded"; description: string; threads: number; shared: boolean }
  | { type: "token"; text: string }
  | { type: "done"; stats: ReplyStats }
  | { type: "error"; message: string };
