//! Every kernel against the scalar reference (`plumb-backend-ref`'s ops, ggml's
//! dequantization), on random inputs, through the Backend trait as the models call it. They
//! run on whatever adapter wgpu finds (lavapipe in CI) and skip loudly without one.

mod common;

use common::{as_multiplied, host, load, max_rel_diff, vector, weight, Batch};
use plumb_backend_ref::RefBackend;
use plumb_backend_wgpu::{WgpuBackend, SUPPORTED_TYPES};
use plumb_gguf::GgmlType;
use plumb_model::{
    Activation, AttentionStep, Backend, BlockCopy, GatedFfnWeights, KvConfig, KvLayout, LayerKv,
    Projection, Rope, RopeStyle, TokenPos, WeightUse, Yarn,
};
use plumb_testutil::Rng;

/// Bindings of at most 16 KiB: every test weight is split into chunks, of 8 rows (F32 rows
/// of 512) to 56 (Q4_0), and batches of more than 8 tokens of 512 into windows.
fn with_small_bindings(gpu: WgpuBackend) -> WgpuBackend {
    gpu.with_max_binding(16 * 1024)
}

/// A pass of sequence 0 at `positions` in a one-layer cache, all of whose blocks its table
/// holds: for the ops that only need the tokens, positions or output rows.
fn plain_batch(
    tokens: Vec<u32>,
    positions: &[usize],
    output_rows: Vec<usize>,
) -> (Batch, KvLayout) {
    let n_ctx = positions.iter().max().map_or(1, |&p| p + 1);
    let layout = KvLayout::new(
        &KvConfig::new(n_ctx, 1, tokens.len().max(1)),
        vec![LayerKv::new(1, 2, 2, None)],
    );
    let n_blocks = layout.groups[0].n_blocks as u32;
    let batch = Batch {
        places: positions
            .iter()
            .map(|&pos| TokenPos { seq: 0, pos })
            .collect(),
        tokens,
        output_rows,
        tables: vec![vec![(0..n_blocks).collect()]],
    };
    (batch, layout)
}

#[test]
fn embedding_rows_dequantize_as_ggml_does_for_every_type() {
    let gpu = with_small_bindings(require_gpu!());
    let (row_len, n_rows) = (512, 64);
    let tokens = vec![63, 0, 8, 8, 57, 1, 30];
    let (batch, layout) = plain_batch(tokens.clone(), &[0, 1, 2, 3, 4, 5, 6], vec![]);
    let inputs = batch.inputs(&layout);
    let pass = gpu.begin_pass(&inputs).unwrap();
    for ty in SUPPORTED_TYPES {
        let mut rng = Rng::new(ty as u64);
        let tensor = weight(ty, row_len, n_rows, &rng.values(row_len * n_rows, 2.0));
        let table = load(&gpu, &tensor, WeightUse::Embedding);
        let got = host(&gpu, &gpu.embed(&table, &pass).unwrap());
        for (t, &id) in tokens.iter().enumerate() {
            let mut expected = vec![0.0; row_len];
            plumb_ggml::dequantize_row(ty, tensor.row_bytes(id as usize), &mut expected).unwrap();
            let row = &got[t * row_len..(t + 1) * row_len];
            // Exact but for a fused multiply-add in the scale arithmetic.
            let err = max_rel_diff(row, &expected);
            assert!(err <= 1e-6, "{ty}: row {id} is off by {err} (relative)");
        }
    }
}

/// Products with subgroup operations where the device has them, and through workgroup
/// memory. The mat-vec kernels take their default rows per subgroup on the first and 3 rows
/// per workgroup on the second: chunks of 8 to 56 rows leave the last subgroup or workgroup
/// part empty on both.
fn both_matmul_paths(gpu: WgpuBackend) -> Vec<WgpuBackend> {
    both_reductions(gpu)
        .into_iter()
        .map(with_small_bindings)
        .collect()
}

/// The two paths of `both_matmul_paths`, with the adapter's bindings.
fn both_reductions(gpu: WgpuBackend) -> Vec<WgpuBackend> {
    let mut paths = vec![gpu];
    if paths[0].uses_subgroups() {
        let fallback = common::gpu("both_matmul_paths").expect("a second device");
        paths.push(fallback.without_subgroups().with_matvec_rows(3));
    } else {
        plumb_testutil::skip(
            "matmul_matches_the_reference_for_every_type_and_batch_size",
            "the device has no subgroup operations: only the workgroup-memory path is tested",
        );
    }
    paths
}

#[test]
fn matmul_matches_the_reference_for_every_type_and_batch_size() {
    let paths = both_matmul_paths(require_gpu!());
    let reference = RefBackend::new();
    let (k, m) = (512, 128);
    for (gpu, ty) in paths.iter().flat_map(|g| SUPPORTED_TYPES.map(|ty| (g, ty))) {
        let path = if gpu.uses_subgroups() {
            "subgroups"
        } else {
            "workgroup memory"
        };
        let mut rng = Rng::new(100 + ty as u64);
        let tensor = weight(ty, k, m, &rng.values(k * m, 0.1));
        let (w_gpu, w_ref) = (
            load(gpu, &tensor, WeightUse::Matrix),
            load(&reference, &tensor, WeightUse::Matrix),
        );
        // 1 to 4 (decoding: the mat-vec kernels), and batches across the tiled kernel's
        // 16-token tiles and the 8-token windows of the small bindings. The reference
        // multiplies the activations as the kernel does: quantized where it quantizes them.
        for n in [1, 2, 4, 9, 17] {
            let x = rng.values(n * k, 1.0);
            let got = gpu.matmul(&gpu.upload(n, k, x.clone()).unwrap(), &w_gpu);
            let x = as_multiplied(gpu, ty, n, &x);
            let expected = reference.matmul(&reference.upload(n, k, x).unwrap(), &w_ref);
            let (got, expected) = (
                host(gpu, &got.unwrap()),
                host(&reference, &expected.unwrap()),
            );
            let err = max_rel_diff(&got, &expected);
            assert!(
                err <= tolerance(gpu, ty, n),
                "{ty}, {n} tokens, {path}: off by {err}"
            );
        }
    }
}

/// Decoding products over rows long enough that every invocation of a mat-vec workgroup
/// takes several of a row's groups or units (48 super-blocks: a Q4_K row is 384 units for
/// 128 invocations), with 10 rows: the last workgroup of 4 rows is part empty. The adapter's
/// bindings: an F32 row is 48 KiB.
#[test]
fn matvec_over_long_rows_matches_the_reference() {
    let paths = both_reductions(require_gpu!());
    let reference = RefBackend::new();
    let (k, m) = (48 * 256, 10);
    for (gpu, ty) in paths.iter().flat_map(|g| SUPPORTED_TYPES.map(|ty| (g, ty))) {
        let mut rng = Rng::new(300 + ty as u64);
        let tensor = weight(ty, k, m, &rng.values(k * m, 0.1));
        let (w_gpu, w_ref) = (
            load(gpu, &tensor, WeightUse::Matrix),
            load(&reference, &tensor, WeightUse::Matrix),
        );
        for n in [1, 3] {
            let x = rng.values(n * k, 1.0);
            let got = gpu.matmul(&gpu.upload(n, k, x.clone()).unwrap(), &w_gpu);
            let x = as_multiplied(gpu, ty, n, &x);
            let expected = reference.matmul(&reference.upload(n, k, x).unwrap(), &w_ref);
            let err = max_rel_diff(
                &host(gpu, &got.unwrap()),
                &host(&reference, &expected.unwrap()),
            );
            let path = gpu.uses_subgroups();
            assert!(
                err <= tolerance(gpu, ty, n),
                "{ty}, {n} tokens, subgroups {path}: off by {err}"
            );
        }
    }
}

/// The gated FFN: when decoding, the gate and up projections are one dispatch where the
/// unit kernels take them (Q4_K), and otherwise the up projection's mat-vec applies the
/// activation as it writes (9 tokens take the primitives). The reference is the primitives
/// over the activations as each product multiplies them.
#[test]
fn gated_ffn_matches_the_reference_for_every_type() {
    let paths = both_matmul_paths(require_gpu!());
    let reference = RefBackend::new();
    let (k, m) = (512, 256);
    for (gpu, ty) in paths.iter().flat_map(|g| SUPPORTED_TYPES.map(|ty| (g, ty))) {
        let mut rng = Rng::new(200 + ty as u64);
        let tensors = [
            weight(ty, k, m, &rng.values(k * m, 0.1)),
            weight(ty, k, m, &rng.values(k * m, 0.1)),
            weight(ty, m, k, &rng.values(k * m, 0.1)),
        ];
        let [g_gate, g_up, g_down] = tensors.clone().map(|t| load(gpu, &t, WeightUse::Matrix));
        let [r_gate, r_up, r_down] = tensors.map(|t| load(&reference, &t, WeightUse::Matrix));
        for (n, activation) in [
            (1, Activation::Silu),
            (3, Activation::GeluTanh),
            (9, Activation::Silu),
        ] {
            let x = rng.values(n * k, 1.0);
            let got = gpu.gated_ffn(
                &gpu.upload(n, k, x.clone()).unwrap(),
                &GatedFfnWeights {
                    gate: plain(&g_gate),
                    up: plain(&g_up),
                    down: plain(&g_down),
                    activation,
                },
            );
            let x = reference
                .upload(n, k, as_multiplied(gpu, ty, n, &x))
                .unwrap();
            let hidden = reference
                .gated_activation(
                    &reference.matmul(&x, &r_gate).unwrap(),
                    &reference.matmul(&x, &r_up).unwrap(),
                    activation,
                )
                .unwrap();
            let hidden = as_multiplied(gpu, ty, n, &host(&reference, &hidden));
            let expected = reference.matmul(&reference.upload(n, m, hidden).unwrap(), &r_down);
            let err = max_rel_diff(
                &host(gpu, &got.unwrap()),
                &host(&reference, &expected.unwrap()),
            );
            let path = gpu.uses_subgroups();
            assert!(
                err <= tolerance(gpu, ty, n),
                "{ty}, {n} tokens, {activation:?}, subgroups {path}: off by {err}"
            );
        }
    }
}

/// How far a product of `n` tokens by weights of `ty` may be from the reference's over the
/// same activations. Where the activations are quantized, the reference quantizes them as the
/// kernel does (on lavapipe the two differ by 3e-7), but the kernel's 127 / amax is a GPU's
/// division, which Vulkan lets be off by 2.5 units in the last place, and a value it puts on
/// the other side of a rounding boundary moves an output by its step times a weight, a few
/// 1e-4 of the largest output here; not quantizing them at all moves the outputs by 4e-3.
/// Elsewhere the sums differ in their order alone.
fn tolerance(gpu: &WgpuBackend, ty: GgmlType, n: usize) -> f32 {
    if gpu.quantizes_activations(ty, n) {
        1e-3
    } else {
        1e-5
    }
}

/// Q, K and V: one dispatch for those of the unit kernels' type (all three, or Q and K with
/// a V of another type, or K and V), the others one each; narrower K and V (grouped-query
/// attention), biases, and with the small bindings several chunks per weight (at most one of
/// each weight per dispatch). Decoding and a batch of 9 (the primitives).
#[test]
fn qkv_matches_the_reference_grouped_or_not() {
    let paths = both_matmul_paths(require_gpu!());
    let reference = RefBackend::new();
    let k = 512;
    let widths = [256, 64, 64];
    let mixes = [
        [GgmlType::Q4_K; 3],
        [GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K],
        [GgmlType::Q6_K, GgmlType::Q4_K, GgmlType::Q4_K],
        [GgmlType::Q8_0; 3],
    ];
    for (gpu, types) in paths.iter().flat_map(|g| mixes.map(|t| (g, t))) {
        let mut rng = Rng::new(400 + types[2] as u64 + types[0] as u64);
        let tensors: Vec<_> = types
            .iter()
            .zip(widths)
            .map(|(&ty, m)| weight(ty, k, m, &rng.values(k * m, 0.1)))
            .collect();
        let biases: Vec<_> = widths
            .iter()
            .map(|&m| vector(&rng.values(m, 1.0)))
            .collect();
        let g_w: Vec<_> = tensors
            .iter()
            .map(|t| load(gpu, t, WeightUse::Matrix))
            .collect();
        let g_b: Vec<_> = biases
            .iter()
            .map(|t| load(gpu, t, WeightUse::Vector))
            .collect();
        let r_w: Vec<_> = tensors
            .iter()
            .map(|t| load(&reference, t, WeightUse::Matrix))
            .collect();
        let r_b: Vec<_> = biases
            .iter()
            .map(|t| load(&reference, t, WeightUse::Vector))
            .collect();
        for (n, with_bias) in [(1, false), (3, true), (9, false)] {
            let x = rng.values(n * k, 1.0);
            let projection = |i: usize| Projection {
                weight: &g_w[i],
                bias: with_bias.then_some(&g_b[i]),
            };
            let got = gpu
                .qkv(
                    &gpu.upload(n, k, x.clone()).unwrap(),
                    projection(0),
                    projection(1),
                    projection(2),
                )
                .unwrap();
            for (i, got) in got.iter().enumerate() {
                let x = as_multiplied(gpu, types[i], n, &x);
                let expected = reference
                    .project(
                        &reference.upload(n, k, x).unwrap(),
                        Projection {
                            weight: &r_w[i],
                            bias: with_bias.then_some(&r_b[i]),
                        },
                    )
                    .unwrap();
                let err = max_rel_diff(&host(gpu, got), &host(&reference, &expected));
                let path = gpu.uses_subgroups();
                assert!(
                    err <= tolerance(gpu, types[i], n),
                    "{types:?} projection {i}, {n} tokens, subgroups {path}: off by {err}"
                );
            }
        }
    }
}

/// A projection without a bias.
fn plain<W>(weight: &W) -> Projection<'_, W> {
    Projection { weight, bias: None }
}

#[test]
fn add_rms_norm_matches_the_reference_per_row_and_per_head() {
    let gpu = require_gpu!();
    let reference = RefBackend::new();
    let mut rng = Rng::new(29);
    let (n, width) = (3, 320);
    let (a, b) = (rng.values(n * width, 1.0), rng.values(n * width, 30.0));
    for group in [width, 64, 10] {
        let w = vector(&rng.values(group, 2.0));
        let (sum, normed) = gpu
            .add_rms_norm(
                &gpu.upload(n, width, a.clone()).unwrap(),
                &gpu.upload(n, width, b.clone()).unwrap(),
                &load(&gpu, &w, WeightUse::Vector),
                1e-5,
            )
            .unwrap();
        let (ref_sum, ref_normed) = reference
            .add_rms_norm(
                &reference.upload(n, width, a.clone()).unwrap(),
                &reference.upload(n, width, b.clone()).unwrap(),
                &load(&reference, &w, WeightUse::Vector),
                1e-5,
            )
            .unwrap();
        assert_eq!(
            host(&gpu, &sum),
            host(&reference, &ref_sum),
            "sum, groups of {group}"
        );
        assert_close(
            &format!("normed, groups of {group}"),
            &host(&gpu, &normed),
            &host(&reference, &ref_normed),
        );
    }
}

#[test]
fn rms_norm_matches_the_reference_per_row_and_per_head() {
    let gpu = require_gpu!();
    let reference = RefBackend::new();
    let mut rng = Rng::new(7);
    let (n, width) = (5, 96);
    // Rows of small and of large values.
    let mut x = rng.values(n * width, 1.0);
    x[width..2 * width].iter_mut().for_each(|v| *v *= 1000.0);
    // Groups of whole vec4s, read four values at a time, and groups of 6, one at a time.
    for group in [width, 32, 6] {
        let w = vector(&rng.values(group, 2.0));
        let got = gpu.rms_norm(
            &gpu.upload(n, width, x.clone()).unwrap(),
            &load(&gpu, &w, WeightUse::Vector),
            1e-6,
        );
        let expected = reference.rms_norm(
            &reference.upload(n, width, x.clone()).unwrap(),
            &load(&reference, &w, WeightUse::Vector),
            1e-6,
        );
        let (got, expected) = (
            host(&gpu, &got.unwrap()),
            host(&reference, &expected.unwrap()),
        );
        for (a, b) in got.iter().zip(&expected) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{a} vs {b}");
        }
    }
}

/// Elementwise results, each within 1e-5 of the reference's (relative where large).
fn assert_close(what: &str, got: &[f32], expected: &[f32]) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (i, (a, b)) in got.iter().zip(expected).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 * b.abs().max(1.0),
            "{what}: value {i} is {a}, not {b}"
        );
    }
}

#[test]
fn elementwise_ops_match_the_reference() {
    let gpu = require_gpu!();
    let reference = RefBackend::new();
    let mut rng = Rng::new(11);
    let (n, width) = (3, 200);
    let a = rng.values(n * width, 4.0);
    // Gates out to ±60, where exp overflows in f32 and GELU's tanh must saturate.
    let b = rng.values(n * width, 60.0);
    let bias = vector(&rng.values(width, 1.0));
    let g = |v: &[f32]| gpu.upload(n, width, v.to_vec()).unwrap();
    let r = |v: &[f32]| reference.upload(n, width, v.to_vec()).unwrap();

    let got = host(&gpu, &gpu.add(&g(&a), &g(&b)).unwrap());
    let expected = host(&reference, &reference.add(&r(&a), &r(&b)).unwrap());
    assert_close("add", &got, &expected);

    let got = gpu.add_bias(g(&a), &load(&gpu, &bias, WeightUse::Vector));
    let expected = reference.add_bias(r(&a), &load(&reference, &bias, WeightUse::Vector));
    assert_close(
        "add_bias",
        &host(&gpu, &got.unwrap()),
        &host(&reference, &expected.unwrap()),
    );

    let got = host(&gpu, &gpu.scale(g(&a), -0.37).unwrap());
    let expected = host(&reference, &reference.scale(r(&a), -0.37).unwrap());
    assert_close("scale", &got, &expected);

    for act in [Activation::Silu, Activation::GeluTanh] {
        let got = gpu.gated_activation(&g(&b), &g(&a), act).unwrap();
        let expected = reference.gated_activation(&r(&b), &r(&a), act).unwrap();
        assert_close(
            &format!("{act:?}"),
            &host(&gpu, &got),
            &host(&reference, &expected),
        );
    }
}

#[test]
fn output_rows_are_the_rows_asked_for_in_order() {
    let gpu = require_gpu!();
    let (n, width) = (5, 12);
    let x: Vec<f32> = (0..n * width).map(|i| i as f32).collect();
    let (batch, layout) = plain_batch(vec![0; n], &[0, 1, 2, 3, 4], vec![4, 0, 4, 2]);
    let inputs = batch.inputs(&layout);
    let pass = gpu.begin_pass(&inputs).unwrap();
    let got = host(
        &gpu,
        &gpu.output_rows(&gpu.upload(n, width, x.clone()).unwrap(), &pass)
            .unwrap(),
    );
    let expected: Vec<f32> = [4, 0, 4, 2]
        .iter()
        .flat_map(|&r| x[r * width..(r + 1) * width].to_vec())
        .collect();
    assert_eq!(got, expected);
}

#[test]
fn rope_matches_the_reference_in_both_pairings_with_yarn_and_attn_factor() {
    let gpu = require_gpu!();
    let reference = RefBackend::new();
    let mut rng = Rng::new(13);
    let (n, head_dim, n_heads) = (6, 64, 3);
    let width = head_dim * n_heads;
    // Far positions, in any order: the angles are the host's, per token.
    let (batch, layout) = plain_batch(vec![0; n], &[0, 1, 17, 4095, 8000, 300], vec![]);
    let inputs = batch.inputs(&layout);
    let pass = gpu.begin_pass(&inputs).unwrap();
    for style in [RopeStyle::Normal, RopeStyle::Neox] {
        let cases = [
            (64, None, None, 1.0),
            (32, Some(rng.values(16, 1.0)), None, 1.0),
            // YaRN blends scaled and unscaled angles per pair and scales the rotation.
            (64, None, Some(Yarn::new(64, 64, 10000.0)), 0.8),
        ];
        for (n_rot, factors, yarn, attn_factor) in cases {
            let rope = Rope {
                style,
                n_rot,
                freq_base: 10000.0,
                freq_scale: 0.5,
                freq_factors: factors.map(|f| f.iter().map(|v| 1.5 + v).collect()),
                yarn,
                attn_factor,
            };
            let x = rng.values(n * width, 3.0);
            let got = gpu.rope(
                gpu.upload(n, width, x.clone()).unwrap(),
                head_dim,
                &rope,
                &pass,
            );
            let expected = reference.rope(
                reference.upload(n, width, x).unwrap(),
                head_dim,
                &rope,
                &&inputs,
            );
            assert_close(
                &format!("{style:?}, {n_rot} rotated, {yarn:?}, attn_factor {attn_factor}"),
                &host(&gpu, &got.unwrap()),
                &host(&reference, &expected.unwrap()),
            );
        }
    }
}

/// RoPE on Q and K and the store of K and V in one kernel: Q and K as the reference rotates
/// them, and a cache that attention reads as it reads the one the primitives fill.
#[test]
fn rope_store_kv_matches_rope_then_store_in_both_pairings() {
    let gpu = require_gpu!();
    let reference = RefBackend::new();
    let mut rng = Rng::new(31);
    let (n_head, n_head_kv, head_dim) = (6, 2, 64);
    let (q_width, kv_width) = (n_head * head_dim, n_head_kv * head_dim);
    let layout = KvLayout::new(
        &KvConfig::new(16, 1, 16).with_block_size(4),
        vec![LayerKv::new(n_head_kv, head_dim, head_dim, None)],
    );
    let batch = Batch {
        tokens: vec![0; 5],
        places: places(&[5], &[3]),
        output_rows: vec![],
        tables: vec![vec![vec![3, 0, 2, 1]]],
    };
    let inputs = batch.inputs(&layout);
    let pass = gpu.begin_pass(&inputs).unwrap();
    let n = batch.tokens.len();
    for (style, n_rot) in [
        (RopeStyle::Normal, 64),
        (RopeStyle::Neox, 64),
        (RopeStyle::Normal, 32),
        (RopeStyle::Neox, 32),
    ] {
        let rope = Rope {
            style,
            n_rot,
            freq_base: 10000.0,
            freq_scale: 1.0,
            freq_factors: None,
            yarn: None,
            attn_factor: 1.0,
        };
        let what = format!("{style:?}, {n_rot} rotated");
        let (q, k, v) = (
            rng.values(n * q_width, 2.0),
            rng.values(n * kv_width, 2.0),
            rng.values(n * kv_width, 2.0),
        );
        let mut fused_kv = gpu.new_kv_storage(&layout).unwrap();
        let (fused_q, fused_k) = gpu
            .rope_store_kv(
                gpu.upload(n, q_width, q.clone()).unwrap(),
                gpu.upload(n, kv_width, k.clone()).unwrap(),
                &gpu.upload(n, kv_width, v.clone()).unwrap(),
                &mut fused_kv,
                0,
                head_dim,
                &rope,
                &pass,
            )
            .unwrap();
        let mut ref_kv = reference.new_kv_storage(&layout).unwrap();
        let (ref_q, ref_k) = reference
            .rope_store_kv(
                reference.upload(n, q_width, q).unwrap(),
                reference.upload(n, kv_width, k.clone()).unwrap(),
                &reference.upload(n, kv_width, v.clone()).unwrap(),
                &mut ref_kv,
                0,
                head_dim,
                &rope,
                &&inputs,
            )
            .unwrap();
        assert_close(
            &format!("Q, {what}"),
            &host(&gpu, &fused_q),
            &host(&reference, &ref_q),
        );
        assert_close(
            &format!("K, {what}"),
            &host(&gpu, &fused_k),
            &host(&reference, &ref_k),
        );

        let mut plain_kv = gpu.new_kv_storage(&layout).unwrap();
        let plain_k = gpu
            .rope(gpu.upload(n, kv_width, k).unwrap(), head_dim, &rope, &pass)
            .unwrap();
        let plain_v = gpu.upload(n, kv_width, v).unwrap();
        gpu.store_kv(&plain_k, &plain_v, &mut plain_kv, 0, &pass)
            .unwrap();
        let step = AttentionStep {
            layer: 0,
            n_head,
            scale: 0.125,
            softcap: None,
        };
        let queries = gpu
            .upload(n, q_width, rng.values(n * q_width, 2.0))
            .unwrap();
        let fused = host(
            &gpu,
            &gpu.attention(&queries, &fused_kv, &step, &pass).unwrap(),
        );
        let plain = host(
            &gpu,
            &gpu.attention(&queries, &plain_kv, &step, &pass).unwrap(),
        );
        assert_close(&format!("attention, {what}"), &fused, &plain);
    }
}

/// K and V values rounded to f16 first, so that the f16 cache and the reference's f32 cache
/// hold the same numbers and attention is compared alone.
fn f16_values(rng: &mut Rng, n: usize, scale: f32) -> Vec<f32> {
    rng.values(n, scale)
        .into_iter()
        .map(|v| half::f16::from_f32(v).to_f32())
        .collect()
}

/// Stores K and V for `batch` in every layer of both caches, then attends with random
/// queries, and compares.
#[allow(clippy::too_many_arguments)]
fn store_and_attend(
    gpu: &WgpuBackend,
    gpu_kv: &mut <WgpuBackend as Backend>::KvStorage,
    reference: &RefBackend,
    ref_kv: &mut <RefBackend as Backend>::KvStorage,
    layout: &KvLayout,
    batch: &Batch,
    n_head: usize,
    rng: &mut Rng,
) {
    let inputs = batch.inputs(layout);
    let pass = gpu.begin_pass(&inputs).unwrap();
    let n = batch.tokens.len();
    for (il, layer) in layout.layers.iter().enumerate() {
        let k = f16_values(rng, n * layer.k_width(), 2.0);
        let v = f16_values(rng, n * layer.v_width(), 2.0);
        let q = rng.values(n * n_head * layer.head_dim_k, 2.0);
        gpu.store_kv(
            &gpu.upload(n, layer.k_width(), k.clone()).unwrap(),
            &gpu.upload(n, layer.v_width(), v.clone()).unwrap(),
            gpu_kv,
            il,
            &pass,
        )
        .unwrap();
        reference
            .store_kv(
                &reference.upload(n, layer.k_width(), k).unwrap(),
                &reference.upload(n, layer.v_width(), v).unwrap(),
                ref_kv,
                il,
                &&inputs,
            )
            .unwrap();
        let step = AttentionStep {
            layer: il,
            n_head,
            scale: 1.0 / (layer.head_dim_k as f32).sqrt(),
            softcap: None,
        };
        let q_width = n_head * layer.head_dim_k;
        let got = gpu.attention(
            &gpu.upload(n, q_width, q.clone()).unwrap(),
            gpu_kv,
            &step,
            &pass,
        );
        let expected = reference.attention(
            &reference.upload(n, q_width, q).unwrap(),
            ref_kv,
            &step,
            &&inputs,
        );
        let (got, expected) = (
            host(gpu, &got.unwrap()),
            host(reference, &expected.unwrap()),
        );
        let err = max_rel_diff(&got, &expected);
        assert!(
            err <= 1e-5,
            "layer {il} (window {:?}), {n_head} heads of {}: off by {err}",
            layer.window,
            layer.head_dim_k
        );
    }
}

/// Places for sequences of the given lengths, continuing from `starts`, one run each.
fn places(lengths: &[usize], starts: &[usize]) -> Vec<TokenPos> {
    lengths
        .iter()
        .zip(starts)
        .enumerate()
        .flat_map(|(seq, (&len, &start))| {
            (start..start + len).map(move |pos| TokenPos { seq, pos })
        })
        .collect()
}

#[test]
fn attention_over_the_paged_cache_matches_the_reference() {
    let gpu = require_gpu!();
    let reference = RefBackend::new();
    // (query heads, KV heads, head width): smollm2's grouping, gemma3's one wide KV head.
    for (n_head, n_head_kv, head_dim) in [(6, 2, 64), (4, 1, 256)] {
        let mut rng = Rng::new(17 + head_dim as u64);
        // A global layer and a layer with a window of 5, in blocks of 4: three sequences.
        // Sequence 0 runs to 150 positions, so that the kernel's workgroup walks them in three
        // tiles of 64 (the running maximum and sum rescaled between tiles), as a long prompt
        // does: the golden tests' prompts on a CPU adapter stop at 37.
        let config = KvConfig::new(160, 3, 170).with_block_size(4);
        let layout = KvLayout::new(
            &config,
            vec![
                LayerKv::new(n_head_kv, head_dim, head_dim, None),
                LayerKv::new(n_head_kv, head_dim, head_dim, Some(5)),
            ],
        );
        // Each group's blocks, shuffled among the sequences.
        let tables: Vec<Vec<Vec<u32>>> = layout
            .groups
            .iter()
            .map(|g| {
                let mut ids: Vec<u32> = (0..g.n_blocks as u32).collect();
                for i in (1..ids.len()).rev() {
                    ids.swap(i, rng.below(i + 1));
                }
                ids.chunks(g.n_blocks / 3)
                    .take(3)
                    .map(<[u32]>::to_vec)
                    .collect()
            })
            .collect();
        let mut gpu_kv = gpu.new_kv_storage(&layout).unwrap();
        let mut ref_kv = reference.new_kv_storage(&layout).unwrap();

        // A prompt pass of three sequences, then one decoding step of each.
        let lengths = [150, 6, 9];
        let prompt = Batch {
            tokens: vec![0; 165],
            places: places(&lengths, &[0, 0, 0]),
            output_rows: vec![],
            tables: tables.clone(),
        };
        store_and_attend(
            &gpu,
            &mut gpu_kv,
            &reference,
            &mut ref_kv,
            &layout,
            &prompt,
            n_head,
            &mut rng,
        );

        // Sequence 0's second block (positions 4..8) copied to sequence 2's last block, which
        // then stands in for it in sequence 0's table: attention must read the copy.
        let mut tables = tables;
        let copies: Vec<BlockCopy> = (0..layout.groups.len())
            .map(|g| {
                let (src, dst) = (tables[g][0][1], *tables[g][2].last().unwrap());
                tables[g][0][1] = dst;
                BlockCopy {
                    group: g,
                    src: src as usize * 4,
                    dst: dst as usize * 4,
                    len: 4,
                }
            })
            .collect();
        gpu.copy_kv_blocks(&mut gpu_kv, &copies).unwrap();
        reference.copy_kv_blocks(&mut ref_kv, &copies).unwrap();

        let decode = Batch {
            tokens: vec![0; 2],
            places: places(&[1, 1], &lengths[..2]),
            output_rows: vec![],
            tables,
        };
        store_and_attend(
            &gpu,
            &mut gpu_kv,
            &reference,
            &mut ref_kv,
            &layout,
            &decode,
            n_head,
            &mut rng,
        );
    }
}

#[test]
fn top_k_matches_the_host_selection_with_ties_and_nan() {
    // 20 rows of 4 KiB in windows of 4.
    let gpu = with_small_bindings(require_gpu!());
    let mut rng = Rng::new(19);
    let (n, width) = (20, 1024);
    // Quarter steps: many ties, which go to the lower id.
    let mut logits: Vec<f32> = rng
        .values(n * width, 8.0)
        .iter()
        .map(|v| (v * 4.0).round() / 4.0)
        .collect();
    logits[width + 10] = f32::NAN;
    logits[width + 11] = f32::NEG_INFINITY;
    logits[2 * width + 999] = 100.0;
    let x = gpu.upload(n, width, logits.clone()).unwrap();
    for k in [1, 7, 1003] {
        let got = gpu.top_k(&x, k).unwrap();
        for (row, got) in got.iter().enumerate() {
            let expected = plumb_model::top_k(&logits[row * width..(row + 1) * width], k);
            assert_eq!(got.len(), expected.len(), "row {row}, k {k}");
            for (j, (a, b)) in got.iter().zip(&expected).enumerate() {
                assert!(
                    a.0 == b.0 && a.1.to_bits() == b.1.to_bits(),
                    "row {row}, k {k}: choice {j} is {a:?}, not {b:?}"
                );
            }
        }
    }
}

#[test]
fn unreadable_weights_are_refused_by_name() {
    let gpu = require_gpu!();
    let mut rng = Rng::new(23);
    let q2 = weight(GgmlType::Q2_K, 256, 2, &rng.values(512, 1.0));
    let err = gpu
        .load_weight(q2, WeightUse::Matrix)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("\"w\"") && err.contains("Q2_K"), "{err}");

    let gpu = gpu.with_max_binding(1000);
    let wide = weight(GgmlType::F32, 512, 2, &rng.values(1024, 1.0));
    let err = gpu
        .load_weight(wide, WeightUse::Matrix)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("2048 bytes, more than a binding"), "{err}");
}
