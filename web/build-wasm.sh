#!/bin/sh
# Builds crates/web for the browser three times and wraps each with wasm-bindgen for the page:
# - src/wasm/plumb_web: the cpu backend, single-threaded, with stable Rust, for pages that are
#   not cross-origin isolated;
# - src/wasm-threads/: the cpu backend with threads over shared memory (+atomics), for
#   cross-origin isolated pages. std must be rebuilt with atomics, which only a nightly
#   toolchain does (-Z build-std); the nightly is pinned here. The linker makes the memory
#   shared and imported (each thread's instance imports the one memory), up to 4 GiB, and
#   exports what wasm-bindgen needs to give each thread its own thread-local storage;
# - src/wasm/plumb_web_wgpu (--features wgpu): the wgpu backend over WebGPU, which waits for
#   the GPU through JSPI; wasm-bindgen refuses JSPI with atomics, so it is single-threaded.
# Needs: rustup target add wasm32-unknown-unknown; rustup toolchain install $NIGHTLY
# --profile minimal --component rust-src; the wasm-bindgen CLI of the crate's wasm-bindgen
# version (cargo install wasm-bindgen-cli --version 0.2.130).
#
# tools/test-all.sh runs it with cargo's RUSTC_WORKSPACE_WRAPPER set to clippy-driver, so that
# all three builds are linted too (the threaded one by the nightly's clippy, through rustup's
# proxy).
set -eu
cd "$(dirname "$0")"
NIGHTLY=nightly-2026-05-20
version=$(sed -n 's/^wasm-bindgen = "=\(.*\)"/\1/p' ../crates/web/Cargo.toml)
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $version"; then
    echo "build-wasm: needs wasm-bindgen $version (cargo install wasm-bindgen-cli --version $version)" >&2
    exit 1
fi
if ! rustup run "$NIGHTLY" rustc --print sysroot >/dev/null 2>&1 ||
    [ ! -d "$(rustup run "$NIGHTLY" rustc --print sysroot)/lib/rustlib/src/rust/library" ]; then
    echo "build-wasm: needs $NIGHTLY with rust-src (rustup toolchain install $NIGHTLY --profile minimal --component rust-src)" >&2
    exit 1
fi
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
link="--shared-memory --import-memory --max-memory=4294967296 --export=__wasm_init_tls --export=__tls_size --export=__tls_align --export=__tls_base"
# RUSTFLAGS replaces .cargo/config.toml's flags for the target, so SIMD128 is named again.
threaded_flags="-C target-feature=+simd128,+atomics,+bulk-memory,+mutable-globals $(printf -- ' -C link-arg=%s' $link)"

# The two stable builds share one .wasm path: each is wrapped before the next overwrites it.
wasm="$target_dir/wasm32-unknown-unknown/release/plumb_web.wasm"
cargo build --release --target wasm32-unknown-unknown -p plumb-web
wasm-bindgen --target web --out-dir src/wasm "$wasm"
cargo build --release --target wasm32-unknown-unknown -p plumb-web --features wgpu
wasm-bindgen --target web --out-dir src/wasm --out-name plumb_web_wgpu "$wasm"

RUSTFLAGS="$threaded_flags" \
    cargo "+$NIGHTLY" build --release --target wasm32-unknown-unknown -p plumb-web \
    -Z build-std=std,panic_abort --target-dir "$target_dir/wasm-threads"
wasm-bindgen --target web --out-dir src/wasm-threads \
    "$target_dir/wasm-threads/wasm32-unknown-unknown/release/plumb_web.wasm"
