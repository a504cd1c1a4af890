// The messages between the page (main.ts) and the inference Worker (worker.ts).

/** Sampling a reply: temperature (0 is greedy), seed, and new tokens at most (-1: no limit). */
export interface Settings {
  temperature: number;
  seed: number;
  maxTokens: number;
}

export type ToWorker =
  | { type: "load"; source: File | string; settings: Settings }
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
  | { type: "loaded"; description: string }
  | { type: "token"; text: string }
  | { type: "done"; stats: ReplyStats }
  | { type: "error"; message: string };
