#!/bin/sh
# Builds crates/web for the browser, twice (the cpu and the wgpu build), and wraps each with
# wasm-bindgen into src/wasm/, which the page imports. Needs: rustup target add
# wasm32-unknown-unknown; the wasm-bindgen CLI of the crate's wasm-bindgen version
# (cargo install wasm-bindgen-cli --version 0.2.130).
set -eu
cd "$(dirname "$0")"
version=$(sed -n 's/^wasm-bindgen = "=\(.*\)"/\1/p' ../crates/web/Cargo.toml)
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $version"; then
    echo "build-wasm: needs wasm-bindgen $version (cargo install wasm-bindgen-cli --version $version)" >&2
    exit 1
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
wasm="$target_dir/wasm32-unknown-unknown/release/plumb_web.wasm"
# Two builds of the crate, each wrapped before the next overwrites its .wasm: plumb_web on the
# cpu backend, and plumb_web_wgpu (--features wgpu) on the wgpu backend over WebGPU, which
# needs JSPI. The page loads one of them (src/worker.ts).
cargo build --release --target wasm32-unknown-unknown -p plumb-web
wasm-bindgen --target web --out-dir src/wasm "$wasm"
cargo build --release --target wasm32-unknown-unknown -p plumb-web --features wgpu
wasm-bindgen --target web --out-dir src/wasm --out-name plumb_web_wgpu "$wasm"
