//! The CUDA backend's fused composites (add_rms_norm, gated_ffn, rope_store_kv) against the
//! primitives they replace, composed as the trait's default implementations compose them,
//! the 8-bit rows that the norms and the gated activation write against those the products
//! make themselves, and top_k on the device against the host's ranking.

mod common;

use common::{kv_cache, run, tensors, weight, with_pass};
use plumb_backend_cuda::{CudaBackend, CudaTensor, CudaWeight};
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

/// A gated FFN of the gate, up and down matrices, with the gate's and up's biases where given.
fn gated_ffn_weights<'w>(
    [gate, up, down]: [&'w CudaWeight; 3],
    biases: Option<(&'w CudaWeight, &'w CudaWeight)>,
    activation: Activation,
) -> GatedFfnWeights<'w, CudaWeight> {
    let p = |weight, bias| Projection { weight, bias };
    GatedFfnWeights {
        gate: p(gate, biases.map(|b| b.0)),
        up: p(up, biases.map(|b| b.1)),
        down: p(down, None),
        activation,
    }
}

/// The gated FFN's hidden rows from the primitives: the gate and up projections, then
/// `gated_activation`.
fn activation_from_primitives(
    cuda: &CudaBackend,
    x: &CudaTensor,
    ffn: &GatedFfnWeights<'_, CudaWeight>,
) -> CudaTensor {
    let g = cuda.project(x, ffn.gate).unwrap();
    let u = cuda.project(x, ffn.up).unwrap();
    cuda.gated_activation(&g, &u, ffn.activation).unwrap()
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
            let biases = with_bias.then_some((&gate_bias, &up_bias));
            let ffn = gated_ffn_weights([&gate, &up, &down], biases, activation);
            let got = cuda.gated_ffn(&x, &ffn).unwrap();
            let hidden = activation_from_primitives(&cuda, &x, &ffn);
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

/// Rows of k random values; row 0 holds an outlier of 4000 and row 1 one of -2500.
fn rows_with_outliers(rng: &mut Rng, n: usize, k: usize) -> Vec<f32> {
    let mut x = rng.values(n * k, 1.0);
    x[37] = 4000.0;
    if n > 1 {
        x[k + 300] = -2500.0;
    }
    x
}

/// The widths of the rows that the 8-bit tests quantize (576 ends in a part of a block of 256,
/// 11008 spreads over 43 blocks), each with a weight type that takes them.
const Q8_WIDTHS: [(usize, GgmlType); 3] = [
    (576, GgmlType::Q8_0),
    (4096, GgmlType::Q4_K),
    (11008, GgmlType::Q4_K),
];

/// The norms of a decode step write 8-bit rows as `quantize_q8` makes them: a product of a
/// norm's output (which takes the norm's 8-bit rows) equals, bit for bit, the product of the
/// same values uploaded afresh (which the product quantizes itself). Their f32 rows are those
/// of a backend that loaded no weight with 8-bit kernels, whose norms write no 8-bit rows: the
/// normalized rows but for the rounding of the squares' sum (taken in another order), the sums
/// of add_rms_norm bit for bit. Rows of many blocks each, two of them with outliers.
#[test]
fn norms_quantize_their_rows_as_the_products_do() {
    let plain = require_cuda!();
    let cuda = require_cuda!();
    let mut rng = Rng::new(24);
    for (k, ty) in Q8_WIDTHS {
        let values: Vec<f32> = (0..k).map(|_| 1.0 + 0.5 * rng.uniform()).collect();
        let (_, norm) = weight(&cuda, "norm.weight", GgmlType::F32, &[k], &values);
        let (_, plain_norm) = weight(&plain, "norm.weight", GgmlType::F32, &[k], &values);
        let (_, w) = weight(&cuda, "w", ty, &[k, 64], &rng.values(k * 64, 1.0));
        for n in [1, 3, 16] {
            let (x, b) = (rows_with_outliers(&mut rng, n, k), rng.values(n * k, 1.0));
            let on = |backend: &CudaBackend| {
                let x = backend.upload(n, k, x.clone()).unwrap();
                let b = backend.upload(n, k, b.clone()).unwrap();
                (x, b)
            };
            let ((x, b), (plain_x, plain_b)) = (on(&cuda), on(&plain));
            let normed = cuda.rms_norm(&x, &norm, 1e-6).unwrap();
            let (sum, added) = cuda.add_rms_norm(&x, &b, &norm, 1e-6).unwrap();
            let plain_normed = plain.rms_norm(&plain_x, &plain_norm, 1e-6).unwrap();
            let (plain_sum, plain_added) = plain
                .add_rms_norm(&plain_x, &plain_b, &plain_norm, 1e-6)
                .unwrap();
            for (what, t, plain_t, tol) in [
                ("rms_norm", &normed, &plain_normed, 1e-5),
                ("add_rms_norm", &added, &plain_added, 1e-5),
                ("add_rms_norm's sum", &sum, &plain_sum, 0.0),
            ] {
                let what = format!("{what}, {n} rows of {k}");
                let (got, want) = (cuda.to_host(t).unwrap(), plain.to_host(plain_t).unwrap());
                let diff = got
                    .iter()
                    .zip(&want)
                    .map(|(a, b)| (a - b).abs() / b.abs().max(1e-3))
                    .fold(0.0f32, f32::max);
                assert!(
                    diff <= tol,
                    "{what}: the f32 rows are {diff:e} off the norm's without 8-bit rows"
                );
                let afresh = cuda.upload(n, k, got).unwrap();
                let (got, want) = (
                    cuda.matmul(t, &w).unwrap(),
                    cuda.matmul(&afresh, &w).unwrap(),
                );
                assert_same(&cuda, &got, &want, &format!("product of {what}"));
            }
        }
    }
}

/// The gated activation of a decode step writes the 8-bit rows that the down projection takes
/// as `quantize_q8` makes them: gated_ffn equals, bit for bit, its projections and the
/// activation composed, whose down projection quantizes the activation's rows itself. With
/// the biases, every row holds outliers (about 10 · 4000 and 10 · -2500, listed by one warp
/// in one order, so that the products add them in the same order).
#[test]
fn gated_activation_quantizes_its_rows_as_the_down_product_does() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(25);
    let n_embd = 64;
    for (n_ff, ty) in Q8_WIDTHS {
        let matrix = |rng: &mut Rng, name: &str, ty, k: usize, m: usize| {
            weight(&cuda, name, ty, &[k, m], &rng.values(k * m, 1.0)).1
        };
        let gate = matrix(&mut rng, "gate", GgmlType::Q8_0, n_embd, n_ff);
        let up = matrix(&mut rng, "up", GgmlType::Q8_0, n_embd, n_ff);
        let down = matrix(&mut rng, "down", ty, n_ff, n_embd);
        let mut gate_bias = rng.values(n_ff, 1.0);
        let mut up_bias = rng.values(n_ff, 1.0);
        (gate_bias[37], gate_bias[300]) = (10.0, 10.0);
        (up_bias[37], up_bias[300]) = (4000.0, -2500.0);
        let (_, gate_bias) = weight(&cuda, "gate.bias", GgmlType::F32, &[n_ff], &gate_bias);
        let (_, up_bias) = weight(&cuda, "up.bias", GgmlType::F32, &[n_ff], &up_bias);
        for n in [1, 3, 16] {
            let (_, x) = tensors(&cuda, &mut rng, n, n_embd);
            for activation in [Activation::Silu, Activation::GeluTanh] {
                for with_bias in [false, true] {
                    let biases = with_bias.then_some((&gate_bias, &up_bias));
                    let ffn = gated_ffn_weights([&gate, &up, &down], biases, activation);
                    let got = cuda.gated_ffn(&x, &ffn).unwrap();
                    let hidden = activation_from_primitives(&cuda, &x, &ffn);
                    let afresh = cuda
                        .upload(n, n_ff, cuda.to_host(&hidden).unwrap())
                        .unwrap();
                    let want = cuda.project(&afresh, ffn.down).unwrap();
                    assert_same(
                        &cuda,
                        &got,
                        &want,
                        &format!("{n} rows of {n_ff}, {activation:?}, bias {with_bias}"),
                    );
                }
            }
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
