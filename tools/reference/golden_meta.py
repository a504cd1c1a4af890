#!/usr/bin/env python3
"""Write a model's `<model>/meta.json`: the llama.cpp build and settings the golden data came
from, and llama.cpp's view of the model (vocabulary size, BOS/EOS, the GGUF metadata).

    python3 tools/reference/golden_meta.py -m MODEL.gguf -o meta.json

`metadata` is every GGUF key that is not an array, as llama.cpp renders it
(llama_model_meta_val_str_by_index), in llama.cpp's order, without the chat template, which is
`chat_template` (null when the model has none). `system_info` is llama_print_system_info() of
the build that runs this script. Needs: llama-cpp-python 0.3.36.
"""

from __future__ import annotations

import argparse
import json
import os

import llama_cpp
from ggml_lib import llama_cpp_commit, load_ggml_base
from llama_session import CONTEXT_DESCRIPTION, LlamaSession, system_info
from trace_format import sha256_of


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model file")
    ap.add_argument("-o", "--output", required=True, help="meta.json to write")
    args = ap.parse_args()

    ggml = load_ggml_base()
    model_file = os.path.basename(args.model)
    with LlamaSession(args.model, with_context=False) as s:
        metadata = s.metadata()
        chat_template = metadata.pop("tokenizer.chat_template", None)
        meta = {
            "model_key": os.path.splitext(model_file)[0],
            "model_file": model_file,
            "model_sha256": sha256_of(args.model),
            "llama_cpp_python": llama_cpp.__version__,
            "llama_cpp_commit": llama_cpp_commit(ggml),
            "ggml_version": ggml.ggml_version().decode(),
            "system_info": system_info(),
            "context": CONTEXT_DESCRIPTION,
            "n_vocab": s.n_vocab,
            "n_ctx_train": llama_cpp.llama_model_n_ctx_train(s.model),
            "n_embd": llama_cpp.llama_model_n_embd(s.model),
            "bos": s.bos,
            "eos": s.eos,
            "add_bos": s.add_bos,
            "add_eos": s.add_eos,
            "metadata": metadata,
            "chat_template": chat_template,
        }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
