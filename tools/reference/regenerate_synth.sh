#!/bin/sh
# Regenerates the golden logits of the synthetic architecture models into OUT (default:
# testdata/): for each model of `plumb synth --arch` (a name ending in -q8_0 or -q4_0 is that
# model with its matrices of that type, `--type`), the file is written by plumb with
# smollm2-135m's tokenizer and seed 0, then llama.cpp's logits of SYNTH_PROMPTS go to
# OUT/golden/synth-NAME/logits.gguf (with the model file's sha256, which the tests compare
# with the file they write themselves).
#
#   tools/reference/regenerate_synth.sh [OUT] [NAME...]
#
# Needs a built plumb ($PLUMB, default target/release/plumb), smollm2-135m in the model cache
# ($PLUMB_MODELS, else ~/.cache/plumb/models), and the python3 of the environment of
# README.md ($PYTHON). About a minute on 2 cores.
set -eu
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$repo/testdata}"
[ $# -gt 0 ] && shift
names="${*:-llama3 mistral qwen3 qwen3-yarn gemma2 phi3 phi3-short mixtral qwen3moe phi3-q8_0}"
cache="${PLUMB_MODELS:-$HOME/.cache/plumb/models}"
plumb="${PLUMB:-$repo/target/release/plumb}"
py="${PYTHON:-python3}"
tokenizer="$cache/smollm2-135m.gguf"
[ -f "$tokenizer" ] || { echo "regenerate_synth: no $tokenizer; run plumb pull smollm2-135m" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for n in $names; do
    d="$out/golden/synth-$n"
    mkdir -p "$d"
    case "$n" in
        *-q8_0|*-q4_0) arch="${n%-*}"; set -- --type "${n##*-}" ;;
        *) arch="$n"; set -- ;;
    esac
    "$plumb" synth --arch "$arch" "$@" --tokenizer-from "$tokenizer" --seed 0 \
        -o "$tmp/synth-$n.gguf" >/dev/null
    "$py" "$here/golden_logits.py" -m "$tmp/synth-$n.gguf" --prompts synth -o "$d/logits.gguf"
done
