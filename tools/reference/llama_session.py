"""One llama.cpp model and context with the settings all golden data was made with, through
llama-cpp-python's low-level (llama.h) API.

The settings are those of `llama_cpp.Llama(model, n_ctx=1024, n_batch=512, n_ubatch=512,
n_threads=2, logits_all=True, flash_attn=False)`, spelled out: CPU only, an f16 KV cache (the
default), flash attention off, 2 threads for single tokens and for batches, and llama.cpp's
defaults for everything else (for gemma3: a full-size sliding-window cache, swa_full). Tokens
are evaluated as that class evaluates them: in batches of at most 512 at consecutive positions
of sequence 0, with logits for every token. Run one llama.cpp process at a time on a shared
machine; the numbers do not depend on it, the time does.
"""

from __future__ import annotations

import ctypes
import os
import sys

import llama_cpp
import numpy as np

N_CTX = 1024
N_BATCH = 512
N_THREADS = 2
GGML_LOG_LEVEL_ERROR = 4

# How the golden files describe these settings (meta.json's "context").
CONTEXT_DESCRIPTION = (
    f"llama.h API with the settings of llama_cpp.Llama(n_ctx={N_CTX}, n_batch={N_BATCH}, "
    f"n_ubatch={N_BATCH}, n_threads={N_THREADS}, logits_all=True, flash_attn=False); "
    "KV cache type f16 (default)"
)


def system_info() -> str:
    """llama_print_system_info(): the CPU features this llama.cpp build was compiled for."""
    return llama_cpp.llama_print_system_info().decode().strip()


# system_info() flag -> name, widest first.
_ISAS = [("AVX512 = 1", "AVX-512"), ("AVX2 = 1", "AVX2"), ("NEON = 1", "NEON")]


def cpu_description() -> str:
    """`AVX-512, no AMX` and the like, from system_info()."""
    info = system_info()
    isa = next((name for flag, name in _ISAS if flag in info), "no SIMD")
    return f"{isa}, {'AMX' if 'AMX_INT8 = 1' in info else 'no AMX'}"


@llama_cpp.llama_log_callback
def _quiet_log(level, text, _user_data):
    if level == GGML_LOG_LEVEL_ERROR:
        sys.stderr.write(text.decode("utf-8", "replace"))


class LlamaSession:
    """A loaded model, its vocabulary and one context (`with LlamaSession(path) as s:`)."""

    def __init__(self, model_path: str, *, with_context: bool = True):
        if not os.path.isfile(model_path):
            sys.exit(f"error: no such model file: {model_path}")
        llama_cpp.llama_log_set(_quiet_log, None)
        llama_cpp.llama_backend_init()
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(model_path.encode(), mparams)
        if not self.model:
            sys.exit(f"error: llama.cpp could not load {model_path}")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.ctx = None
        self.batch = None
        self.n_past = 0
        if with_context:
            self._init_context()

    def _init_context(self) -> None:
        p = llama_cpp.llama_context_default_params()
        p.n_ctx = N_CTX
        p.n_batch = p.n_ubatch = N_BATCH
        p.n_threads = p.n_threads_batch = N_THREADS
        p.flash_attn_type = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        # What llama_cpp.Llama passes where llama.h's defaults differ (-1 means "the model's").
        p.yarn_attn_factor = 1.0
        p.yarn_beta_fast = 32.0
        p.yarn_beta_slow = 1.0
        p.no_perf = False
        self.ctx = llama_cpp.llama_init_from_model(self.model, p)
        if not self.ctx:
            sys.exit("error: llama.cpp could not create a context")
        self.batch = llama_cpp.llama_batch_init(N_BATCH, 0, 1)

    def close(self) -> None:
        if self.batch is not None:
            llama_cpp.llama_batch_free(self.batch)
        if self.ctx:
            llama_cpp.llama_free(self.ctx)
        llama_cpp.llama_model_free(self.model)

    def __enter__(self) -> LlamaSession:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()

    # --- evaluation -------------------------------------------------------------------------

    def reset(self) -> None:
        """Empty the KV cache: the next eval starts at position 0."""
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        self.n_past = 0

    def eval(self, tokens: list[int]) -> np.ndarray:
        """Evaluate `tokens` after those already in the cache, in batches of at most N_BATCH;
        the logits of every one of them, float32 [len(tokens), n_vocab]."""
        if self.n_past + len(tokens) > N_CTX:
            raise ValueError(f"{self.n_past} + {len(tokens)} tokens exceed the context of {N_CTX}")
        out = np.empty((len(tokens), self.n_vocab), dtype=np.float32)
        for start in range(0, len(tokens), N_BATCH):
            chunk = tokens[start : start + N_BATCH]
            b = self.batch
            for i, tok in enumerate(chunk):
                b.token[i] = tok
                b.pos[i] = self.n_past + i
                b.n_seq_id[i] = 1
                b.seq_id[i][0] = 0
                b.logits[i] = 1
            b.n_tokens = len(chunk)
            rc = llama_cpp.llama_decode(self.ctx, b)
            if rc != 0:
                raise RuntimeError(f"llama_decode returned {rc}")
            logits = llama_cpp.llama_get_logits(self.ctx)
            rows = np.ctypeslib.as_array(logits, shape=(len(chunk) * self.n_vocab,))
            out[start : start + len(chunk)] = rows.reshape(len(chunk), self.n_vocab)
            self.n_past += len(chunk)
        return out

    # --- vocabulary -------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (llama_cpp.llama_token * cap)()
        n = llama_cpp.llama_tokenize(
            self.vocab, data, len(data), buf, cap, add_special, parse_special
        )
        if n < 0:
            cap = -n
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(
                self.vocab, data, len(data), buf, cap, add_special, parse_special
            )
        if n < 0:
            raise RuntimeError(f"llama_tokenize failed ({n}) on {text!r}")
        return list(buf[:n])

    def piece(self, token: int, special: bool = True) -> bytes:
        """llama_token_to_piece(token, lstrip=0, special)."""
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        return buf.raw[:n]

    def detokenize(self, tokens: list[int], remove_special: bool, unparse_special: bool) -> bytes:
        arr = (llama_cpp.llama_token * max(1, len(tokens)))(*tokens)
        cap = 16 * len(tokens) + 16
        buf = ctypes.create_string_buffer(cap)
        n = llama_cpp.llama_detokenize(
            self.vocab, arr, len(tokens), buf, cap, remove_special, unparse_special
        )
        if n < 0:
            cap = -n
            buf = ctypes.create_string_buffer(cap)
            n = llama_cpp.llama_detokenize(
                self.vocab, arr, len(tokens), buf, cap, remove_special, unparse_special
            )
        if n < 0:
            raise RuntimeError(f"llama_detokenize failed ({n})")
        return buf.raw[:n]

    def token_text(self, token: int) -> str:
        return llama_cpp.llama_vocab_get_text(self.vocab, token).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self.vocab, token))

    @property
    def bos(self) -> int:
        return llama_cpp.llama_vocab_bos(self.vocab)

    @property
    def eos(self) -> int:
        return llama_cpp.llama_vocab_eos(self.vocab)

    @property
    def add_bos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_bos(self.vocab))

    @property
    def add_eos(self) -> bool:
        return bool(llama_cpp.llama_vocab_get_add_eos(self.vocab))

    # --- model metadata ---------------------------------------------------------------------

    def metadata(self) -> dict[str, str]:
        """llama.cpp's view of the GGUF metadata: every key that is not an array, as a string,
        in llama.cpp's order."""
        out = {}
        for i in range(llama_cpp.llama_model_meta_count(self.model)):
            out[self._meta_string(llama_cpp.llama_model_meta_key_by_index, i)] = self._meta_string(
                llama_cpp.llama_model_meta_val_str_by_index, i
            )
        return out

    def _meta_string(self, getter, i: int) -> str:
        buf = ctypes.create_string_buffer(1024)
        n = getter(self.model, i, buf, len(buf))
        if n >= len(buf):
            buf = ctypes.create_string_buffer(n + 1)
            n = getter(self.model, i, buf, len(buf))
        return buf.raw[:n].decode("utf-8")
