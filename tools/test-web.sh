#!/bin/sh
# The chat page end to end in headless Chromium (tools/test-web.mjs, playwright-core): builds
# the WebAssembly module and the page (npm --prefix web ci && npm --prefix web run build) and
# native plumb, then loads smollm2-135m in the page and holds its replies at temperature 0 to
# native `plumb run --chat`'s, on 1 thread, on 2 (the threaded build) and on a page that is not
# cross-origin isolated (the single-threaded build), stops a reply, and checks the errors of
# bad files; then (tools/test-webgpu.mjs) loads it on the wgpu backend over Chromium's software
# WebGPU adapter (SwiftShader) and holds one reply to native `plumb run --backend ref`'s.
#
# Needs: Debian's chromium (apt-get install --no-install-recommends chromium; Playwright's own
# browser download is not used), node and npm, the wasm32-unknown-unknown Rust target, the
# nightly that web/build-wasm.sh pins (with rust-src), the wasm-bindgen CLI of crates/web's
# version, and smollm2-135m pulled (plumb pull smollm2-135m).
set -eu
cd "$(dirname "$0")/.."
: "${CHROMIUM:=$(command -v chromium || command -v chromium-headless-shell || true)}"
: "${PLUMB_MODELS:=${XDG_CACHE_HOME:-$HOME/.cache}/plumb/models}"
model="$PLUMB_MODELS/smollm2-135m.gguf"
missing=""
[ -n "$CHROMIUM" ] || missing="$missing chromium (apt-get install --no-install-recommends chromium)"
command -v npm >/dev/null || missing="$missing npm"
[ -f "$model" ] || missing="$missing $model (plumb pull smollm2-135m)"
if [ -n "$missing" ]; then
    echo "test-web: needs:$missing" >&2
    exit 1
fi
npm --prefix web ci --no-audit --no-fund
npm --prefix web run build
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
# The native binary the replies are checked against: $PLUMB where set (tools/test-all.sh
# gives the one its tests built), else built here.
if [ -z "${PLUMB:-}" ]; then
    cargo build --release -q -p plumb
    PLUMB="$target_dir/release/plumb"
fi
out="$target_dir/test-web"
mkdir -p "$out"
CHROMIUM="$CHROMIUM" PLUMB="$PLUMB" MODEL="$model" DIST="$(pwd)/web/dist" \
    OUT="$out" node tools/test-web.mjs
CHROMIUM="$CHROMIUM" PLUMB="$PLUMB" MODEL="$model" DIST="$(pwd)/web/dist" \
    node tools/test-webgpu.mjs
