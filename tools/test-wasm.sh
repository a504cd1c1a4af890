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
# Both runs name the same three packages, so that their dependencies resolve to the same
# features and are compiled once: one package at a time, half, plumb-gguf, plumb-ggml and more
# were compiled again for each. The target flags apply to every package named: --lib runs the
# three crates' unit tests, each --test NAME the test of that name in whichever package has it.
wasm_test() {
    cargo test --release --target wasm32-wasip1 -p plumb-ggml -p plumb-backend-cpu -p plumb-engine "$@"
}
# Every test and example of plumb-ggml (the examples compiled only, as plain cargo test -p
# plumb-ggml does), the unit tests of all three, and the engine's sampler tests.
ggml_targets=""
for test in crates/ggml/tests/*.rs; do
    ggml_targets="$ggml_targets --test $(basename "$test" .rs)"
done
for example in crates/ggml/examples/*.rs; do
    ggml_targets="$ggml_targets --example $(basename "$example" .rs)"
done
# shellcheck disable=SC2086 # one word per flag
wasm_test --lib $ggml_targets --test sampling "$@"
wasm_test --test golden smollm2_on_cpu "$@"
