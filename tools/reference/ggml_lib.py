"""ggml's C API, from the libggml-base that llama-cpp-python ships next to llama.cpp.

llama-cpp-python binds llama.h but not ggml.h; the reference scripts here need a few ggml calls
(tensor names and data in the eval callback, the quantizers and dequantizers of every type),
so they load the same shared library through ctypes and declare the signatures of ggml 0.25.3
(ggml/include/ggml.h, ggml/src/ggml-quants.h) below.
"""

from __future__ import annotations

import ctypes
import os
import sys

import llama_cpp

# ggml_to_float_t and ggml_from_float_t (ggml.h).
TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)
FROM_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class TypeTraits(ctypes.Structure):
    """`struct ggml_type_traits` (ggml.h): what ggml_get_type_traits returns."""

    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", TO_FLOAT),
        ("from_float_ref", FROM_FLOAT),
    ]


_SIGNATURES = [
    ("ggml_get_name", ctypes.c_char_p, [ctypes.c_void_p]),
    ("ggml_get_data", ctypes.c_void_p, [ctypes.c_void_p]),
    ("ggml_nbytes", ctypes.c_size_t, [ctypes.c_void_p]),
    ("ggml_type_size", ctypes.c_size_t, [ctypes.c_int]),
    ("ggml_blck_size", ctypes.c_int64, [ctypes.c_int]),
    ("ggml_type_name", ctypes.c_char_p, [ctypes.c_int]),
    ("ggml_row_size", ctypes.c_size_t, [ctypes.c_int, ctypes.c_int64]),
    ("ggml_backend_buffer_is_host", ctypes.c_bool, [ctypes.c_void_p]),
    ("ggml_version", ctypes.c_char_p, []),
    ("ggml_commit", ctypes.c_char_p, []),
    ("ggml_get_type_traits", ctypes.POINTER(TypeTraits), [ctypes.c_int]),
    ("ggml_quantize_requires_imatrix", ctypes.c_bool, [ctypes.c_int]),
    # The activation types, which ggml_quantize_chunk and the base type traits leave out
    # (ggml-quants.h): (const float * x, block * y, int64_t k) and (const block *, float *, k).
    ("quantize_row_q8_1_ref", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
    ("quantize_row_q8_K_ref", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
    ("dequantize_row_q8_K", None, [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64]),
    (
        "ggml_quantize_chunk",
        ctypes.c_size_t,
        [
            ctypes.c_int,  # type
            ctypes.c_void_p,  # const float * src
            ctypes.c_void_p,  # void * dst
            ctypes.c_int64,  # start
            ctypes.c_int64,  # nrows
            ctypes.c_int64,  # n_per_row
            ctypes.c_void_p,  # const float * imatrix (may be NULL)
        ],
    ),
]


def load_ggml_base() -> ctypes.CDLL:
    """libggml-base from llama-cpp-python's lib folder, with the signatures above declared."""
    lib_dir = os.path.join(os.path.dirname(llama_cpp.__file__), "lib")
    candidates = [os.path.join(lib_dir, n) for n in ("libggml-base.so", "libggml-base.dylib")]
    path = next((p for p in candidates if os.path.exists(p)), None)
    if path is None:
        sys.exit(f"error: no libggml-base next to llama_cpp in {lib_dir}")
    lib = ctypes.CDLL(path)
    for fn, res, args in _SIGNATURES:
        f = getattr(lib, fn)
        f.restype, f.argtypes = res, args
    return lib


# The llama.cpp commit llama-cpp-python 0.3.36 vendors, as its CHANGELOG names it. The build
# records only a short prefix (ggml_commit() is `0c1e570-dirty`), checked against this.
LLAMA_CPP_COMMIT = "0c1e57098"


def llama_cpp_commit(ggml: ctypes.CDLL) -> str:
    """LLAMA_CPP_COMMIT, when the loaded build is that commit; exits otherwise."""
    built = ggml.ggml_commit().decode()
    if not LLAMA_CPP_COMMIT.startswith(built.split("-")[0]):
        sys.exit(
            f"error: this llama.cpp build is commit {built}, not {LLAMA_CPP_COMMIT} "
            "(llama-cpp-python 0.3.36); the reference data is pinned to that build"
        )
    return LLAMA_CPP_COMMIT


def reference_string(ggml: ctypes.CDLL) -> str:
    """`llama.cpp <commit> (ggml <version>) via llama-cpp-python <version>`."""
    return (
        f"llama.cpp {llama_cpp_commit(ggml)} (ggml {ggml.ggml_version().decode()}) via "
        f"llama-cpp-python {llama_cpp.__version__}"
    )
