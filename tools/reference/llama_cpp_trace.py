#!/usr/bin/env python3
"""Record llama.cpp's named intermediate tensors for one prompt as a plumb trace file.

    python3 tools/reference/llama_cpp_trace.py -m MODEL.gguf -p PROMPT -o out.trace.gguf \
        [--tensors 'l_out-*,result_norm']

The output has the layout `plumb trace` writes (see crates/verify/src/trace.rs), so
`plumb diff out.trace.gguf plumb.trace.gguf --against llama.cpp` compares the two runs layer by
layer. It uses llama-cpp-python's low-level API and the scheduler's eval callback (`cb_eval`):
llama.cpp calls it once per graph node to ask whether we want to see the node, and again after
computing the nodes we said yes to, while their data is still in the compute buffer.

The golden traces in testdata/golden were made with it (`-p "The capital of France is"`). Its
settings: CPU backend, f16 KV cache, flash attention off, one ubatch holding the whole prompt,
logits for every position (so the last layer is not cut down to the last token). Run it with
n_threads=2 (the default here) and never two llama.cpp processes at once on a shared machine.

By default it keeps the nodes whose names plumb traces; `--tensors '*'` keeps every named node
(ffn_gate-0, kq_soft_max-0, ...), which `plumb diff` ignores as names plumb lacks. Tensors are
written in plumb's forward-pass order (llama.cpp's graph lists Vcur before Kcur, for one).
They are read from host memory through their ne/nb strides, so views and permuted tensors come
out right; F32, F16 and BF16 are converted to F32, other types are skipped with a warning.
Needs: llama-cpp-python (tested with 0.3.36, ggml 0.25.3), numpy, gguf.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

import llama_cpp
import numpy as np
from ggml_lib import load_ggml_base, reference_string
from trace_format import PER_HEAD, base_of, matcher, model_info, write_trace

# llama.cpp name -> plumb name (both without the layer index), where they differ. llama.cpp
# calls the embedding lookup `embd`; gemma3 scales it by sqrt(n_embd) into `inp_scaled`. plumb's
# inp_embd is the input to layer 0 either way: the later of two nodes mapped to one name wins.
# gemma3 calls the residual after attention `sa_out` where the other models call it `ffn_inp`.
RENAMES = {"embd": "inp_embd", "inp_scaled": "inp_embd", "sa_out": "ffn_inp"}

GGML_MAX_DIMS = 4
GGML_MAX_SRC = 10
GGML_MAX_OP_PARAMS = 64
GGML_MAX_NAME = 64
GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16 = 0, 1, 30
GGML_LOG_LEVEL_ERROR = 4


class GgmlTensor(ctypes.Structure):
    """`struct ggml_tensor` of ggml 0.25.3 (ggml/include/ggml.h). Checked at run time against
    ggml_get_name/ggml_get_data/ggml_nbytes for every tensor we read, so a layout change fails
    loudly instead of reading garbage."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
        ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * GGML_MAX_SRC),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * GGML_MAX_NAME),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def plumb_name(llama_name: str) -> str:
    base = base_of(llama_name)
    return RENAMES.get(base, base) + llama_name[len(base) :]


@dataclass
class Recorder:
    ggml: ctypes.CDLL
    wanted: Callable[[str], bool]
    # name -> array; a name seen twice keeps its first position and its last value, because
    # llama.cpp labels several nodes alike (Qcur-0 after the matmul, the reshape and the RoPE).
    tensors: dict[str, np.ndarray] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    error: BaseException | None = None

    def callback(self, t_ptr, ask, _user_data) -> bool:
        try:
            t = GgmlTensor.from_address(t_ptr)
            name = plumb_name(t.name.decode("utf-8", "replace"))
            if ask:
                return self.wanted(name)
            self.capture(t_ptr, t, name)
            return True
        except BaseException as err:  # noqa: BLE001 - nothing may cross into C; stop the graph
            self.error = err
            return False

    def capture(self, t_ptr: int, t: GgmlTensor, name: str) -> None:
        self.check_layout(t_ptr, t)
        if not t.buffer or not self.ggml.ggml_backend_buffer_is_host(t.buffer):
            raise RuntimeError(f"{name} is not in host memory; run llama.cpp on the CPU backend")
        dtype = {GGML_TYPE_F32: np.float32, GGML_TYPE_F16: np.float16, GGML_TYPE_BF16: np.uint16}
        if t.type not in dtype:
            self.skipped[name] = self.ggml.ggml_type_name(t.type).decode()
            return
        ne, nb = list(t.ne), list(t.nb)
        raw = (ctypes.c_uint8 * self.ggml.ggml_nbytes(t_ptr)).from_address(t.data)
        view = np.lib.stride_tricks.as_strided(
            np.frombuffer(raw, dtype=dtype[t.type]),
            shape=tuple(reversed(ne)),
            strides=tuple(reversed(nb)),
        )
        if t.type == GGML_TYPE_BF16:
            values = (view.astype(np.uint32) << 16).view(np.float32)
        else:
            values = view.astype(np.float32)  # copies: the compute buffer is reused
        n_dims = max((i + 1 for i, n in enumerate(ne) if n != 1), default=1)
        rank = 3 if base_of(name) in PER_HEAD else max(2, n_dims)
        self.tensors[name] = np.ascontiguousarray(values.reshape(tuple(reversed(ne[:rank]))))
        self.skipped.pop(name, None)

    def check_layout(self, t_ptr: int, t: GgmlTensor) -> None:
        g = self.ggml
        extent = g.ggml_type_size(t.type) + sum(
            (t.ne[i] - 1) * t.nb[i] for i in range(GGML_MAX_DIMS)
        )
        if (
            g.ggml_get_name(t_ptr) != t.name
            or g.ggml_get_data(t_ptr) != t.data
            or (g.ggml_blck_size(t.type) == 1 and g.ggml_nbytes(t_ptr) != extent)
        ):
            raise RuntimeError(
                "struct ggml_tensor layout does not match this ggml build "
                f"(ggml {g.ggml_version().decode()}); update GgmlTensor in {__file__}"
            )


def tokenize(vocab, text: str) -> list[int]:
    data = text.encode("utf-8")
    cap = len(data) + 8
    buf = (llama_cpp.llama_token * cap)()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, cap, True, False)
    if n < 0:
        cap = -n
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(vocab, data, len(data), buf, cap, True, False)
    if n <= 0:
        sys.exit(f"error: the prompt tokenized to {n} tokens")
    return list(buf[:n])


@llama_cpp.llama_log_callback
def quiet_log(level, text, _user_data):
    if level == GGML_LOG_LEVEL_ERROR:
        sys.stderr.write(text.decode("utf-8", "replace"))


def run(
    model_path: str, prompt: str, wanted: Callable[[str], bool], threads: int
) -> tuple[list[int], Recorder]:
    ggml = load_ggml_base()
    recorder = Recorder(ggml, wanted)
    callback = llama_cpp.ggml_backend_sched_eval_callback(recorder.callback)

    llama_cpp.llama_log_set(quiet_log, None)
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    mparams.n_gpu_layers = 0
    model = llama_cpp.llama_model_load_from_file(model_path.encode(), mparams)
    if not model:
        sys.exit(f"error: llama.cpp could not load {model_path}")
    tokens = tokenize(llama_cpp.llama_model_get_vocab(model), prompt)
    n = len(tokens)

    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = max(1024, n)
    cparams.n_batch = cparams.n_ubatch = max(512, n)
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.cb_eval = callback
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    if not ctx:
        sys.exit("error: llama.cpp could not create a context")

    batch = llama_cpp.llama_batch_init(n, 0, 1)
    try:
        for i, tok in enumerate(tokens):
            batch.token[i] = tok
            batch.pos[i] = i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1
        batch.n_tokens = n
        rc = llama_cpp.llama_decode(ctx, batch)
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)
    if recorder.error is not None:
        raise recorder.error
    if rc != 0:
        sys.exit(f"error: llama_decode returned {rc}")
    return tokens, recorder


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF model file")
    ap.add_argument("-p", "--prompt", required=True, help="tokenized with add_special=true")
    ap.add_argument("-o", "--output", required=True, help="trace file to write")
    ap.add_argument(
        "--tensors",
        metavar="PATTERN",
        help="comma-separated globs over the trace names, e.g. 'l_out-*,result_norm' "
        "(default: every name plumb traces; '*' keeps all of llama.cpp's named nodes)",
    )
    ap.add_argument("--threads", type=int, default=2, help="llama.cpp threads (default 2)")
    args = ap.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"error: no such model file: {args.model}")

    try:
        wanted = matcher(args.tensors)
    except ValueError as err:
        sys.exit(f"error: {err}")
    tokens, rec = run(args.model, args.prompt, wanted, args.threads)
    for name, type_name in rec.skipped.items():
        print(f"warning: skipped {name}: type {type_name} is not F32/F16/BF16", file=sys.stderr)
    if not rec.tensors:
        sys.exit("error: no tensor name matched; see --tensors")

    reference = f"{reference_string(rec.ggml)}, CPU, eval callback"
    write_trace(args.output, tokens, rec.tensors, model_info(args.model, args.prompt, reference))
    print(f"wrote {args.output}: {len(tokens)} tokens, {len(rec.tensors)} tensors")


if __name__ == "__main__":
    main()
