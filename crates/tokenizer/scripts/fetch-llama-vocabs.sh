#!/usr/bin/env bash
# Puts llama.cpp's tokenizer test vocabularies (models/ggml-vocab-*.gguf and their .inp/.out
# test files) where crates/tokenizer/tests/llama_vocabs.rs looks for them. They come from
# the llama-cpp-python 0.3.36 source package on PyPI, which vendors the llama.cpp commit
# the golden data was made with.
set -euo pipefail
dest="${PLUMB_LLAMA_VOCABS:-${PLUMB_MODELS:-$HOME/.cache/plumb/models}/../llama-vocabs}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m pip download --quiet --no-deps --no-binary :all: --dest "$work" llama-cpp-python==0.3.36
tar -xzf "$work"/llama_cpp_python-0.3.36.tar.gz -C "$work" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
mkdir -p "$dest"
cp "$work"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-* "$dest"/
echo "llama.cpp test vocabularies in $dest"
