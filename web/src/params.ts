// The page's URL parameters: model=URL loads a model at start; temp, n, seed and threads set
// sampling and threads; prompt=TEXT&autorun=1 sends that prompt once the model is loaded;
// backend=wgpu|cpu forces a backend (by default wgpu where WebGPU gives an adapter, else cpu).

import type { BackendChoice, Settings } from "./messages";

export interface PageParams {
  model: string | null;
  settings: Settings;
  /**
   * Threads asked for: by default as many as the machine has cores, up to 4 (more rarely
   * helps a small model's decoding, whose speed is the memory's). A page that is not
   * cross-origin isolated runs on one.
   */
  threads: number;
  prompt: string | null;
  autorun: boolean;
  backend: BackendChoice;
}

function number(params: URLSearchParams, name: string, fallback: number): number {
  const text = params.get(name);
  if (text === null || text === "") return fallback;
  const value = Number(text);
  if (!Number.isFinite(value)) throw new Error(`URL parameter ${name}=${text} is not a number`);
  return value;
}

export function readParams(search: string): PageParams {
  const params = new URLSearchParams(search);
  const temperature = number(params, "temp", 0.8);
  if (temperature < 0) throw new Error(`URL parameter temp=${temperature} must be 0 or more`);
  const seed = number(params, "seed", Math.floor(Math.random() * 0xffff_fffe));
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffff_fffe)
    throw new Error(`URL parameter seed=${seed} must be a whole number from 0 to 4294967294`);
  const maxTokens = number(params, "n", 1024);
  if (!Number.isInteger(maxTokens))
    throw new Error(`URL parameter n=${maxTokens} must be a whole number (-1: no limit)`);
  const threads = number(params, "threads", Math.min(4, navigator.hardwareConcurrency || 1));
  if (!Number.isInteger(threads) || threads < 1)
    throw new Error(`URL parameter threads=${threads} must be 1 or more`);
  const backend = params.get("backend") ?? "auto";
  if (backend !== "auto" && backend !== "wgpu" && backend !== "cpu")
    throw new Error(`URL parameter backend=${backend} must be wgpu or cpu`);
  return {
    model: params.get("model"),
    settings: { temperature, seed, maxTokens },
    threads,
    prompt: params.get("prompt"),
    autorun: params.get("autorun") === "1",
    backend,
  };
}
