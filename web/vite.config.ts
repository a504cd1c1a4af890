import { defineConfig } from "vite";

// Relative asset paths, so that dist/ works from any static server and under any path.
export default defineConfig({
  base: "./",
  worker: { format: "es" },
  build: { target: "es2022" },
});
