#!/usr/bin/env python3
"""Write a model's golden tokenizations (`<model>/tokenize.json`): thirty strings through
llama.cpp's tokenizer and detokenizer in every mode plumb implements.

    python3 tools/reference/golden_tokenize.py -m MODEL.gguf -o tokenize.json

Each case's fields, and the llama.h call that produced each, are listed in METHOD (the file
repeats it under "method"). Needs: llama-cpp-python 0.3.36.
"""

from __future__ import annotations

import argparse
import json
import os

from llama_session import LlamaSession

METHOD = {
    "ids_add_special": "llama_tokenize(add_special=true, parse_special=false)",
    "ids": "llama_tokenize(add_special=false, parse_special=false)",
    "ids_parse_special": "llama_tokenize(add_special=false, parse_special=true)",
    "vocab_text": "llama_vocab_get_text(id) for ids",
    "pieces_hex": "llama_token_to_piece(id, lstrip=0, special=true) bytes, hex, for ids",
    "detok": "llama_detokenize(ids, remove_special=false, unparse_special=false)",
    "detok_add_special_remove_special": (
        "llama_detokenize(ids_add_special, remove_special=true, unparse_special=false)"
    ),
    "roundtrip_ok": "detok bytes == text utf-8 bytes",
}

# (name, text): whitespace, digits, punctuation, code, scripts, emoji, special-token look-alikes.
CASES = [
    ("plain", "Hello world"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("leading_space", " leading space"),
    ("trailing_space", "trailing space "),
    ("multi_space", "multiple   spaces    here"),
    ("only_spaces", "   "),
    ("newlines", "line1\nline2\n\nline4"),
    ("only_newlines", "\n\n\n"),
    ("tabs", "tab\tseparated\tvalues\n"),
    ("ws_mix", " \t \n  x"),
    ("digits", "12345"),
    ("numbers", "3.14159 and 1,000,000 and 2024-01-15 and 007"),
    ("punct", 'Hello, world! How\'s it going? (Fine.) "Quoted" -- dashes... ;: [x] {y}'),
    ("contractions_case", "I'm can't won't they're WE'LL HELLO hello HeLLo"),
    ("code_python", "def foo(x):\n    if x > 0:\n        return x * 2\n    return -x\n"),
    ("code_rust", 'fn main() {\n\tlet v: Vec<u8> = vec![1, 2, 3];\n\tprintln!("{:?}", v);\n}\n'),
    ("accented", "Café déjà vu, naïve façade, Ångström, Zürich, São Paulo"),
    ("cjk", "日本語のテキストです。中文测试。한국어 문장"),
    ("emoji", "Emoji: 😀🎉👍🏽 ❤️ 🇫🇷"),
    ("arabic", "مرحبا بالعالم"),
    ("cyrillic", "Привет, мир!"),
    ("math_symbols", "x² + y² = z²; ∑ i = n(n+1)/2 ≥ 0 → ∞"),
    ("long_word", "Pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism"),
    ("repeated", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa !!!!!!!!???? ------"),
    ("url_email", "https://example.com/path?q=1&r=2 user@example.org"),
    ("empty", ""),
    ("single_char", "a"),
    ("special_chatml", "<|im_start|>user\nHello<|im_end|>"),
    ("special_gemma", "<start_of_turn>user\nHi<end_of_turn>"),
    ("special_misc", "<s> </s> <bos> <eos> <|endoftext|>"),
]


def case(s: LlamaSession, name: str, text: str) -> dict:
    ids = s.tokenize(text, add_special=False, parse_special=False)
    ids_add_special = s.tokenize(text, add_special=True, parse_special=False)
    detok = s.detokenize(ids, remove_special=False, unparse_special=False)
    return {
        "name": name,
        "text": text,
        "ids_add_special": ids_add_special,
        "ids": ids,
        "ids_parse_special": s.tokenize(text, add_special=False, parse_special=True),
        "vocab_text": [s.token_text(t) for t in ids],
        "pieces_hex": [s.piece(t, special=True).hex() for t in ids],
        "detok": detok.decode("utf-8", "replace"),
        "detok_hex": detok.hex(),
        "roundtrip_ok": detok == text.encode("utf-8"),
        "detok_add_special_remove_special": s.detokenize(
            ids_add_special, remove_special=True, unparse_special=False
        ).decode("utf-8", "replace"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model file")
    ap.add_argument("-o", "--output", required=True, help="tokenize.json to write")
    args = ap.parse_args()

    with LlamaSession(args.model, with_context=False) as s:
        out = {
            "model": os.path.splitext(os.path.basename(args.model))[0],
            "method": METHOD,
            "add_bos": s.add_bos,
            "add_eos": s.add_eos,
            "bos": s.bos,
            "eos": s.eos,
            "cases": [case(s, name, text) for name, text in CASES],
        }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.output}: {len(CASES)} strings")


if __name__ == "__main__":
    main()
