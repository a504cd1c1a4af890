#!/usr/bin/env bash
# Installs what tools/test-all.sh needs beyond the Rust toolchain and python3, where it is
# missing; it does nothing where everything is present. tools/test-all.sh runs it first, so
# that the README's test command works on a fresh Debian machine (CI's .ci/run runs just that
# command). Debian packages need root or sudo; without either, the missing packages are named
# and the script fails before any test runs.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo >/dev/null || { echo "install-test-deps: cargo (the Rust toolchain) is required" >&2; exit 1; }

installed_targets=$(rustup target list --installed)
installed_components=$(rustup component list --installed)
# clippy and rustfmt for the lints.
for component in clippy rustfmt; do
    grep -q "^$component" <<<"$installed_components" || rustup component add "$component"
done
# aarch64-unknown-linux-gnu: the NEON tests; aarch64-apple-darwin: the wgpu backend's Metal
# path, compiled only; wasm32-unknown-unknown: the browser's target, linted and built for the
# chat page; wasm32-wasip1: the core crates' tests under node.
for target in aarch64-unknown-linux-gnu aarch64-apple-darwin wasm32-unknown-unknown wasm32-wasip1; do
    grep -qx "$target" <<<"$installed_targets" || rustup target add "$target"
done
# The chat page's threaded build rebuilds std with atomics: the nightly web/build-wasm.sh pins.
nightly=$(sed -n 's/^NIGHTLY=//p' web/build-wasm.sh)
if ! rustup run "$nightly" rustc --print sysroot >/dev/null 2>&1 ||
    [ ! -d "$(rustup run "$nightly" rustc --print sysroot)/lib/rustlib/src/rust/library" ] ||
    ! rustup run "$nightly" cargo clippy --version >/dev/null 2>&1; then
    rustup toolchain install "$nightly" --profile minimal --component rust-src,clippy
fi
# The wasm-bindgen CLI must be the version crates/web pins.
wasm_bindgen=$(sed -n 's/^wasm-bindgen = "=\(.*\)"/\1/p' crates/web/Cargo.toml)
wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $wasm_bindgen" ||
    cargo install wasm-bindgen-cli --version "$wasm_bindgen"

# pip: plumb pull downloads the wheels that carry the test models with it. qemu-user, the
# cross gcc and aarch64's libc: the NEON kernels are cross-built and run under qemu user
# emulation. node: the WebAssembly tests run under its WASI. npm builds the chat page; Debian's
# chromium runs it (tools/test-web.sh; Playwright's browser download is not used). lavapipe
# (Vulkan on the CPU): the wgpu backend's tests, which test-all.sh runs on it.
need=()
python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
# The cross gcc only recommends aarch64's C headers and start files, which linking the tests
# (and compiling ring's C, under plumb-hub's TLS) needs.
[ -e /usr/aarch64-linux-gnu/include/stdio.h ] || need+=(libc6-dev-arm64-cross)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v chromium >/dev/null || command -v chromium-headless-shell >/dev/null || need+=(chromium)
ls /usr/share/vulkan/icd.d/lvp_icd.*.json >/dev/null 2>&1 || need+=(mesa-vulkan-drivers libvulkan1)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -eq 0 ]; then
        sudo=()
    elif command -v sudo >/dev/null; then
        sudo=(sudo)
    else
        echo "install-test-deps: needs the Debian packages ${need[*]}; run as root, or:" \
            "apt-get install --no-install-recommends ${need[*]}" >&2
        exit 1
    fi
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

# NVRTC (CUDA's run-time compiler, from PyPI's pinned wheel): every CUDA kernel is compiled
# for Hopper in the tests (crates/backend-cuda's every_kernel_compiles) on machines with no
# GPU too. Only its shared libraries are kept; tools/test-all.sh puts them on the library path.
nvrtc_version=13.0.88
nvrtc_dir="${XDG_CACHE_HOME:-$HOME/.cache}/plumb/nvrtc-$nvrtc_version"
if [ ! -e "$nvrtc_dir/lib/libnvrtc.so.13" ]; then
    wheels=$(mktemp -d)
    arch=$(uname -m)
    python3 -m pip download -q --no-deps --only-binary=:all: --platform "manylinux_2_12_$arch" \
        --platform "manylinux_2_17_$arch" --python-version 3 -d "$wheels" \
        "nvidia-cuda-nvrtc==$nvrtc_version"
    mkdir -p "$nvrtc_dir.tmp/lib"
    python3 - "$wheels" "$nvrtc_dir.tmp/lib" <<'PY'
import pathlib, sys, zipfile
wheels, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if "/lib/libnvrtc" in name and ".alt." not in name:
                (out / pathlib.Path(name).name).write_bytes(z.read(name))
PY
    rm -rf "$wheels" "$nvrtc_dir"
    mv "$nvrtc_dir.tmp" "$nvrtc_dir"
fi
