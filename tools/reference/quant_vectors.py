#!/usr/bin/env python3
"""Write quant-vectors.gguf: a fixed f32 input, quantized to every ggml type by ggml itself and
dequantized again by ggml, so that plumb's quantizers and dequantizers can be held to ggml's
numbers bit for bit.

    python3 tools/reference/quant_vectors.py -o testdata/quant/quant-vectors.gguf

Everything numeric goes through ggml's public C API in the libggml-base that llama-cpp-python
ships (see ggml_lib.py):
- `ggml_quantize_chunk` quantizes all 16 rows of each type. With no importance matrix it runs
  ggml's reference quantizer (`quantize_row_T_ref`). The types for which
  `ggml_quantize_requires_imatrix` holds (IQ2_XXS, IQ2_XS, IQ1_S) get a uniform importance
  matrix of ones; IQ1_M and IQ2_S do not need one and get none.
- each type's `to_float` (from `ggml_get_type_traits`) dequantizes the result.
- Q8_1 and Q8_K, the activation types, are left out by ggml_quantize_chunk and by the type
  traits of ggml-base: ggml's quantize_row_q8_1_ref and quantize_row_q8_K_ref quantize them,
  and dequantize_row_q8_K dequantizes Q8_K. ggml has no Q8_1 dequantizer, so its `.f32` is d*q
  per block, computed here from the block's f16 scale d.

The input (`source`, 16 rows of 512, numpy's default_rng(seed) normals in f32): rows 0-7 as
drawn; rows 8-11 times 0.001; row 12 with every 37th value times 60 (outliers); row 13 zero;
row 14 |x|; row 15 -3|x|.
Needs: llama-cpp-python 0.3.36 (ggml 0.25.3), numpy, gguf 0.19.0.
"""

from __future__ import annotations

import argparse
import ctypes

import gguf
import llama_cpp
import numpy as np
from ggml_lib import load_ggml_base
from gguf import GGMLQuantizationType as T

N_ROWS, ROW_LEN = 16, 512

# In the file's order: ggml_quantize_chunk's types, then the activation types.
CHUNK_TYPES = [
    T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0,
    T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K,
    T.IQ2_XXS, T.IQ2_XS, T.IQ3_XXS, T.IQ1_S, T.IQ4_NL, T.IQ3_S, T.IQ2_S, T.IQ4_XS, T.IQ1_M,
    T.TQ1_0, T.TQ2_0, T.MXFP4,
]  # fmt: skip
ACTIVATION_TYPES = [T.Q8_1, T.Q8_K]


def source_rows(seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((N_ROWS, ROW_LEN)).astype(np.float32)
    x[8:12] *= 0.001
    x[12, ::37] *= 60
    x[13] = 0
    x[14] = np.abs(x[14])
    x[15] = -np.abs(x[15]) * 3
    return x


def quantize(ggml: ctypes.CDLL, ty: T, src: np.ndarray) -> np.ndarray:
    """`src` [rows, ROW_LEN] quantized to `ty`, as raw bytes [rows, row_size]."""
    row_size = ggml.ggml_row_size(ty, ROW_LEN)
    out = np.zeros((src.shape[0], row_size), dtype=np.uint8)
    if ty in ACTIVATION_TYPES:
        quantize_row = {T.Q8_1: ggml.quantize_row_q8_1_ref, T.Q8_K: ggml.quantize_row_q8_K_ref}[ty]
        for r in range(src.shape[0]):
            quantize_row(src[r].ctypes.data, out[r].ctypes.data, ROW_LEN)
        return out
    imatrix = None
    if ggml.ggml_quantize_requires_imatrix(ty):
        imatrix = np.ones(ROW_LEN, dtype=np.float32)
    written = ggml.ggml_quantize_chunk(
        ty,
        src.ctypes.data,
        out.ctypes.data,
        0,
        src.shape[0],
        ROW_LEN,
        None if imatrix is None else imatrix.ctypes.data,
    )
    if written != out.nbytes:
        raise RuntimeError(
            f"ggml_quantize_chunk wrote {written} bytes of {ty.name}, not {out.nbytes}"
        )
    return out


def dequantize(ggml: ctypes.CDLL, ty: T, q: np.ndarray) -> np.ndarray:
    out = np.zeros((q.shape[0], ROW_LEN), dtype=np.float32)
    if ty == T.Q8_1:
        # block_q8_1: f16 d, f16 s (= d * sum q), int8 qs[32].
        blocks = q.reshape(-1, 36)
        d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
        qs = blocks[:, 4:].view(np.int8).astype(np.float32)
        return (d * qs).reshape(q.shape[0], ROW_LEN)
    if ty == T.Q8_K:
        to_float = ggml.dequantize_row_q8_K
    else:
        to_float = ggml.ggml_get_type_traits(ty).contents.to_float
    if not to_float:
        raise RuntimeError(f"ggml has no to_float for {ty.name}")
    for r in range(q.shape[0]):
        to_float(q[r].ctypes.data, out[r].ctypes.data, ROW_LEN)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True, help="GGUF file to write")
    ap.add_argument("--seed", type=int, default=1, help="numpy default_rng seed (default 1)")
    args = ap.parse_args()

    ggml = load_ggml_base()
    src = source_rows(args.seed)
    w = gguf.GGUFWriter(args.output, "ggml-quant-vectors")
    w.add_string(
        "vectors.source",
        f"ggml quantize_chunk / to_float of llama.cpp (ggml {ggml.ggml_version().decode()}, "
        f"via llama-cpp-python {llama_cpp.__version__})",
    )
    w.add_uint32("vectors.seed", args.seed)
    w.add_tensor("source", src)
    for ty in CHUNK_TYPES + ACTIVATION_TYPES:
        q = quantize(ggml, ty, src)
        # The element shape given outright, not derived from the bytes: gguf-py 0.19 sizes a
        # Q8_1 block as 40 bytes (two f32), ggml as 36 (two f16).
        w.add_tensor(f"{ty.name}.q", q.view(np.int8), raw_shape=src.shape, raw_dtype=ty)
        w.add_tensor(f"{ty.name}.f32", dequantize(ggml, ty, q))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {args.output}: {1 + 2 * len(CHUNK_TYPES + ACTIVATION_TYPES)} tensors")


if __name__ == "__main__":
    main()
