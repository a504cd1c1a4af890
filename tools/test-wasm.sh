#!/bin/sh
# Builds the core crates' tests for wasm32-wasip1 with SIMD128 and runs them under node's WASI
# (tools/wasi-run.mjs): ggml's kernels (SIMD128 against the scalar reference), the cpu
# backend's unit tests (lanes, row kernels, attention against the reference), the engine's
# sampler, and smollm2-135m on the cpu backend against llama.cpp's golden outputs, end to end
# in WebAssembly. WASI has no threads, so the cpu backend runs on the caller's thread alone.
# The slower model tests (the other models, the f32 reference backend) stay native-only.
#
# Needs: rustup target add wasm32-wasip1; node (18 or later).
# Extra arguments go to every cargo test (e.g. a test name filter).
set -eu
cd "$(dirname "$0")/.."
root="$(pwd)"
missing=""
command -v node >/dev/null || missing="$missing node"
rustup target list --installed 2>/dev/null | grep -qx wasm32-wasip1 ||
    missing="$missing the wasm32-wasip1 Rust target (rustup target add wasm32-wasip1)"
if [ -n "$missing" ]; then
    echo "test-wasm: needs:$missing" >&2
    exit 1
fi
# The tests cannot link the model cache's crate there; they are told where the models are.
: "${PLUMB_MODELS:=${XDG_CACHE_HOME:-$HOME/.cache}/plumb/models}"
export PLUMB_MODELS
export CARGO_TARGET_WASM32_WASIP1_RUNNER="node --no-warnings --single-threaded-gc $root/tools/wasi-run.mjs"
# WebAssembly aborts on panic, which loses a captured test's message: print it as it comes.
export RUST_TEST_NOCAPTURE=1
wasm_test() {
    cargo test --release --target wasm32-wasip1 "$@"
}
wasm_test -p plumb-ggml "$@"
wasm_test -p plumb-backend-cpu --lib "$@"
wasm_test -p plumb-backend-cpu --test golden smollm2_on_cpu "$@"
wasm_test -p plumb-engine --lib --test sampling "$@"
