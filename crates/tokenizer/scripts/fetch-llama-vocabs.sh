#!/usr/bin/env bash
# Puts llama.cpp's tokenizer test vocabularies (models/ggml-vocab-*.gguf and their .inp/.out
# test files) where crates/tokenizer/tests/llama_vocabs.rs looks for them. They come from
# the llama-cpp-python 0.3.36 source package on PyPI, which vendors the llama.cpp commit
# the golden data was made with: the file is pinned by URL and sha256 and downloaded directly
# (pip download would prepare the package's build environment first, for nothing).
# Does nothing when the vocabularies from that file are already in place.
set -euo pipefail
SDIST_URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-0.3.36.tar.gz
SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

dest="${PLUMB_LLAMA_VOCABS:-${PLUMB_MODELS:-$HOME/.cache/plumb/models}/../llama-vocabs}"
stamp="$dest/.from-sha256"
if [ "$(cat "$stamp" 2>/dev/null)" = "$SDIST_SHA256" ]; then
  echo "llama.cpp test vocabularies already in $dest"
  exit 0
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 - "$SDIST_URL" "$SDIST_SHA256" "$work/sdist.tar.gz" <<'EOF'
import hashlib
import sys
import urllib.request

url, want, dest = sys.argv[1:]
h = hashlib.sha256()
with urllib.request.urlopen(url, timeout=120) as r, open(dest, "wb") as f:
    for chunk in iter(lambda: r.read(1 << 20), b""):
        h.update(chunk)
        f.write(chunk)
if h.hexdigest() != want:
    sys.exit(f"fetch-llama-vocabs: {url} has sha256 {h.hexdigest()}, expected {want}")
EOF
tar -xzf "$work"/sdist.tar.gz -C "$work" --wildcards '*/vendor/llama.cpp/models/ggml-vocab-*'
mkdir -p "$dest"
cp "$work"/llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-* "$dest"/
echo "$SDIST_SHA256" > "$stamp"
echo "llama.cpp test vocabularies in $dest"
