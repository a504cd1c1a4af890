#!/bin/sh
# Cross-builds plumb-ggml and plumb-backend-cpu for aarch64 and runs their kernel tests (ggml's
# dot products and GEMMs, the cpu backend's f32 lanes, row kernels and attention) under qemu user
# emulation, once with a CPU that has the dot-product and i8mm extensions (NEON, NEON dotprod and
# NEON i8mm kernels: the sdot and smmla GEMMs) and once with one that lacks them (NEON only). The
# second run declares the missing extensions in PLUMB_CPU_LACKS: ggml's tests then check that
# detection does not find them, instead of skipping.
#
# Needs: rustup target add aarch64-unknown-linux-gnu; apt-get install qemu-user gcc-aarch64-linux-gnu
set -eu
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/aarch64-cross}"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
# One cargo invocation for both crates: built one package at a time, their dependencies resolve
# to different features (plumb-backend-cpu turns on half's bytemuck), and half, plumb-gguf and
# plumb-ggml were compiled twice. --lib applies to both packages, so ggml's own unit tests run
# under qemu too.
for cpu in max cortex-a53; do
    echo "== qemu-aarch64 -cpu $cpu"
    lacks=""
    [ "$cpu" = cortex-a53 ] && lacks=neon-dotprod,neon-i8mm
    PLUMB_CPU_LACKS="$lacks" \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu $cpu" \
        cargo test --release --target aarch64-unknown-linux-gnu -p plumb-ggml -p plumb-backend-cpu \
        --lib --test vec_dot_blocks32 --test vec_dot_superblocks "$@"
done
