#!/usr/bin/env python3
"""Compares plumb's tokenizer with llama.cpp (through llama-cpp-python) on random strings.

For each model, generates strings mixing ASCII, whitespace runs, digits, punctuation, Latin
with accents, combining marks, CJK, Hangul, emoji, control characters, special-token texts
and arbitrary code points, plus a few very long words; tokenizes them in llama.cpp's three modes with both; and reports
every difference in ids and in detokenized bytes. It also counts how often each side
round-trips (detokenize(tokenize(s)) == s).

usage: compare_llama_cpp.py [--count N] [--seed S] MODEL.gguf...
(run from the repository root; builds the tokenize_batch example)
"""
import argparse
import ctypes
import json
import os
import random
import subprocess
import sys
import tempfile

import llama_cpp

PIECES = [
    "a", "the", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2028", "\u0085",
    "0", "12", "345", "6789", ".", ",", "!", "?", "'", "'s", "'ll", "'RE", "\"", "(", ")", "[", "]", "{", "}",
    "<", ">", "/", "\\", "-", "_", "=", "+", "*", "&", "%", "$", "#", "@", "^", "`", "|", "~",
    "é", "ü", "ß", "Å", "ñ", "e\u0301", "\u0301", "Ж", "ж", "λ", "日本", "語", "中文", "한국어", "ไทย", "עברית", "العربية",
    "😀", "👍🏽", "🇫🇷", "❤️", "\u200d", "\ufeff", "\u0000", "\u001f", "\u007f", "\ufffd", "²", "½", "Ⅻ", "٣",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<start_of_turn>", "<end_of_turn>", "<s>", "</s>", "<bos>",
    "<eos>", "<pad>", "<unk>", "<mask>", "<tool_call>", "<b>", "</table>", "[multimodal]", "<0x0A>", "▁",
]


def random_string(rng):
    kind = rng.random()
    if kind < 0.15:
        n = rng.randint(0, 12)
        return "".join(chr(rng.choice([rng.randint(0x20, 0x7e), rng.randint(0xa0, 0x2fff),
                                       rng.randint(0x3000, 0xd7ff), rng.randint(0xe000, 0x10ffff),
                                       rng.randint(0, 0x1f)])) for _ in range(n))
    n = rng.randint(0, 16)
    return "".join(rng.choice(PIECES) for _ in range(n))


def llama_modes(model, text):
    data = text.encode("utf-8")
    ids_as = model.tokenize(data, add_bos=True, special=False)
    ids = model.tokenize(data, add_bos=False, special=False)
    ids_ps = model.tokenize(data, add_bos=False, special=True)
    vocab = llama_cpp.llama_model_get_vocab(model.model)
    n = len(ids)
    arr = (llama_cpp.llama_token * max(n, 1))(*ids)
    size = 16 * len(data) + 64
    buf = ctypes.create_string_buffer(size)
    got = llama_cpp.llama_detokenize(vocab, arr, n, buf, size, False, False)
    assert got >= 0
    return ids_as, ids, ids_ps, buf.raw[:got].hex()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("models", nargs="+")
    args = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "plumb-tokenizer", "--example", "tokenize_batch"], check=True)
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    exe = os.path.join(target, "release", "examples", "tokenize_batch")
    failed = False
    for path in args.models:
        rng = random.Random(args.seed)
        texts = [random_string(rng) for _ in range(args.count)]
        # Long words take the bucket queue path of plumb's merges.
        texts += ["".join(rng.choice(["a", "b", "the", "é", "日本", "7", "😀", "e\u0301", "-"]) for _ in range(12000))
                  for _ in range(4)]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(texts, f)
        out = subprocess.run([exe, path, f.name], check=True, capture_output=True, text=True).stdout.splitlines()
        os.unlink(f.name)
        model = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
        diffs = 0
        rt_both = rt_plumb_only = rt_llama_only = 0
        for text, line in zip(texts, out):
            mine = json.loads(line)
            ref = dict(zip(["ids_add_special", "ids", "ids_parse_special", "detok_hex"], llama_modes(model, text)))
            for key, want in ref.items():
                if mine[key] != want:
                    diffs += 1
                    if diffs <= 20:
                        print(f"DIFF {os.path.basename(path)} {key} {text!r}\n  plumb {mine[key]}\n  llama {want}")
            want_hex = text.encode("utf-8").hex()
            p, l = mine["detok_hex"] == want_hex, ref["detok_hex"] == want_hex
            rt_both += p and l
            rt_plumb_only += p and not l
            rt_llama_only += l and not p
            if l and not p:
                print(f"ROUND TRIP plumb fails where llama.cpp does not: {text!r}")
        print(f"{os.path.basename(path)}: {len(texts)} strings, {diffs} differences; round trip: "
              f"{rt_both} both, {rt_plumb_only} plumb only, {rt_llama_only} llama.cpp only, "
              f"{len(texts) - rt_both - rt_plumb_only - rt_llama_only} neither")
        failed |= diffs > 0
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
