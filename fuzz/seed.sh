#!/usr/bin/env bash
# Seeds the fuzz corpus with small valid GGUF files written by plumb's own writer (the
# round-trip test's output) so the fuzzer starts from deep inside the format.
set -euo pipefail
cd "$(dirname "$0")"
mkdir -p corpus/gguf_reader
PLUMB_FUZZ_SEED_DIR="$PWD/corpus/gguf_reader" cargo test -q -p plumb-gguf --test roundtrip write_fuzz_seeds --manifest-path ../Cargo.toml -- --exact
ls corpus/gguf_reader
