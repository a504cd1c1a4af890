#!/bin/sh
# Regenerates the reference data of testdata/ from llama.cpp into OUT (default: testdata/
# itself): the quantization vectors, and for each test model meta.json, tokenize.json,
# logits.gguf, trace.gguf and ppl.json. The models come from the plumb model cache
# ($PLUMB_MODELS, else ~/.cache/plumb/models; `plumb pull all`), the corpus from
# testdata/golden/corpus.txt.
#
#   tools/reference/regenerate_testdata.sh [OUT] [MODEL...]
#
# Needs the python3 of an environment with llama-cpp-python 0.3.36 built as README.md in this
# folder says, numpy and gguf 0.19.0 ($PYTHON, default python3). 5 to 10 minutes on 2 cores;
# never run two llama.cpp processes at once on a shared machine.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/testdata}"
[ $# -gt 0 ] && shift
models="${*:-smollm2-135m gemma3-270m qwen2.5-coder-0.5b}"
cache="${PLUMB_MODELS:-$HOME/.cache/plumb/models}"
py="${PYTHON:-python3}"
# The golden traces keep the input, layer 0 in full, every layer's output and the final norm
# and logits (testdata/golden/README.md), not every layer in full.
trace_tensors="inp_embd,attn_norm-0,Qcur_normed-0,Kcur_normed-0,Qcur-0,Kcur-0,Vcur-0,kqv_out-0"
trace_tensors="$trace_tensors,attn_out-0,attn_post_norm-0,ffn_inp-0,ffn_norm-0,ffn_out-0"
trace_tensors="$trace_tensors,ffn_post_norm-0,l_out-*,result_norm,result_output"

mkdir -p "$out/quant" "$out/golden"
"$py" "$here/quant_vectors.py" -o "$out/quant/quant-vectors.gguf"
corpus="$out/golden/corpus.txt"
[ -f "$corpus" ] || cp "$repo/testdata/golden/corpus.txt" "$corpus"
for m in $models; do
    gguf="$cache/$m.gguf"
    [ -f "$gguf" ] || { echo "regenerate_testdata: no $gguf; run plumb pull $m" >&2; exit 1; }
    d="$out/golden/$m"
    mkdir -p "$d"
    "$py" "$here/golden_meta.py" -m "$gguf" -o "$d/meta.json"
    "$py" "$here/golden_tokenize.py" -m "$gguf" -o "$d/tokenize.json"
    "$py" "$here/golden_logits.py" -m "$gguf" -o "$d/logits.gguf"
    "$py" "$here/llama_cpp_trace.py" -m "$gguf" -p "The capital of France is" \
        --tensors "$trace_tensors" -o "$d/trace.gguf"
    "$py" "$here/golden_ppl.py" -m "$gguf" --corpus "$corpus" -o "$d/ppl.json"
done
