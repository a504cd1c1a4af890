#!/bin/sh
# The whole test suite, as CI runs it (.ci/run) and as README.md gives it:
#   formatting, the wgpu backend's build for Apple silicon (Metal), the tests' build, the test
#   models and llama.cpp's tokenizer test vocabularies (fetched once, then cached), every
#   crate's tests in release mode against the reference data in testdata/,
#   on x86-64 the NEON kernels under qemu user emulation, the core crates' tests in WebAssembly
#   under node (tools/test-wasm.sh), and the chat page in headless Chromium (tools/test-web.sh),
#   every build of the workspace's crates linted by clippy as it compiles (below).
#
# Needs the Rust toolchain (rustup) and python3; everything else it needs (rustup targets and
# components, the pinned nightly, the wasm-bindgen CLI, qemu-user and the aarch64 cross gcc,
# node and npm, chromium, Mesa's lavapipe) tools/install-test-deps.sh installs first where it
# is missing (Debian packages with root or sudo). The wgpu backend's tests run on the Vulkan
# driver that VK_DRIVER_FILES names; unset, on Mesa's lavapipe (the same adapter on every
# machine, GPU or not); with no adapter they skip loudly.
set -eu
cd "$(dirname "$0")/.."

# This is README.md's test command (its sh block after "**Run the tests**"), which CI runs
# (.ci/run): stop, naming both, where the README has come to say anything else.
readme_command=$(awk '/^\*\*Run the tests\*\*/ { found = 1 }
                      found && /^```sh$/ { inside = 1; next }
                      inside && /^```$/ { exit }
                      inside { print }' README.md)
if [ "$readme_command" != "tools/test-all.sh" ]; then
    echo "test-all: README.md's test command (its sh block after \"**Run the tests**\") is" >&2
    echo "  ${readme_command:-(none)}" >&2
    echo "but CI (.ci/run) runs tools/test-all.sh: make them the same" >&2
    exit 1
fi

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
step "the wgpu backend for Apple silicon (Metal), compiled only"
cargo clippy --target aarch64-apple-darwin -p plumb-backend-wgpu -- -D warnings

# Every build below compiles the workspace's crates through clippy-driver, as `cargo clippy`
# does, with `-D warnings`: the lints of `cargo clippy --all-targets -- -D warnings` come with
# the compilation the tests need anyway (cargo test builds the libraries, binaries, examples
# and tests), for every target the suite builds: x86-64, the browser's wasm32-unknown-unknown
# (plain, wgpu and threaded: web/build-wasm.sh), wasm32-wasip1 and aarch64. A separate
# `cargo clippy` per target took a quarter of CI's time. CLIPPY_ARGS is how cargo-clippy hands
# clippy-driver its flags; the canary makes sure it still does, so that lints cannot stop
# failing the suite unnoticed.
RUSTC_WORKSPACE_WRAPPER=clippy-driver
CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
export RUSTC_WORKSPACE_WRAPPER CLIPPY_ARGS
canary="$(mktemp -d)"
printf 'fn main() {\n    let v: Vec<u8> = Vec::new();\n    println!("{}", v.len() == 0);\n}\n' >"$canary/main.rs"
if clippy-driver rustc --edition 2021 --crate-type bin --emit=metadata --out-dir "$canary" \
    "$canary/main.rs" 2>"$canary/lints" || ! grep -q "clippy::len_zero" "$canary/lints"; then
    cat "$canary/lints" >&2
    echo "test-all: clippy-driver did not deny clippy::len_zero under CLIPPY_ARGS=-D warnings;" \
        "lint with cargo clippy instead" >&2
    exit 1
fi
rm -r "$canary"
step "cargo test: build"
# The tests build the plumb binary too (the CLI's tests run it): that one fetches the models
# and serves the chat page. Building it apart (cargo build -p plumb) would compile a hundred
# crates again with that package's features alone.
cargo test --workspace --release --no-run
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
PLUMB="$target_dir/release/plumb"
export PLUMB
step "test models"
"$PLUMB" pull all
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
