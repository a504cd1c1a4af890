#!/usr/bin/env python3
"""Record Hugging Face transformers' intermediate tensors for one prompt as a plumb trace file.

    python3 tools/reference/hf_trace.py -m MODEL.gguf -p PROMPT -o out.trace.gguf \
        [--tensors 'l_out-*,result_norm'] [--tokens-from plumb.trace.gguf]

MODEL is a GGUF file (transformers dequantizes it on load: `gguf_file=`, needs the gguf package)
or a directory holding a safetensors model. The output has the layout `plumb trace` writes
(crates/verify/src/trace.rs), so `plumb diff` compares it with plumb's or llama.cpp's traces.

Where each name comes from (llama / qwen2 / gemma3 module names in transformers):
    inp_embd        output of model.embed_tokens (gemma3's includes the sqrt(n_embd) scaling)
    attn_norm-N     output of input_layernorm
    Qcur_normed-N   output of self_attn.q_norm / k_norm (gemma3), before RoPE
    Kcur_normed-N
    Qcur-N, Kcur-N  the query and key that reach the attention function, i.e. after RoPE: the
    Vcur-N          script registers its own attention implementation, which records them and
                    then runs the model's eager attention
    kqv_out-N       input of self_attn.o_proj
    attn_out-N      output of self_attn.o_proj
    attn_post_norm-N  output of post_attention_layernorm (gemma3)
    ffn_inp-N       the residual after attention: input of the FFN norm
    ffn_norm-N      output of the FFN norm (post_attention_layernorm in llama/qwen2,
                    pre_feedforward_layernorm in gemma3)
    ffn_out-N       output of mlp
    ffn_post_norm-N output of post_feedforward_layernorm (gemma3)
    l_out-N         output of the decoder layer
    result_norm     output of model.norm
    result_output   logits (lm_head), every position

llama-family GGUFs store Q and K with each head's rows interleaved for llama.cpp's RoPE, and
transformers' GGUF loader undoes that to use its rotate-half RoPE. Where the loaded Q weight is
in that un-permuted order (checked against the GGUF file's blk.0.attn_q.weight; for a
safetensors llama/mistral model it always is), the recorded Qcur/Kcur are put back into
llama.cpp's order so they compare element for element.

Tokens come from the transformers tokenizer with add_special_tokens=True, which does not
always match llama.cpp's (BOS handling differs between tokenizer conversions). Use
--tokens-from with a trace from `plumb trace` or llama_cpp_trace.py to run exactly its ids.
Needs: torch, transformers, gguf, numpy.
"""

from __future__ import annotations

import argparse
import os
import sys

import gguf
import numpy as np
import torch
import transformers
from trace_format import matcher, model_info, write_trace
from transformers import AttentionInterface, AutoModelForCausalLM, AutoTokenizer
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

ATTN_IMPL = "plumb_trace"
# Model types whose GGUF conversion interleaves Q/K rows (convert_hf_to_gguf's LlamaModel).
INTERLEAVED_QK = {"llama", "mistral"}


def unpermute_rows(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's interleaved Q/K rows (pairs 2i, 2i+1 per head) -> rotate-half order."""
    return w.reshape(n_head, -1, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def qk_needs_interleaving(model, model_path: str) -> bool:
    """Whether the loaded Q/K use rotate-half row order where llama.cpp's use interleaved pairs."""
    if os.path.isdir(model_path):
        return model.config.model_type in INTERLEAVED_QK
    stored = next(
        (t for t in gguf.GGUFReader(model_path).tensors if t.name == "blk.0.attn_q.weight"), None
    )
    if stored is None:
        print(
            "warning: no blk.0.attn_q.weight; Qcur/Kcur are kept in transformers' order",
            file=sys.stderr,
        )
        return False
    rows = gguf.dequantize(stored.data, stored.tensor_type).reshape(-1, int(stored.shape[0]))
    loaded = model.model.layers[0].self_attn.q_proj.weight.detach().float().numpy()
    if loaded.shape == rows.shape:
        if np.array_equal(loaded, rows):
            return False
        if np.array_equal(loaded, unpermute_rows(rows, model.config.num_attention_heads)):
            return True
    sys.exit(
        f"error: cannot tell the Q/K row order: the loaded q_proj weight {tuple(loaded.shape)} "
        f"matches blk.0.attn_q.weight {rows.shape} neither as stored nor un-permuted"
    )


class Recorder:
    def __init__(self, wanted, n_tokens: int, interleave_qk: bool):
        self.wanted = wanted
        self.n_tokens = n_tokens
        self.interleave_qk = interleave_qk
        self.tensors: dict[str, np.ndarray] = {}

    def put(self, name: str, value: torch.Tensor) -> None:
        if self.wanted(name):
            self.tensors[name] = value.detach().to(torch.float32).cpu().numpy()

    def hidden(self, name: str, value) -> None:
        """[1, n_tokens, dim] -> (n_tokens, dim), i.e. ggml [dim, n_tokens]."""
        if isinstance(value, tuple):
            value = value[0]
        self.put(name, value[0])

    def per_head(self, name: str, value: torch.Tensor, qk_rows: bool = False) -> None:
        """[1, n_head, n_tokens, head_dim] or [1, n_tokens, n_head, head_dim] ->
        (n_tokens, n_head, head_dim), i.e. ggml [head_dim, n_head, n_tokens]."""
        x = value[0]
        tokens_first = x.shape[0] == self.n_tokens and x.shape[1] != self.n_tokens
        if not tokens_first:  # transformers' attention layout, [n_head, n_tokens, head_dim]
            x = x.transpose(0, 1)
        if qk_rows and self.interleave_qk:
            # HF rotate-half order (i, i + d/2) back to llama.cpp's pairs (2i, 2i + 1).
            half = x.shape[-1] // 2
            x = x.reshape(*x.shape[:-1], 2, half).transpose(-1, -2).reshape(x.shape)
        self.put(name, x)


def hook_output(rec: Recorder, module, name: str) -> None:
    module.register_forward_hook(lambda _m, _inp, out: rec.hidden(name, out))


def hook_input(rec: Recorder, module, name: str) -> None:
    module.register_forward_pre_hook(lambda _m, inp: rec.hidden(name, inp[0]))


def hook_qk_output(rec: Recorder, module, name: str) -> None:
    module.register_forward_hook(lambda _m, _inp, out: rec.per_head(name, out, qk_rows=True))


def install_attention(rec: Recorder) -> None:
    """An attention implementation that records Q/K (after RoPE) and V, then runs the model's
    own eager attention with the eager (additive, sliding-window-aware) mask."""

    def traced(module, query, key, value, attention_mask, **kwargs):
        il = module.layer_idx
        rec.per_head(f"Qcur-{il}", query, qk_rows=True)
        rec.per_head(f"Kcur-{il}", key, qk_rows=True)
        rec.per_head(f"Vcur-{il}", value)
        eager = sys.modules[type(module).__module__].eager_attention_forward
        return eager(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register(ATTN_IMPL, traced)
    AttentionMaskInterface.register(ATTN_IMPL, ALL_MASK_ATTENTION_FUNCTIONS["eager"])


def install_hooks(rec: Recorder, model) -> None:
    inner = model.model
    hook_output(rec, inner.embed_tokens, "inp_embd")
    for il, layer in enumerate(inner.layers):
        attn = layer.self_attn
        hook_output(rec, layer.input_layernorm, f"attn_norm-{il}")
        for norm, name in [("q_norm", "Qcur_normed"), ("k_norm", "Kcur_normed")]:
            if getattr(attn, norm, None) is not None:
                hook_qk_output(rec, getattr(attn, norm), f"{name}-{il}")
        hook_input(rec, attn.o_proj, f"kqv_out-{il}")
        hook_output(rec, attn.o_proj, f"attn_out-{il}")
        if hasattr(layer, "pre_feedforward_layernorm"):  # gemma2/3: sandwich norms
            hook_output(rec, layer.post_attention_layernorm, f"attn_post_norm-{il}")
            ffn_norm = layer.pre_feedforward_layernorm
        else:
            ffn_norm = layer.post_attention_layernorm
        hook_input(rec, ffn_norm, f"ffn_inp-{il}")
        hook_output(rec, ffn_norm, f"ffn_norm-{il}")
        hook_output(rec, layer.mlp, f"ffn_out-{il}")
        if hasattr(layer, "post_feedforward_layernorm"):
            hook_output(rec, layer.post_feedforward_layernorm, f"ffn_post_norm-{il}")
        hook_output(rec, layer, f"l_out-{il}")
    hook_output(rec, inner.norm, "result_norm")
    hook_output(rec, model.lm_head, "result_output")


def load(model_path: str):
    if os.path.isdir(model_path):
        where, extra = model_path, {}
    else:
        where, extra = (
            os.path.dirname(os.path.abspath(model_path)),
            {"gguf_file": os.path.basename(model_path)},
        )
    tokenizer = AutoTokenizer.from_pretrained(where, **extra)
    model = AutoModelForCausalLM.from_pretrained(
        where, dtype=torch.float32, attn_implementation=ATTN_IMPL, **extra
    )
    return tokenizer, model.eval()


def tokens_of(trace_path: str) -> list[int]:
    reader = gguf.GGUFReader(trace_path)
    for t in reader.tensors:
        if t.name == "tokens":
            return [int(x) for x in np.asarray(t.data).ravel()]
    sys.exit(f"error: {trace_path} has no `tokens` tensor")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF file or safetensors model dir")
    ap.add_argument("-p", "--prompt", required=True, help="tokenized with add_special_tokens")
    ap.add_argument("-o", "--output", required=True, help="trace file to write")
    ap.add_argument("--tensors", metavar="PATTERN", help="comma-separated globs, as plumb's")
    ap.add_argument("--tokens-from", metavar="TRACE", help="run the token ids of this trace")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"error: no such model: {args.model}")
    try:
        wanted = matcher(args.tensors)
    except ValueError as err:
        sys.exit(f"error: {err}")
    torch.set_num_threads(args.threads)

    rec = Recorder(wanted, 0, False)
    install_attention(rec)
    tokenizer, model = load(args.model)
    if args.tokens_from:
        tokens = tokens_of(args.tokens_from)
    else:
        tokens = tokenizer(args.prompt, add_special_tokens=True)["input_ids"]
    rec.n_tokens = len(tokens)
    rec.interleave_qk = qk_needs_interleaving(model, args.model)
    install_hooks(rec, model)
    with torch.no_grad():
        model(input_ids=torch.tensor([tokens]), use_cache=False)
    if not rec.tensors:
        sys.exit("error: no tensor name matched; see --tensors")

    reference = (
        f"transformers {transformers.__version__} (torch {torch.__version__}, float32, "
        f"CPU, attention {ATTN_IMPL} over eager), forward hooks"
    )
    write_trace(args.output, tokens, rec.tensors, model_info(args.model, args.prompt, reference))
    print(f"wrote {args.output}: {len(tokens)} tokens, {len(rec.tensors)} tensors")


if __name__ == "__main__":
    main()
