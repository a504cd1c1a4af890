//! Comparing two traces tensor by tensor, in graph order, and naming the first divergence.

use serde::Serialize;

use crate::Trace;

/// When two tensors count as the same. Both bounds must hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Tolerance {
    /// Largest allowed RMS of (B − A) relative to the RMS of A.
    pub max_rel_rms: f64,
    /// Smallest allowed cosine similarity.
    pub min_cosine: f64,
}

impl Tolerance {
    /// The default, for two plumb backends doing the same arithmetic in a different order.
    pub const SAME_ENGINE: Tolerance = Tolerance {
        max_rel_rms: 1e-3,
        min_cosine: 0.999_999,
    };

    /// For comparing with llama.cpp, whose quantized matmuls round activations to 8 bits and
    /// whose KV cache is f16. Measured against exact implementations (plumb's reference and
    /// transformers in f32, which agree with each other to 1e-5): up to 5e-2 relative RMS on
    /// the golden traces (largest at `result_norm`/`result_output`), and up to 0.131 with
    /// cosine 0.991 on the inner attention tensors of deep layers in full-layer traces
    /// (`attn_post_norm-17` of gemma3, `kqv_out-16` of qwen2.5). The bounds leave about 1.5×
    /// headroom on that; a real bug (a missing bias: 0.99, cosine 0.12) is far outside them.
    pub const LLAMA_CPP: Tolerance = Tolerance {
        max_rel_rms: 0.2,
        min_cosine: 0.98,
    };

    /// For a backend that computes in f32 as the reference does but keeps its KV cache in
    /// f16, as llama.cpp does (wgpu). Measured against the reference: up to 1.04e-3 relative
    /// RMS (`attn_out-29` of smollm2-135m) with cosine 0.999999, and 5.5e-4 on gemma3-270m.
    /// The bounds leave 10× headroom on that and stay 20× below 8-bit activation noise.
    pub const F16_KV: Tolerance = Tolerance {
        max_rel_rms: 1e-2,
        min_cosine: 0.9999,
    };

    /// A preset by name: `same-engine` or `llama.cpp`.
    pub fn preset(name: &str) -> Option<Tolerance> {
        match name {
            "same-engine" => Some(Self::SAME_ENGINE),
            "llama.cpp" => Some(Self::LLAMA_CPP),
            _ => None,
        }
    }
}

impl Default for Tolerance {
    fn default() -> Self {
        Self::SAME_ENGINE
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    Agree,
    Diverged {
        reason: String,
    },
    ShapeMismatch {
        a: Vec<usize>,
        b: Vec<usize>,
    },
    /// Only in A; not a divergence (reference traces often hold fewer tensors).
    OnlyInA,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TensorDiff {
    pub name: String,
    pub shape: Vec<usize>,
    pub cosine: Option<f64>,
    pub max_abs_err: Option<f64>,
    pub rel_rms_err: Option<f64>,
    #[serde(flatten)]
    pub verdict: Verdict,
}

impl TensorDiff {
    pub fn diverged(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::Diverged { .. } | Verdict::ShapeMismatch { .. }
        )
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffReport {
    pub tolerance: Tolerance,
    /// Every tensor of A, in A's (graph) order.
    pub tensors: Vec<TensorDiff>,
    /// Tensors only B has.
    pub only_in_b: Vec<String>,
    /// Both traces carry token ids and they differ: the runs had different inputs.
    pub tokens_differ: bool,
    pub compared: usize,
}

impl DiffReport {
    pub fn first_divergence(&self) -> Option<&TensorDiff> {
        self.tensors.iter().find(|t| t.diverged())
    }

    pub fn agree(&self) -> bool {
        !self.tokens_differ && self.compared > 0 && self.first_divergence().is_none()
    }
}

/// Compares B against A (the reference: relative errors are relative to A).
pub fn diff(a: &Trace, b: &Trace, tolerance: Tolerance) -> DiffReport {
    let tokens_differ = !a.tokens.is_empty() && !b.tokens.is_empty() && a.tokens != b.tokens;
    let mut compared = 0;
    let tensors = a
        .tensors
        .iter()
        .map(|ta| {
            let unmeasured = |verdict| TensorDiff {
                name: ta.name.clone(),
                shape: ta.shape.clone(),
                cosine: None,
                max_abs_err: None,
                rel_rms_err: None,
                verdict,
            };
            let Some(tb) = b.get(&ta.name) else {
                return unmeasured(Verdict::OnlyInA);
            };
            compared += 1;
            if ta.shape != tb.shape {
                return unmeasured(Verdict::ShapeMismatch {
                    a: ta.shape.clone(),
                    b: tb.shape.clone(),
                });
            }
            let m = Metrics::of(&ta.data, &tb.data);
            TensorDiff {
                name: ta.name.clone(),
                shape: ta.shape.clone(),
                cosine: Some(m.cosine),
                max_abs_err: Some(m.max_abs_err),
                rel_rms_err: Some(m.rel_rms_err),
                verdict: m.verdict(tolerance),
            }
        })
        .collect();
    let only_in_b = b
        .tensors
        .iter()
        .filter(|t| a.get(&t.name).is_none())
        .map(|t| t.name.clone())
        .collect();
    DiffReport {
        tolerance,
        tensors,
        only_in_b,
        tokens_differ,
        compared,
    }
}

struct Metrics {
    cosine: f64,
    max_abs_err: f64,
    rel_rms_err: f64,
    non_finite_mismatch: usize,
}

impl Metrics {
    fn of(a: &[f32], b: &[f32]) -> Self {
        let (mut dot, mut aa, mut bb, mut err_sq, mut max_abs) = (0f64, 0f64, 0f64, 0f64, 0f64);
        let mut non_finite_mismatch = 0;
        for (&x, &y) in a.iter().zip(b) {
            if !x.is_finite() || !y.is_finite() {
                // Equal infinities agree; anything else non-finite is a mismatch.
                non_finite_mismatch += usize::from(!(x == y));
                continue;
            }
            let (x, y) = (f64::from(x), f64::from(y));
            dot += x * y;
            aa += x * x;
            bb += y * y;
            err_sq += (x - y) * (x - y);
            max_abs = max_abs.max((x - y).abs());
        }
        let cosine = if aa == 0.0 && bb == 0.0 {
            1.0
        } else if aa == 0.0 || bb == 0.0 {
            0.0
        } else {
            dot / (aa.sqrt() * bb.sqrt())
        };
        // Relative to A's size; for an all-zero A the absolute RMS error is what is left.
        let rel_rms_err = if aa > 0.0 {
            (err_sq / aa).sqrt()
        } else {
            (err_sq / a.len().max(1) as f64).sqrt()
        };
        Metrics {
            cosine,
            max_abs_err: max_abs,
            rel_rms_err,
            non_finite_mismatch,
        }
    }

    fn verdict(&self, t: Tolerance) -> Verdict {
        let mut reasons = Vec::new();
        if self.non_finite_mismatch > 0 {
            reasons.push(format!(
                "{} values are NaN/Inf in one trace only",
                self.non_finite_mismatch
            ));
        }
        if self.rel_rms_err > t.max_rel_rms || self.rel_rms_err.is_nan() {
            reasons.push(format!(
                "relative RMS error {:.3e} > {:.1e}",
                self.rel_rms_err, t.max_rel_rms
            ));
        }
        if self.cosine < t.min_cosine || self.cosine.is_nan() {
            reasons.push(format!("cosine {:.6} < {}", self.cosine, t.min_cosine));
        }
        if reasons.is_empty() {
            Verdict::Agree
        } else {
            Verdict::Diverged {
                reason: reasons.join("; "),
            }
        }
    }
}

/// The operation that produces a named intermediate, for "where to look" in a report.
pub fn op_that_produced(name: &str) -> &'static str {
    let base = name.rsplit_once('-').map_or(name, |(b, layer)| {
        if layer.parse::<u32>().is_ok() {
            b
        } else {
            name
        }
    });
    match base {
        "inp_embd" => "token embedding lookup (gemma3: then scaled by sqrt(n_embd))",
        "attn_norm" => "RMSNorm of the layer input, times attn_norm.weight",
        "Qcur" => "Q projection (+ bias in qwen2, + Q norm in gemma3), then RoPE",
        "Kcur" => "K projection (+ bias in qwen2, + K norm in gemma3), then RoPE",
        "Vcur" => "V projection (+ bias in qwen2)",
        "Qcur_normed" => "Q RMSNorm times attn_q_norm.weight (gemma3), before RoPE",
        "Kcur_normed" => "K RMSNorm times attn_k_norm.weight (gemma3), before RoPE",
        "kqv_out" => "attention: softmax(scale * Q K^T + mask) V over the KV cache",
        "attn_out" => "attention output projection (attn_output.weight)",
        "attn_post_norm" => "post-attention RMSNorm (gemma3)",
        "ffn_inp" => "residual add: layer input + attention output",
        "ffn_norm" => "RMSNorm of the FFN input, times ffn_norm.weight",
        "ffn_out" => "gated FFN: ffn_down(act(ffn_gate x) * ffn_up x)",
        "ffn_post_norm" => "post-FFN RMSNorm (gemma3)",
        "l_out" => "residual add: ffn_inp + FFN output (the layer's output)",
        "result_norm" => "final RMSNorm, times output_norm.weight",
        "result_output" => {
            "output projection to logits (output.weight, or token_embd.weight when tied)"
        }
        _ => "unknown operation",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plumb_model::ObservedTensor;

    fn t(name: &str, data: Vec<f32>) -> ObservedTensor {
        ObservedTensor {
            name: name.into(),
            shape: vec![data.len()],
            data,
        }
    }

    fn trace(tensors: Vec<ObservedTensor>) -> Trace {
        Trace {
            tokens: vec![1, 2],
            tensors,
            ..Trace::default()
        }
    }

    #[test]
    fn metrics_on_known_vectors() {
        let m = Metrics::of(&[3.0, 4.0], &[3.0, 4.0]);
        assert_eq!((m.cosine, m.max_abs_err, m.rel_rms_err), (1.0, 0.0, 0.0));
        let m = Metrics::of(&[3.0, 4.0], &[4.0, -3.0]);
        assert!(m.cosine.abs() < 1e-12);
        assert!((m.rel_rms_err - 2f64.sqrt()).abs() < 1e-12);
        assert_eq!(m.max_abs_err, 7.0);
        let m = Metrics::of(&[1.0, 0.0], &[1.1, 0.0]);
        assert!((m.rel_rms_err - 0.1).abs() < 1e-6);
        let m = Metrics::of(&[0.0, 0.0], &[0.0, 0.0]);
        assert_eq!((m.cosine, m.rel_rms_err), (1.0, 0.0));
        let m = Metrics::of(&[1.0, f32::NAN], &[1.0, 1.0]);
        assert_eq!(m.non_finite_mismatch, 1);
        assert!(matches!(
            m.verdict(Tolerance::LLAMA_CPP),
            Verdict::Diverged { .. }
        ));
    }

    #[test]
    fn names_the_first_divergence_in_graph_order() {
        let a = trace(vec![
            t("inp_embd", vec![1.0, 2.0]),
            t("attn_norm-0", vec![1.0, 2.0]),
            t("Qcur-0", vec![1.0, 2.0]),
            t("l_out-0", vec![1.0, 2.0]),
        ]);
        let mut b = a.clone();
        b.tensors[2].data[1] = 2.5;
        b.tensors[3].data[0] = -1.0;
        b.tensors.push(t("extra", vec![0.0]));
        let r = diff(&a, &b, Tolerance::SAME_ENGINE);
        let first = r.first_divergence().unwrap();
        assert_eq!(first.name, "Qcur-0");
        assert!(op_that_produced(&first.name).contains("RoPE"));
        assert!(!r.agree());
        assert_eq!(r.only_in_b, ["extra"]);
        assert_eq!(r.compared, 4);
        assert!(diff(&a, &a, Tolerance::SAME_ENGINE).agree());
    }

    #[test]
    fn tolerance_presets_decide() {
        let a = trace(vec![t("x", vec![1.0, 1.0, 1.0, 1.0])]);
        let b = trace(vec![t("x", vec![1.01, 0.99, 1.01, 0.99])]);
        assert!(!diff(&a, &b, Tolerance::SAME_ENGINE).agree());
        assert!(diff(&a, &b, Tolerance::LLAMA_CPP).agree());
        assert_eq!(Tolerance::preset("llama.cpp"), Some(Tolerance::LLAMA_CPP));
        assert_eq!(Tolerance::preset("nope"), None);
    }

    #[test]
    fn shapes_tokens_and_missing_tensors() {
        let a = trace(vec![t("x", vec![1.0, 2.0]), t("only_a", vec![1.0])]);
        let mut b = trace(vec![t("x", vec![1.0, 2.0])]);
        let r = diff(&a, &b, Tolerance::SAME_ENGINE);
        assert!(r.agree(), "a tensor only in A is not a divergence");
        assert_eq!(r.tensors[1].verdict, Verdict::OnlyInA);
        b.tensors[0].shape = vec![2, 1];
        assert!(matches!(
            diff(&a, &b, Tolerance::SAME_ENGINE)
                .first_divergence()
                .unwrap()
                .verdict,
            Verdict::ShapeMismatch { .. }
        ));
        b.tensors[0].shape = vec![2];
        b.tokens = vec![1, 3];
        let r = diff(&a, &b, Tolerance::SAME_ENGINE);
        assert!(r.tokens_differ && !r.agree());
        let empty = trace(vec![]);
        assert!(
            !diff(&empty, &b, Tolerance::SAME_ENGINE).agree(),
            "nothing compared"
        );
    }

    #[test]
    fn op_names_cover_layer_suffixes() {
        assert!(op_that_produced("l_out-21").starts_with("residual add"));
        assert!(op_that_produced("Kcur_normed-0").contains("gemma3"));
        assert!(op_that_produced("result_output").contains("logits"));
        assert_eq!(op_that_produced("mystery-x"), "unknown operation");
    }
}
