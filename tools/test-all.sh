#!/bin/sh
# The whole test suite, as CI runs it (.ci/run) and as README.md gives it:
#   formatting and lints (native, and the core crates for the browser's wasm32-unknown-unknown),
#   the test models and llama.cpp's tokenizer test vocabularies (fetched once, then cached),
#   every crate's tests in release mode against the reference data in testdata/, on x86-64
#   the NEON kernels under qemu user emulation, the core crates' tests in WebAssembly
#   under node (tools/test-wasm.sh), and the chat page in headless Chromium (tools/test-web.sh).
#
# Needs, besides the Rust toolchain (with clippy and rustfmt), python3 with pip, node and npm:
#   rustup target add aarch64-unknown-linux-gnu aarch64-apple-darwin wasm32-unknown-unknown wasm32-wasip1
#   apt-get install qemu-user gcc-aarch64-linux-gnu
#   apt-get install --no-install-recommends chromium
#   cargo install wasm-bindgen-cli --version 0.2.130   (crates/web's wasm-bindgen version)
#   rustup toolchain install nightly-2026-05-20 --profile minimal --component rust-src,clippy
#     (the page's threaded build: NIGHTLY in web/build-wasm.sh, which checks for it)
# A missing one is an error before anything runs, not a skip. The wgpu backend's tests run on
# the Vulkan driver that VK_DRIVER_FILES names; unset, on Mesa's lavapipe where it is installed
# (apt-get install mesa-vulkan-drivers libvulkan1: the same adapter on every machine, GPU or
# not), else on whatever the loader finds; with no adapter they skip loudly.
set -eu
cd "$(dirname "$0")/.."

if [ -z "${VK_DRIVER_FILES:-}" ]; then
    for icd in /usr/share/vulkan/icd.d/lvp_icd.*.json; do
        if [ -e "$icd" ]; then
            VK_DRIVER_FILES="$icd"
            export VK_DRIVER_FILES
            break
        fi
    done
fi
# lavapipe asks for a runtime directory, which a container may not have.
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    XDG_RUNTIME_DIR="$(mktemp -d)"
    export XDG_RUNTIME_DIR
fi

# The wgpu backend's Metal path is compiled for Apple silicon, though nothing here runs it.
rustup target list --installed 2>/dev/null | grep -qx aarch64-apple-darwin || {
    echo "test-all: the Metal build check needs the aarch64-apple-darwin Rust target" \
        "(rustup target add aarch64-apple-darwin)" >&2
    exit 1
}

if [ "$(uname -m)" = x86_64 ]; then
    missing=""
    command -v qemu-aarch64 >/dev/null || missing="$missing qemu-aarch64 (apt-get install qemu-user)"
    command -v aarch64-linux-gnu-gcc >/dev/null ||
        missing="$missing aarch64-linux-gnu-gcc (apt-get install gcc-aarch64-linux-gnu)"
    rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu ||
        missing="$missing the aarch64 Rust target (rustup target add aarch64-unknown-linux-gnu)"
    if [ -n "$missing" ]; then
        echo "test-all: the NEON tests under qemu need:$missing" >&2
        exit 1
    fi
fi
missing=""
command -v node >/dev/null || missing="$missing node"
command -v npm >/dev/null || missing="$missing npm"
command -v chromium >/dev/null || command -v chromium-headless-shell >/dev/null ||
    missing="$missing chromium (apt-get install --no-install-recommends chromium)"
wasm_bindgen=$(sed -n 's/^wasm-bindgen = "=\(.*\)"/\1/p' crates/web/Cargo.toml)
wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $wasm_bindgen" ||
    missing="$missing wasm-bindgen $wasm_bindgen (cargo install wasm-bindgen-cli --version $wasm_bindgen)"
for target in wasm32-unknown-unknown wasm32-wasip1; do
    rustup target list --installed 2>/dev/null | grep -qx $target ||
        missing="$missing the $target Rust target (rustup target add $target)"
done
if [ -n "$missing" ]; then
    echo "test-all: the WebAssembly steps need:$missing" >&2
    exit 1
fi

echo "== cargo fmt --check"
cargo fmt --all --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo clippy for the browser (wasm32-unknown-unknown)"
# The crates a page needs: everything from the GGUF reader to the engine, and the page's API.
cargo clippy --target wasm32-unknown-unknown -p plumb-gguf -p plumb-ggml -p plumb-tokenizer \
    -p plumb-model -p plumb-backend-cpu -p plumb-engine -p plumb-web -- -D warnings
echo "== cargo clippy for the browser's threaded module (nightly, std with atomics)"
sh web/build-wasm.sh clippy
# The page's wgpu build: the wgpu backend on WebGPU, and plumb-web on it.
cargo clippy --target wasm32-unknown-unknown -p plumb-backend-wgpu -p plumb-web --features plumb-web/wgpu \
    -- -D warnings
echo "== the wgpu backend for Apple silicon (Metal), compiled only"
cargo clippy --target aarch64-apple-darwin -p plumb-backend-wgpu -- -D warnings
echo "== test models"
cargo run --release -q -p plumb -- pull all
echo "== llama.cpp tokenizer test vocabularies"
crates/tokenizer/scripts/fetch-llama-vocabs.sh
echo "== cargo test"
# Every test binary runs, so that one failure does not hide the others.
cargo test --workspace --release --no-fail-fast
if [ "$(uname -m)" = x86_64 ]; then
    echo "== NEON kernels under qemu"
    tools/test-aarch64.sh
fi
echo "== the core crates' tests in WebAssembly, under node"
tools/test-wasm.sh
echo "== the chat page in headless Chromium"
tools/test-web.sh
echo "test-all: every step passed"
