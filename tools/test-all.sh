#!/bin/sh
# The whole test suite, as CI runs it (.ci/run) and as README.md gives it:
#   formatting and lints (native, and the core crates for the browser's wasm32-unknown-unknown),
#   the test models and llama.cpp's tokenizer test vocabularies (fetched once, then cached),
#   every crate's tests in release mode against the reference data in testdata/, on x86-64
#   the NEON kernels under qemu user emulation, the core crates' tests in WebAssembly
#   under node (tools/test-wasm.sh), and the chat page in headless Chromium (tools/test-web.sh).
#
# Needs the Rust toolchain (rustup) and python3; everything else it needs (rustup targets and
# components, the pinned nightly, the wasm-bindgen CLI, qemu-user and the aarch64 cross gcc,
# node and npm, chromium, Mesa's lavapipe) tools/install-test-deps.sh installs first where it
# is missing (Debian packages with root or sudo). The wgpu backend's tests run on the Vulkan
# driver that VK_DRIVER_FILES names; unset, on Mesa's lavapipe (the same adapter on every
# machine, GPU or not); with no adapter they skip loudly.
set -eu
cd "$(dirname "$0")/.."
tools/install-test-deps.sh

if [ -z "${VK_DRIVER_FILES:-}" ]; then
    for icd in /usr/share/vulkan/icd.d/lvp_icd.*.json; do
        if [ -e "$icd" ]; then
            VK_DRIVER_FILES="$icd"
            export VK_DRIVER_FILES
            break
        fi
    done
fi
# NVRTC from the wheel tools/install-test-deps.sh fetched, so that the CUDA kernels are
# compiled (not run) on machines with no CUDA installed.
LD_LIBRARY_PATH="${XDG_CACHE_HOME:-$HOME/.cache}/plumb/nvrtc-13.0.88/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export LD_LIBRARY_PATH
# lavapipe asks for a runtime directory, which a container may not have.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    XDG_RUNTIME_DIR="$(mktemp -d)"
    export XDG_RUNTIME_DIR
fi

# Each step's heading carries the seconds since the start, so that a CI log shows where the
# time goes.
started=$(date +%s)
step() { echo "== $* (at $(($(date +%s) - started)) s)"; }

step "cargo fmt --check"
cargo fmt --all --check
step "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
step "cargo clippy for the browser (wasm32-unknown-unknown)"
# The crates a page needs: everything from the GGUF reader to the engine, and the page's API.
cargo clippy --target wasm32-unknown-unknown -p plumb-gguf -p plumb-ggml -p plumb-tokenizer \
    -p plumb-model -p plumb-backend-cpu -p plumb-engine -p plumb-web -- -D warnings
step "cargo clippy for the browser's threaded module (nightly, std with atomics)"
sh web/build-wasm.sh clippy
# The page's wgpu build: the wgpu backend on WebGPU, and plumb-web on it.
cargo clippy --target wasm32-unknown-unknown -p plumb-backend-wgpu -p plumb-web --features plumb-web/wgpu \
    -- -D warnings
step "the wgpu backend for Apple silicon (Metal), compiled only"
cargo clippy --target aarch64-apple-darwin -p plumb-backend-wgpu -- -D warnings
step "test models"
cargo run --release -q -p plumb -- pull all
step "llama.cpp tokenizer test vocabularies"
crates/tokenizer/scripts/fetch-llama-vocabs.sh
step "cargo test"
# Every test binary runs, so that one failure does not hide the others.
cargo test --workspace --release --no-fail-fast
if [ "$(uname -m)" = x86_64 ]; then
    step "NEON kernels under qemu"
    tools/test-aarch64.sh
fi
step "the core crates' tests in WebAssembly, under node"
tools/test-wasm.sh
step "the chat page in headless Chromium"
tools/test-web.sh
echo "test-all: every step passed in $(($(date +%s) - started)) s"
