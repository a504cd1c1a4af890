//! The CUDA backend's fused composites (add_rms_norm, gated_ffn, rope_store_kv) against the
//! primitives they replace, composed as the trait's default implementations compose them,
//! and top_k on the device against the host's ranking.

mod common;

use common::{kv_cache, run, tensors, weight, with_pass};
use plumb_backend_cuda::{CudaBackend, CudaTensor};
use plumb_gguf::GgmlType;
use plumb_model::{
    Activation, Activations, AttentionStep, Backend, GatedFfnWeights, KvConfig, LayerKv,
    Projection, Rope, RopeStyle,
};
use plumb_testutil::Rng;

/// Fails unless `got` and `want` hold the same values bit for bit: the fused kernels do the
/// primitives' arithmetic in the same order.
fn assert_same(cuda: &CudaBackend, got: &CudaTensor, want: &CudaTensor, what: &str) {
    let (got, want) = (cuda.to_host(got).unwrap(), cuda.to_host(want).unwrap());
    assert_eq!(got.len(), want.len(), "{what}: sizes");
    let same = got
        .iter()
        .zip(&want)
        .all(|(a, b)| a.to_bits() == b.to_bits());
    assert!(
        same,
        "{what}: the fused result differs from the primitives'"
    );
}

#[test]
fn add_rms_norm_equals_add_then_rms_norm() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(21);
    let (_, a) = tensors(&cuda, &mut rng, 5, 576);
    let (_, b) = tensors(&cuda, &mut rng, 5, 576);
    for group in [576, 64] {
        let values: Vec<f32> = (0..group).map(|_| 1.0 + 0.5 * rng.uniform()).collect();
        let (_, w) = weight(&cuda, "norm.weight", GgmlType::F32, &[group], &values);
        let (sum, normed) = cuda.add_rms_norm(&a, &b, &w, 1e-6).unwrap();
        let want_sum = cuda.add(&a, &b).unwrap();
        let want = cuda.rms_norm(&want_sum, &w, 1e-6).unwrap();
        assert_same(&cuda, &sum, &want_sum, &format!("sum, groups of {group}"));
        assert_same(&cuda, &normed, &want, &format!("norm, groups of {group}"));
    }
}

#[test]
fn gated_ffn_equals_its_projections_and_activation() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(22);
    let (n_embd, n_ff) = (256, 512);
    let (_, x) = tensors(&cuda, &mut rng, 3, n_embd);
    let matrix = |rng: &mut Rng, name: &str, k: usize, m: usize| {
        weight(
            &cuda,
            name,
            GgmlType::Q8_0,
            &[k, m],
            &rng.values(k * m, 1.0),
        )
        .1
    };
    let gate = matrix(&mut rng, "gate", n_embd, n_ff);
    let up = matrix(&mut rng, "up", n_embd, n_ff);
    let down = matrix(&mut rng, "down", n_ff, n_embd);
    let (_, gate_bias) = weight(
        &cuda,
        "gate.bias",
        GgmlType::F32,
        &[n_ff],
        &rng.values(n_ff, 1.0),
    );
    let (_, up_bias) = weight(
        &cuda,
        "up.bias",
        GgmlType::F32,
        &[n_ff],
        &rng.values(n_ff, 1.0),
    );
    for activation in [Activation::Silu, Activation::GeluTanh] {
        for with_bias in [false, true] {
            let p = |w, b| Projection {
                weight: w,
                bias: with_bias.then_some(b),
            };
            let ffn = GatedFfnWeights {
                gate: p(&gate, &gate_bias),
                up: p(&up, &up_bias),
                down: Projection {
                    weight: &down,
                    bias: None,
                },
                activation,
            };
            let got = cuda.gated_ffn(&x, &ffn).unwrap();
            let g = cuda.project(&x, ffn.gate).unwrap();
            let u = cuda.project(&x, ffn.up).unwrap();
            let hidden = cuda.gated_activation(&g, &u, activation).unwrap();
            let want = cuda.project(&hidden, ffn.down).unwrap();
            assert_same(
                &cuda,
                &got,
                &want,
                &format!("{activation:?}, bias {with_bias}"),
            );
        }
    }
}

#[test]
fn rope_store_kv_equals_rope_rope_store_kv() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(23);
    let (n_head, n_head_kv, head_dim) = (8, 2, 64);
    let layers = || vec![LayerKv::new(n_head_kv, head_dim, head_dim, None)];
    let config = KvConfig::new(64, 2, 64).with_block_size(4);
    let (mut fused, mut composed) = (
        kv_cache(&cuda, config, layers()),
        kv_cache(&cuda, config, layers()),
    );
    for (n_rot, style) in [(64, RopeStyle::Neox), (32, RopeStyle::Normal)] {
        let rope = Rope {
            style,
            n_rot,
            freq_base: 10_000.0,
            freq_scale: 1.0,
            freq_factors: None,
            yarn: None,
            attn_factor: 1.0,
        };
        let (start0, start1) = (fused.seq_len(0), fused.seq_len(1));
        let places = [run(1, start1, start1 + 5), run(0, start0, start0 + 2)].concat();
        let tokens = vec![0; places.len()];
        let n = places.len();
        let inputs = |rng: &mut Rng| {
            [n_head, n_head_kv, n_head_kv].map(|heads| {
                cuda.upload(n, heads * head_dim, rng.values(n * heads * head_dim, 1.0))
            })
        };
        let [q, k, v] = inputs(&mut rng).map(Result::unwrap);
        let copy = |t: &CudaTensor| cuda.upload(n, t.width(), cuda.to_host(t).unwrap()).unwrap();
        let (q2, k2) = (copy(&q), copy(&k));
        let step = AttentionStep {
            layer: 0,
            n_head,
            scale: 0.125,
            softcap: None,
        };
        let (gq, gk, gout) = with_pass(&cuda, &mut fused, &tokens, &places, &[], |pass, kv| {
            let (q, k) = cuda.rope_store_kv(q, k, &v, kv, 0, head_dim, &rope, pass)?;
            let out = cuda.attention(&q, kv, &step, pass)?;
            Ok((q, k, out))
        })
        .unwrap();
        let (wq, wk, wout) = with_pass(&cuda, &mut composed, &tokens, &places, &[], |pass, kv| {
            let q = cuda.rope(q2, head_dim, &rope, pass)?;
            let k = cuda.rope(k2, head_dim, &rope, pass)?;
            cuda.store_kv(&k, &v, kv, 0, pass)?;
            let out = cuda.attention(&q, kv, &step, pass)?;
            Ok((q, k, out))
        })
        .unwrap();
        let what = format!("{style:?}, {n_rot} rotated");
        assert_same(&cuda, &gq, &wq, &format!("Q, {what}"));
        assert_same(&cuda, &gk, &wk, &format!("K, {what}"));
        // Attention reads what was stored: the same cache contents give the same output.
        assert_same(
            &cuda,
            &gout,
            &wout,
            &format!("attention over the cache, {what}"),
        );
    }
}

#[test]
fn top_k_on_the_device_ranks_as_the_host_does() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(24);
    let width = 50_000;
    let mut values: Vec<f32> = rng.values(3 * width, 1.0);
    // Ties (the lower id first), NaN (below every number), both zeros and infinities.
    values[10] = 5.0;
    values[20] = 5.0;
    values[7] = f32::NAN;
    values[width + 3] = f32::INFINITY;
    values[width + 4] = -0.0;
    values[width + 5] = 0.0;
    for v in &mut values[2 * width..] {
        *v = (*v * 4.0).round();
    }
    let logits = cuda.upload(3, width, values.clone()).unwrap();
    for k in [1, 2, 5, 40, 64, 100] {
        let got = cuda.top_k(&logits, k).unwrap();
        for (r, row) in values.chunks_exact(width).enumerate() {
            let want = plumb_model::top_k(row, k);
            let same = got[r].len() == want.len()
                && got[r]
                    .iter()
                    .zip(&want)
                    .all(|(a, b)| a.0 == b.0 && a.1.to_bits() == b.1.to_bits());
            assert!(
                same,
                "k = {k}, row {r}: {:?} != {:?}",
                &got[r][..3.min(k)],
                &want[..3.min(k)]
            );
        }
    }
    // More than the row holds, and a row that is all NaN.
    let nan = cuda.upload(1, 3, vec![f32::NAN; 3]).unwrap();
    let got = cuda.top_k(&nan, 5).unwrap();
    assert_eq!(got[0].iter().map(|p| p.0).collect::<Vec<_>>(), [0, 1, 2]);
}
