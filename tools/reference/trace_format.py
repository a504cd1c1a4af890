"""plumb's trace format, shared by the reference exporters in this folder.

A trace is a GGUF file (see crates/verify/src/trace.rs): general.architecture = "trace";
optional string metadata trace.model_file, trace.model_sha256, trace.prompt, trace.backend,
trace.plumb_version, trace.reference; an I32 tensor `tokens` with the input ids; then one F32
tensor per intermediate, in forward-pass order, under llama.cpp's graph names. Shapes are in
ggml order (fastest dimension first), so a numpy array of shape (n_tokens, n_embd) is stored as
[n_embd, n_tokens], which is what gguf-py does with a C-contiguous array.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from collections.abc import Callable

import gguf
import numpy as np

# The names plumb traces, in the order of its forward pass within a layer.
PLUMB_ORDER = [
    "inp_embd",
    "attn_norm",
    "Qcur_normed",
    "Kcur_normed",
    "Qcur",
    "Kcur",
    "Vcur",
    "kqv_out",
    "attn_out",
    "attn_post_norm",
    "ffn_inp",
    "ffn_norm",
    "ffn_out",
    "ffn_post_norm",
    "l_out",
    "result_norm",
    "result_output",
]
PLUMB_BASES = frozenset(PLUMB_ORDER)

# Per-head tensors: [head_dim, n_head, n_tokens] in ggml order.
PER_HEAD = frozenset({"Qcur", "Kcur", "Vcur", "Qcur_normed", "Kcur_normed"})


def base_of(name: str) -> str:
    """`l_out-3` -> `l_out`; names without a layer index are their own base."""
    base, _, layer = name.rpartition("-")
    return base if base and layer.isdigit() else name


def layer_of(name: str) -> float:
    """Layer index for ordering: -1 before the layers, +inf for the final norm and logits."""
    base, _, layer = name.rpartition("-")
    if base and layer.isdigit():
        return int(layer)
    return float("inf") if name.startswith("result_") else -1


def plumb_order(names: list[str]) -> list[str]:
    """plumb's forward-pass order; names plumb does not know keep their relative order at the
    end of their layer (before layer 0 when they have no layer index)."""
    rank = {b: i for i, b in enumerate(PLUMB_ORDER)}
    return sorted(names, key=lambda n: (layer_of(n), rank.get(base_of(n), len(rank))))


def matcher(patterns: str | None) -> Callable[[str], bool]:
    """plumb's --tensors syntax: comma-separated globs where `*` matches any run of characters.
    Without patterns, every name plumb traces."""
    if patterns is None:
        return lambda name: base_of(name) in PLUMB_BASES
    globs = [p.strip() for p in patterns.split(",") if p.strip()]
    if not globs:
        raise ValueError(f"--tensors {patterns!r} holds no pattern")
    return lambda name: any(fnmatch.fnmatchcase(name, g) for g in globs)


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def write_trace(
    path: str,
    tokens: list[int],
    tensors: dict[str, np.ndarray],
    info: dict[str, str],
) -> None:
    """Write `tensors` (numpy order, any float dtype) in plumb's order. `info` keys are the
    trace.* metadata names without the prefix (model_file, model_sha256, prompt, reference...)."""
    w = gguf.GGUFWriter(path, "trace")
    for key, value in info.items():
        w.add_string(f"trace.{key}", value)
    w.add_tensor("tokens", np.asarray(tokens, dtype=np.int32))
    for name in plumb_order(list(tensors)):
        w.add_tensor(name, np.ascontiguousarray(tensors[name], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def model_info(model_path: str, prompt: str, reference: str) -> dict[str, str]:
    info = {"model_file": os.path.basename(os.path.normpath(model_path)), "prompt": prompt}
    if os.path.isfile(model_path):
        info["model_sha256"] = sha256_of(model_path)
    info["reference"] = reference
    return info
