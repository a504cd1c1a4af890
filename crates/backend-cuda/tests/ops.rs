//! Each op of the CUDA backend against the f32 reference on random inputs, and bad arguments
//! rejected with an error naming the problem.

mod common;

use common::{assert_close, no_kv, run, tensors, weight, with_pass, REF};
use plumb_gguf::GgmlType;
use plumb_model::{Activation, Backend, Rope, RopeStyle};
use plumb_testutil::Rng;

/// f32 arithmetic in another order than the reference's f64.
const TOL: f32 = 1e-5;

#[test]
fn rms_norm_matches_over_rows_and_over_heads() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(1);
    let (x, xd) = tensors(&cuda, &mut rng, 5, 576);
    for group in [576, 64, 16] {
        let values: Vec<f32> = (0..group).map(|_| 1.0 + 0.5 * rng.uniform()).collect();
        let (w, wd) = weight(&cuda, "norm.weight", GgmlType::F32, &[group], &values);
        let want = REF.rms_norm(&x, &w, 1e-6).unwrap();
        let got = cuda.rms_norm(&xd, &wd, 1e-6).unwrap();
        assert_close(
            &cuda,
            &got,
            &want,
            TOL,
            &format!("rms_norm in groups of {group}"),
        );
    }
}

#[test]
fn elementwise_ops_match() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(2);
    let (a, ad) = tensors(&cuda, &mut rng, 7, 300);
    let (b, bd) = tensors(&cuda, &mut rng, 7, 300);
    assert_close(
        &cuda,
        &cuda.add(&ad, &bd).unwrap(),
        &REF.add(&a, &b).unwrap(),
        TOL,
        "add",
    );
    for act in [Activation::Silu, Activation::GeluTanh] {
        // Gates over a wider range than [-1, 1), where the nonlinearities bend.
        let gate: Vec<f32> = rng.values(7 * 300, 6.0);
        let g = plumb_backend_ref::HostTensor::new(7, 300, gate.clone());
        let gd = cuda.upload(7, 300, gate.clone()).unwrap();
        let want = REF.gated_activation(&g, &b, act).unwrap();
        let got = cuda.gated_activation(&gd, &bd, act).unwrap();
        assert_close(&cuda, &got, &want, TOL, &format!("{act:?}"));
    }
    let bias = rng.values(300, 1.0);
    let (w, wd) = weight(&cuda, "bias", GgmlType::F32, &[300], &bias);
    let want = REF.add_bias(a.clone(), &w).unwrap();
    let got = cuda
        .add_bias(cuda.upload(7, 300, a.data().to_vec()).unwrap(), &wd)
        .unwrap();
    assert_close(&cuda, &got, &want, TOL, "add_bias");
    let want = REF.scale(a.clone(), 0.125).unwrap();
    let got = cuda.scale(ad, 0.125).unwrap();
    assert_close(&cuda, &got, &want, TOL, "scale");
}

#[test]
fn output_rows_picks_rows_in_order() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(3);
    let (x, xd) = tensors(&cuda, &mut rng, 9, 70);
    let places = run(0, 0, 9);
    let tokens = [0; 9];
    for rows in [vec![8], vec![3, 0, 3, 7], (0..9).collect(), vec![]] {
        let want = with_pass(
            &REF,
            &mut no_kv(&REF, 9),
            &tokens,
            &places,
            &rows,
            |pass, _| REF.output_rows(&x, pass),
        )
        .unwrap();
        let got = with_pass(
            &cuda,
            &mut no_kv(&cuda, 9),
            &tokens,
            &places,
            &rows,
            |pass, _| cuda.output_rows(&xd, pass),
        )
        .unwrap();
        assert_close(&cuda, &got, &want, 0.0, &format!("rows {rows:?}"));
    }
}

#[test]
fn rope_matches_in_both_pairings_with_scaling_and_freq_factors() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(4);
    let head_dim = 32;
    // Far positions too, where f32 angles would lose precision.
    let n = 33_000;
    let places = run(0, 0, n);
    let tokens = vec![0; n];
    for style in [RopeStyle::Normal, RopeStyle::Neox] {
        for (n_rot, freq_scale, factors) in [
            (32, 1.0, None),
            (16, 0.25, None),
            (
                32,
                1.0,
                Some((0..16).map(|i| 1.0 + i as f32 * 0.5).collect::<Vec<_>>()),
            ),
        ] {
            let rope = Rope {
                style,
                n_rot,
                freq_base: 500_000.0,
                freq_scale,
                freq_factors: factors.map(Into::into),
                yarn: None,
                attn_factor: 1.0,
            };
            let (x, xd) = tensors(&cuda, &mut rng, n, 3 * head_dim);
            let want = with_pass(
                &REF,
                &mut no_kv(&REF, n),
                &tokens,
                &places,
                &[],
                |pass, _| REF.rope(x, head_dim, &rope, pass),
            )
            .unwrap();
            let got = with_pass(
                &cuda,
                &mut no_kv(&cuda, n),
                &tokens,
                &places,
                &[],
                |pass, _| cuda.rope(xd, head_dim, &rope, pass),
            )
            .unwrap();
            assert_close(
                &cuda,
                &got,
                &want,
                TOL,
                &format!("{style:?}, {n_rot} rotated, scale {freq_scale}"),
            );
        }
    }
}

#[test]
fn embed_looks_up_rows_of_f32_and_f16_tables() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(5);
    let (n_embd, n_vocab) = (96, 40);
    let values = rng.values(n_embd * n_vocab, 1.0);
    let tokens = [0, 39, 5, 5, 17];
    let places = run(0, 0, tokens.len());
    for ty in [GgmlType::F32, GgmlType::F16] {
        let (w, wd) = weight(&cuda, "token_embd.weight", ty, &[n_embd, n_vocab], &values);
        let want = with_pass(
            &REF,
            &mut no_kv(&REF, 5),
            &tokens,
            &places,
            &[],
            |pass, _| REF.embed(&w, pass),
        )
        .unwrap();
        let got = with_pass(
            &cuda,
            &mut no_kv(&cuda, 5),
            &tokens,
            &places,
            &[],
            |pass, _| cuda.embed(&wd, pass),
        )
        .unwrap();
        assert_close(&cuda, &got, &want, 0.0, &format!("embed from {ty}"));
    }
}

#[test]
fn bad_arguments_are_errors_naming_the_problem() {
    let cuda = require_cuda!();
    let mut rng = Rng::new(6);
    let (_, xd) = tensors(&cuda, &mut rng, 3, 64);
    let (_, yd) = tensors(&cuda, &mut rng, 3, 32);
    let message = |r: plumb_model::Result<plumb_backend_cuda::CudaTensor>| match r {
        Ok(_) => panic!("accepted"),
        Err(e) => e.to_string(),
    };
    assert!(message(cuda.add(&xd, &yd)).contains("shapes differ"));
    let places = run(0, 0, 3);
    let rows = message(with_pass(
        &cuda,
        &mut no_kv(&cuda, 3),
        &[0; 3],
        &places,
        &[3],
        |pass, _| cuda.output_rows(&xd, pass),
    ));
    assert!(rows.contains("row 3 of 3"), "{rows}");
    let (_, table) = weight(
        &cuda,
        "token_embd.weight",
        GgmlType::F32,
        &[64, 10],
        &rng.values(640, 1.0),
    );
    let embed = message(with_pass(
        &cuda,
        &mut no_kv(&cuda, 1),
        &[10],
        &places[..1],
        &[],
        |pass, _| cuda.embed(&table, pass),
    ));
    assert!(embed.contains("token 10"), "{embed}");
    let (_, norm) = weight(
        &cuda,
        "norm.weight",
        GgmlType::F32,
        &[48],
        &rng.values(48, 1.0),
    );
    assert!(message(cuda.rms_norm(&xd, &norm, 1e-6)).contains("groups of 48"));
    assert!(message(cuda.matmul(&xd, &norm)).contains("not a matrix"));
    let rope = Rope {
        style: RopeStyle::Neox,
        n_rot: 16,
        freq_base: 10_000.0,
        freq_scale: 1.0,
        freq_factors: None,
        yarn: None,
        attn_factor: 1.0,
    };
    let positions = message(with_pass(
        &cuda,
        &mut no_kv(&cuda, 2),
        &[0; 2],
        &places[..2],
        &[],
        |pass, _| cuda.rope(xd, 16, &rope, pass),
    ));
    assert!(
        positions.contains("2 positions for 3 tokens"),
        "{positions}"
    );
}
