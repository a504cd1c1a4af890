// A static file server for the chat page's test (tools/test-web.mjs) and benchmark
// (bench/web_compare.mjs): each request's file is `resolve(path)` (null, or no such file: 404),
// sent with the content type a browser needs for WebAssembly and the cross-origin isolation
// headers (COOP/COEP) that `plumb serve --web` also sends, unless `isolated` is false (a
// plain static server: the page is then single-threaded). It listens on a free local port.

import { createReadStream, existsSync, statSync } from "node:fs";
import { createServer } from "node:http";
import { extname } from "node:path";

const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm" };

/** Starts the server; returns it and its base URL (`http://127.0.0.1:PORT`). */
export async function serveFiles(resolve, { isolated = true } = {}) {
  const isolation = isolated
    ? { "Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp" }
    : {};
  const server = createServer((request, response) => {
    const file = resolve(decodeURIComponent(new URL(request.url, "http://x").pathname));
    if (!file || !existsSync(file) || !statSync(file).isFile()) {
      response.writeHead(404).end("not found");
      return;
    }
    response.writeHead(200, {
      "Content-Type": TYPES[extname(file)] ?? "application/octet-stream",
      "Content-Length": statSync(file).size,
      ...isolation,
    });
    createReadStream(file).pipe(response);
  });
  await new Promise((listening) => server.listen(0, "127.0.0.1", listening));
  return { server, base: `http://127.0.0.1:${server.address().port}` };
}
