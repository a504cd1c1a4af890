#!/usr/bin/env python3
"""Write a model's golden logits (`<model>/logits.gguf`): llama.cpp's next-token distributions
over five prompts and its greedy continuations.

    python3 tools/reference/golden_logits.py -m MODEL.gguf -o logits.gguf [--prompts synth]

For each prompt of golden_prompts.py (short, chat, paragraph, code, long; with --prompts synth
the synthetic models' SYNTH_PROMPTS, paragraph and code), from an empty KV
cache (llama_session.py has the settings):
- `P.tokens`: llama_tokenize(text, add_special=true, parse_special=true for chat only);
- the prompt evaluated with logits for every position; at each position `P.top_ids` and
  `P.top_logits` hold the 64 largest logits, best first (ties: the lower id first), and `P.lse`
  the log-sum-exp of the whole row (computed in float64); `P.last_logits` is the whole last row;
- `P.greedy`: from the last row on, the argmax token, evaluated in turn, at most 32 of them and
  up to and including an end-of-generation token; `P.greedy_margin` the top-1 minus the top-2
  logit of each step's row; `P.greedy_text` llama_detokenize(greedy, remove_special=false,
  unparse_special=false).
The chat prompt is the user message rendered with the model's GGUF chat template by
llama-cpp-python's Jinja2ChatFormatter (add_generation_prompt=true), or, for a model without a
template (gemma3-270m), with llama.cpp's built-in template for its architecture through
llama_chat_apply_template.
testdata/golden/README.md describes the file. Needs: llama-cpp-python 0.3.36, numpy, gguf 0.19.0.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys

import gguf
import llama_cpp
import numpy as np
from ggml_lib import load_ggml_base, reference_string
from golden_prompts import CHAT_USER_MESSAGE, PROMPTS, SYNTH_PROMPTS
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_session import N_THREADS, LlamaSession, cpu_description
from trace_format import sha256_of

TOP_K = 64
MAX_GREEDY = 32
# Per prompt, in the file's order.
TENSOR_FIELDS = ("tokens", "top_ids", "top_logits", "lse", "last_logits", "greedy", "greedy_margin")
# llama.cpp's built-in chat template for a model whose GGUF has none, by architecture.
BUILTIN_TEMPLATES = {"gemma3": "gemma"}


def render_chat(s: LlamaSession) -> tuple[str, str]:
    """The chat prompt's text, and how it was rendered."""
    template = llama_cpp.llama_model_chat_template(s.model, None)
    messages = [{"role": "user", "content": CHAT_USER_MESSAGE}]
    if template:
        formatter = Jinja2ChatFormatter(
            template=template.decode("utf-8"),
            eos_token=s.token_text(s.eos),
            bos_token=s.token_text(s.bos),
            add_generation_prompt=True,
        )
        how = (
            "model GGUF tokenizer.chat_template rendered with jinja2 "
            "(llama_cpp Jinja2ChatFormatter), add_generation_prompt=true"
        )
        return formatter(messages=messages).prompt, how
    arch = s.metadata().get("general.architecture", "")
    name = BUILTIN_TEMPLATES.get(arch)
    if name is None:
        sys.exit(f"error: the model has no chat template and {arch!r} has no built-in one here")
    chat = (llama_cpp.llama_chat_message * 1)()
    role, content = b"user", CHAT_USER_MESSAGE.encode("utf-8")
    chat[0].role, chat[0].content = role, content
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_chat_apply_template(name.encode(), chat, 1, True, buf, len(buf))
    if n < 0 or n > len(buf):
        sys.exit(f"error: llama_chat_apply_template({name!r}) returned {n}")
    how = (
        f'GGUF has no chat_template; llama.cpp built-in template "{name}" via '
        "llama_chat_apply_template(add_ass=true)"
    )
    return buf.raw[:n].decode("utf-8"), how


def top_k(row: np.ndarray) -> np.ndarray:
    """The ids of the TOP_K largest logits, best first, the lower id first among equals."""
    return np.argsort(-row, kind="stable")[:TOP_K]


def log_sum_exp(rows: np.ndarray) -> np.ndarray:
    r = rows.astype(np.float64)
    m = r.max(axis=1, keepdims=True)
    return (m[:, 0] + np.log(np.exp(r - m).sum(axis=1))).astype(np.float32)


def greedy(s: LlamaSession, row: np.ndarray) -> tuple[list[int], list[float]]:
    tokens, margins = [], []
    while len(tokens) < MAX_GREEDY:
        best = top_k(row)[:2]
        tokens.append(int(best[0]))
        margins.append(float(row[best[0]] - row[best[1]]))
        if s.is_eog(tokens[-1]) or len(tokens) == MAX_GREEDY:
            break
        row = s.eval([tokens[-1]])[0]
    return tokens, margins


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model file")
    ap.add_argument("-o", "--output", required=True, help="logits.gguf to write")
    ap.add_argument(
        "--prompts",
        choices=["models", "synth"],
        default="models",
        help="the test models' five prompts, or the synthetic models' two",
    )
    args = ap.parse_args()
    prompt_set = SYNTH_PROMPTS if args.prompts == "synth" else PROMPTS

    ggml = load_ggml_base()
    with LlamaSession(args.model) as s:
        prompts = []
        for name, text in prompt_set.items():
            how = None
            if text is None:
                text, how = render_chat(s)
            parse_special = name == "chat"
            tokens = s.tokenize(text, add_special=True, parse_special=parse_special)
            s.reset()
            logits = s.eval(tokens)
            ids = np.stack([top_k(row) for row in logits])
            cont, margins = greedy(s, logits[-1])
            text_out = s.detokenize(cont, remove_special=False, unparse_special=False)
            prompts.append(
                {
                    "name": name,
                    "text": text,
                    "parse_special": parse_special,
                    "how": how,
                    "tokens": np.asarray(tokens, dtype=np.int32),
                    "top_ids": ids.astype(np.int32),
                    "top_logits": np.take_along_axis(logits, ids, axis=1),
                    "lse": log_sum_exp(logits),
                    "last_logits": logits[-1].copy(),
                    "greedy": np.asarray(cont, dtype=np.int32),
                    "greedy_margin": np.asarray(margins, dtype=np.float32),
                    "greedy_text": text_out.decode("utf-8", "replace"),
                }
            )
            print(f"{name}: {len(tokens)} tokens, greedy {len(cont)}", file=sys.stderr)
        n_vocab = s.n_vocab

    w = gguf.GGUFWriter(args.output, "golden")
    w.add_string("golden.model_file", os.path.basename(args.model))
    w.add_string("golden.model_sha256", sha256_of(args.model))
    w.add_string(
        "golden.reference",
        f"{reference_string(ggml)}, CPU backend ({cpu_description()}), n_threads={N_THREADS}, "
        "f16 KV cache, logits_all",
    )
    w.add_uint32("golden.top_k", TOP_K)
    w.add_uint32("golden.n_vocab", n_vocab)
    w.add_array("golden.prompts", [p["name"] for p in prompts])
    for p in prompts:
        name = p["name"]
        w.add_string(f"{name}.text", p["text"])
        w.add_bool(f"{name}.parse_special", p["parse_special"])
        w.add_string(f"{name}.greedy_text", p["greedy_text"])
        if p["how"] is not None:
            w.add_string(f"{name}.how", p["how"])
            w.add_string(f"{name}.user_message", CHAT_USER_MESSAGE)
    for p in prompts:
        for field in TENSOR_FIELDS:
            w.add_tensor(f"{p['name']}.{field}", p[field])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
