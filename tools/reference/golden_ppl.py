#!/usr/bin/env python3
"""Write a model's golden perplexity (`<model>/ppl.json`) on a corpus, computed the way
llama-perplexity computes it, with llama.cpp's logits.

    python3 tools/reference/golden_ppl.py -m MODEL.gguf --corpus testdata/golden/corpus.txt \
        -o ppl.json

The corpus is tokenized whole (add_special=true) and cut into non-overlapping 512-token windows
(the tail dropped); for a vocabulary that adds BOS, each window's first token is replaced by
BOS. Each window is evaluated from an empty KV cache in one llama_decode (llama_session.py has
the settings), and the negative log-likelihood of each next token is taken from the float32
logits in float64. `ppl_second_half` scores positions 256..510 of every window, as
llama-perplexity does; `ppl_all_positions` scores 0..510. Beside the JSON it writes
`ppl_nll.npy` (float64 [windows, 511], the NLL at every position) and `ppl_tokens.npy` (the
corpus's ids before the BOS replacement). `seconds` is the wall time, the one field that differs
between runs. Needs: llama-cpp-python 0.3.36, numpy.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
from llama_session import LlamaSession
from trace_format import sha256_of

N_CTX = 512
FIRST_SCORED = N_CTX // 2
CORPUS_DESCRIPTION = (
    "corpus.txt (Debian base-files /usr/share/common-licenses/GPL-3, GPL v3 text, unmodified)"
)


def window_nll(logits: np.ndarray, window: list[int]) -> np.ndarray:
    """-log softmax(logits[j])[window[j + 1]] for j in 0..N_CTX-2, in float64."""
    rows = logits[:-1].astype(np.float64)
    m = rows.max(axis=1)
    lse = m + np.log(np.exp(rows - m[:, None]).sum(axis=1))
    return lse - rows[np.arange(len(rows)), window[1:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model file")
    ap.add_argument("--corpus", required=True, help="the text (testdata/golden/corpus.txt)")
    ap.add_argument("-o", "--output", required=True, help="ppl.json to write")
    args = ap.parse_args()

    with open(args.corpus, encoding="utf-8") as f:
        text = f.read()
    started = time.monotonic()
    with LlamaSession(args.model) as s:
        tokens = s.tokenize(text, add_special=True, parse_special=False)
        n_chunks = len(tokens) // N_CTX
        nll = np.empty((n_chunks, N_CTX - 1), dtype=np.float64)
        for c in range(n_chunks):
            window = tokens[c * N_CTX : (c + 1) * N_CTX]
            if s.add_bos:
                window[0] = s.bos
            s.reset()
            nll[c] = window_nll(s.eval(window), window)
        add_bos = s.add_bos
    seconds = time.monotonic() - started

    if add_bos:
        bos_rule = "first token of every window replaced by BOS (vocab add_bos=true)"
    else:
        bos_rule = "no BOS (vocab add_bos=false), windows used as is"
    second_half = nll[:, FIRST_SCORED:]
    out_dir = os.path.dirname(os.path.abspath(args.output))
    np.save(os.path.join(out_dir, "ppl_nll.npy"), nll)
    np.save(os.path.join(out_dir, "ppl_tokens.npy"), np.asarray(tokens, dtype=np.int32))
    result = {
        "corpus": CORPUS_DESCRIPTION,
        "corpus_sha256": sha256_of(args.corpus),
        "tokenize": "llama_tokenize(whole text, add_special=true, parse_special=false)",
        "n_tokens_corpus": len(tokens),
        "n_ctx": N_CTX,
        "n_chunks": n_chunks,
        "chunking": (
            "non-overlapping windows toks[c*n_ctx:(c+1)*n_ctx] for c < n_tokens//n_ctx "
            f"(tail dropped); {bos_rule}; each window evaluated from an empty KV cache in one "
            "llama_decode"
        ),
        "ppl_second_half": float(np.exp(second_half.mean())),
        "ppl_second_half_method": (
            f"llama-perplexity method: in each window, logits at positions {FIRST_SCORED}.."
            f"{N_CTX - 2} scored against the next token ({second_half.shape[1]} tokens per "
            "window); ppl = exp(mean NLL over all scored tokens of all windows)"
        ),
        "n_scored_second_half": int(second_half.size),
        "ppl_all_positions": float(np.exp(nll.mean())),
        "ppl_all_positions_method": (
            f"same windows; logits at positions 0..{N_CTX - 2} scored against the next token "
            f"({N_CTX - 1} tokens per window)"
        ),
        "n_scored_all_positions": int(nll.size),
        "nll_file": (
            "ppl_nll.npy: float64 [n_chunks, n_ctx-1]; [c, j] = -log softmax(logits at "
            "position j of window c)[token j+1]"
        ),
        "first_window_token_ids_file": (
            "ppl_tokens.npy: int32 tokenization of the whole corpus (before BOS replacement)"
        ),
        "seconds": seconds,
    }
    with open(args.output, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.output}: ppl {result['ppl_second_half']:.4f} over {n_chunks} windows")


if __name__ == "__main__":
    main()
