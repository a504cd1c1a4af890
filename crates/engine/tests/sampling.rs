//! The sampler chain: property tests on each sampler, determinism, normalization, refusal of
//! broken logits, the chain order, and sampled frequencies against the softmax.

use plumb_engine::sampling::{
    min_p, parse_sampler_letters, parse_samplers, temperature, top_k, top_n_sigma, top_p, typical,
    Candidates, Sampler, SamplerKind, SamplingConfig, SamplingError,
};
use proptest::prelude::*;

fn logits_strategy() -> impl Strategy<Value = Vec<f32>> {
    prop::collection::vec(-20.0f32..20.0, 1..200)
}

fn ids(c: &Candidates) -> Vec<u32> {
    c.as_slice().iter().map(|c| c.id).collect()
}

fn softmax(logits: &[f32]) -> Vec<f64> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let exps: Vec<f64> = logits.iter().map(|&l| (l as f64 - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| e / sum).collect()
}

/// A chain with every filter off: the draw follows the softmax of `logits / temp`.
fn plain(temp: f32, seed: u32) -> SamplingConfig {
    SamplingConfig {
        temperature: temp,
        top_k: 0,
        top_p: 1.0,
        min_p: 0.0,
        seed,
        ..SamplingConfig::default()
    }
}

proptest! {
    #[test]
    fn fill_top_is_fill_then_top_k(
        // Few distinct values, so that ties between ids are common.
        logits in prop::collection::vec((-4i8..4).prop_map(f32::from), 1..200),
        k in 0usize..250,
    ) {
        let mut slow = Candidates::from_logits(&logits).unwrap();
        if k > 0 {
            top_k(&mut slow, k);
        }
        let mut fast = Candidates::default();
        fast.fill_top(&logits, k).unwrap();
        if k == 0 {
            prop_assert!(fast.is_empty());
        } else {
            prop_assert_eq!(fast.as_slice(), slow.as_slice());
            prop_assert!(fast.is_sorted());
        }
    }

    /// Sampling from the top logits a backend found (`Model::forward_top_k`) draws what
    /// sampling the whole row draws, token for token, for any chain that asks only for them.
    #[test]
    fn sample_top_draws_what_sample_draws(
        logits in prop::collection::vec((-6i8..6).prop_map(f32::from), 2..200),
        k in 1usize..60,
        temp in 0.0f32..2.0,
        seed in 0u32..1000,
    ) {
        let config = SamplingConfig { top_k: k, temperature: temp, seed, ..SamplingConfig::default() };
        let (mut whole, mut top) = (
            Sampler::new(config.clone(), logits.len()).unwrap(),
            Sampler::new(config, logits.len()).unwrap(),
        );
        let needed = top.needs_only_top();
        if k < logits.len() {
            prop_assert_eq!(needed, Some(k));
        }
        let Some(needed) = needed else { return Ok(()) };
        for _ in 0..4 {
            let best = plumb_model::top_k(&logits, needed + 3);
            prop_assert_eq!(whole.sample(&logits).unwrap(), top.sample_top(&best).unwrap());
        }
        prop_assert!(top.sample_top(&plumb_model::top_k(&logits, needed - 1)).is_err());
    }

    #[test]
    fn top_k_keeps_exactly_the_k_largest(logits in logits_strategy(), k in 1usize..300) {
        let mut c = Candidates::from_logits(&logits).unwrap();
        top_k(&mut c, k);
        prop_assert_eq!(c.len(), k.min(logits.len()));
        let kept = c.as_slice();
        prop_assert!(c.is_sorted());
        prop_assert!(kept.windows(2).all(|w| w[0].logit >= w[1].logit), "not sorted");
        let smallest_kept = kept.last().unwrap().logit;
        let dropped = (0..logits.len() as u32).filter(|id| !kept.iter().any(|c| c.id == *id));
        for id in dropped {
            prop_assert!(logits[id as usize] <= smallest_kept);
        }
    }

    #[test]
    fn min_p_drops_exactly_the_tokens_below_p_times_the_max(
        logits in logits_strategy(),
        p in 0.001f32..1.0,
    ) {
        let mut c = Candidates::from_logits(&logits).unwrap();
        min_p(&mut c, p);
        let probs = softmax(&logits);
        let p_max = probs.iter().copied().fold(0.0, f64::max);
        let kept = ids(&c);
        for (id, &prob) in probs.iter().enumerate() {
            let ratio = prob / (p as f64 * p_max);
            // Away from the border, where f32 and f64 rounding cannot disagree.
            if ratio > 1.0 + 1e-4 {
                prop_assert!(kept.contains(&(id as u32)), "token {} (p {}) dropped", id, prob);
            } else if ratio < 1.0 - 1e-4 {
                prop_assert!(!kept.contains(&(id as u32)), "token {} (p {}) kept", id, prob);
            }
        }
        // Order is kept.
        prop_assert!(kept.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn top_p_keeps_the_shortest_prefix_reaching_p(
        logits in logits_strategy(),
        p in 0.0f32..0.999,
    ) {
        let mut c = Candidates::from_logits(&logits).unwrap();
        top_p(&mut c, p);
        let probs = softmax(&logits);
        let kept: Vec<f64> = ids(&c).iter().map(|&id| probs[id as usize]).collect();
        let total: f64 = kept.iter().sum();
        let without_last = total - kept.last().unwrap();
        prop_assert!(total >= p as f64 - 1e-5, "kept mass {} < {}", total, p);
        prop_assert!(without_last < p as f64 + 1e-5, "not the shortest prefix");
        prop_assert!(kept.windows(2).all(|w| w[0] >= w[1]));
    }

    #[test]
    fn a_fixed_seed_gives_the_same_tokens(
        logits in prop::collection::vec(-5.0f32..5.0, 2..100),
        seed in any::<u32>(),
    ) {
        let config = SamplingConfig { seed, ..SamplingConfig::default() };
        let mut a = Sampler::new(config.clone(), logits.len()).unwrap();
        let mut b = Sampler::new(config, logits.len()).unwrap();
        for _ in 0..20 {
            let (x, y) = (a.sample(&logits).unwrap(), b.sample(&logits).unwrap());
            prop_assert_eq!(x, y);
            a.accept(x);
            b.accept(y);
        }
    }

    #[test]
    fn probabilities_stay_normalized(
        logits in logits_strategy(),
        temp in 0.1f32..3.0,
        k in 0usize..50,
        p in 0.5f32..1.0,
        min in 0.0f32..0.3,
        typical_p in 0.5f32..1.0,
        seed in any::<u32>(),
    ) {
        let config = SamplingConfig {
            temperature: temp,
            top_k: k,
            top_p: p,
            min_p: min,
            typical_p,
            repeat_penalty: 1.3,
            seed,
            ..SamplingConfig::default()
        };
        let mut sampler = Sampler::new(config, logits.len()).unwrap();
        sampler.start(&[0, 1, 1]);
        let token = sampler.sample(&logits).unwrap();
        let last = sampler.last_candidates();
        let sum: f64 = last.as_slice().iter().map(|c| c.p as f64).sum();
        prop_assert!((sum - 1.0).abs() < 1e-4, "probabilities sum to {}", sum);
        prop_assert!(last.as_slice().iter().any(|c| c.id == token && c.p > 0.0));
    }

    #[test]
    fn a_nan_or_infinite_logit_is_an_error_naming_the_token(
        mut logits in logits_strategy(),
        at in any::<prop::sample::Index>(),
        which in 0usize..3,
    ) {
        let bad = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][which];
        let token = at.index(logits.len());
        logits[token] = bad;
        let mut sampler = Sampler::new(SamplingConfig::default(), logits.len()).unwrap();
        let err = sampler.sample(&logits).unwrap_err();
        prop_assert!(
            matches!(err, SamplingError::NonFiniteLogit { token: t, .. } if t as usize == token),
            "{:?}", err
        );
        let named = format!("token {}", token);
        prop_assert!(err.to_string().contains(&named));
    }

    #[test]
    fn the_chain_applies_the_samplers_in_the_order_given(
        logits in logits_strategy(),
        order in Just(vec![
            SamplerKind::TopK,
            SamplerKind::TypicalP,
            SamplerKind::TopP,
            SamplerKind::MinP,
            SamplerKind::Temperature,
            SamplerKind::TopNSigma,
        ]).prop_shuffle(),
    ) {
        let config = SamplingConfig {
            temperature: 1.7,
            top_k: 30,
            top_p: 0.9,
            min_p: 0.02,
            typical_p: 0.95,
            top_n_sigma: 2.0,
            samplers: order.clone(),
            ..SamplingConfig::default()
        };
        let mut sampler = Sampler::new(config.clone(), logits.len()).unwrap();
        sampler.sample(&logits).unwrap();
        let mut manual = Candidates::from_logits(&logits).unwrap();
        for kind in &order {
            match kind {
                SamplerKind::TopK => top_k(&mut manual, config.top_k),
                SamplerKind::TypicalP => typical(&mut manual, config.typical_p),
                SamplerKind::TopP => top_p(&mut manual, config.top_p),
                SamplerKind::MinP => min_p(&mut manual, config.min_p),
                SamplerKind::Temperature => temperature(&mut manual, config.temperature),
                SamplerKind::TopNSigma => top_n_sigma(&mut manual, config.top_n_sigma),
                _ => unreachable!(),
            }
        }
        prop_assert_eq!(ids(sampler.last_candidates()), ids(&manual));
    }
}

#[test]
fn order_changes_the_result() {
    // min-p 0.3 before a temperature of 4 sees a sharp distribution and keeps one token;
    // after it, the flattened distribution keeps all three.
    let logits = [4.0, 2.0, 1.0];
    let kept = |samplers: &str| {
        let config = SamplingConfig {
            temperature: 4.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.3,
            samplers: parse_samplers(samplers).unwrap(),
            ..SamplingConfig::default()
        };
        let mut sampler = Sampler::new(config, logits.len()).unwrap();
        sampler.sample(&logits).unwrap();
        sampler.last_candidates().len()
    };
    assert_eq!(kept("min_p;temperature"), 1);
    assert_eq!(kept("temperature;min_p"), 3);
}

#[test]
fn sampler_lists_parse_as_llama_cpp_writes_them() {
    use SamplerKind::*;
    assert_eq!(
        parse_samplers("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature")
            .unwrap(),
        SamplerKind::DEFAULT_ORDER
    );
    assert_eq!(
        parse_samplers("top-k;nucleus;typical;min-p;temp").unwrap(),
        [TopK, TopP, TypicalP, MinP, Temperature]
    );
    assert_eq!(
        parse_sampler_letters("edskypmxt").unwrap(),
        SamplerKind::DEFAULT_ORDER
    );
    assert!(matches!(
        parse_samplers("top_k;mirostat"),
        Err(SamplingError::UnknownSampler { name }) if name == "mirostat"
    ));
    assert!(matches!(
        parse_samplers("infill"),
        Err(SamplingError::UnsupportedSampler { .. })
    ));
    assert!(parse_sampler_letters("kq").is_err());
}

#[test]
fn greedy_picks_the_largest_logit_whatever_the_seed() {
    let logits = [0.5, 3.0, 2.9, -1.0, 3.0];
    for seed in 0..50 {
        let mut sampler = Sampler::new(
            SamplingConfig {
                seed,
                ..SamplingConfig::greedy()
            },
            logits.len(),
        )
        .unwrap();
        // Equal maxima: the lower id, as argmax.
        assert_eq!(sampler.sample(&logits).unwrap(), 1);
    }
}

#[test]
fn different_seeds_give_different_tokens() {
    let logits = vec![0.0f32; 1000];
    let draw = |seed| {
        let mut sampler = Sampler::new(plain(1.0, seed), logits.len()).unwrap();
        (0..10)
            .map(|_| sampler.sample(&logits).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(draw(7), draw(7));
    assert_ne!(draw(7), draw(8));
}

#[test]
fn logit_bias_and_penalties_steer_the_draw() {
    let logits = [1.0, 1.0, 1.0];
    let config = SamplingConfig {
        logit_bias: vec![(0, f32::NEG_INFINITY), (2, -30.0)],
        ..plain(1.0, 3)
    };
    let mut sampler = Sampler::new(config, 3).unwrap();
    for _ in 0..100 {
        assert_eq!(sampler.sample(&logits).unwrap(), 1);
    }
    let banned_all = SamplingConfig {
        logit_bias: (0..3).map(|t| (t, f32::NEG_INFINITY)).collect(),
        ..plain(1.0, 3)
    };
    let mut sampler = Sampler::new(banned_all, 3).unwrap();
    assert_eq!(sampler.sample(&logits), Err(SamplingError::NoCandidates));
    assert!(matches!(
        Sampler::new(
            SamplingConfig {
                logit_bias: vec![(3, 1.0)],
                ..SamplingConfig::default()
            },
            3
        ),
        Err(SamplingError::BiasToken { token: 3, .. })
    ));

    // A strong repetition penalty on the greedy choice moves greedy decoding elsewhere.
    let config = SamplingConfig {
        repeat_penalty: 10.0,
        ..SamplingConfig::greedy()
    };
    let mut sampler = Sampler::new(config, 3).unwrap();
    let logits = [2.0, 1.0, 0.5];
    assert_eq!(sampler.sample(&logits).unwrap(), 0);
    sampler.start(&[0]);
    assert_eq!(sampler.sample(&logits).unwrap(), 1);
}

#[test]
fn typical_keeps_the_tokens_nearest_the_entropy() {
    // Probabilities 0.5, 0.25, 0.125, 0.125: entropy 1.2130 nats; -ln p: 0.693, 1.386,
    // 2.079, 2.079. Distances 0.520, 0.173, 0.866, 0.866: token 1 first (0.25), then token 0
    // (0.75 > 0.7).
    let logits = [0.5f32.ln(), 0.25f32.ln(), 0.125f32.ln(), 0.125f32.ln()];
    let mut c = Candidates::from_logits(&logits).unwrap();
    typical(&mut c, 0.7);
    assert_eq!(ids(&c), [1, 0]);
}

/// 100,000 draws from a softmax at temperature 0.7 over 8 tokens: a chi-square test against
/// the expected counts. A wrong temperature, a wrong softmax or a biased generator fails it;
/// the seed is fixed, so the test is deterministic.
#[test]
fn sampled_frequencies_match_the_softmax() {
    const DRAWS: usize = 100_000;
    let logits = [1.0f32, 0.5, 0.0, -0.5, -1.0, 2.0, 0.25, -2.0];
    let temp = 0.7;
    let scaled: Vec<f32> = logits.iter().map(|l| l / temp).collect();
    let expected = softmax(&scaled);

    let chi_square = |config: SamplingConfig| {
        let mut sampler = Sampler::new(config, logits.len()).unwrap();
        let mut counts = [0usize; 8];
        for _ in 0..DRAWS {
            counts[sampler.sample(&logits).unwrap() as usize] += 1;
        }
        counts
            .iter()
            .zip(&expected)
            .map(|(&n, &p)| {
                let e = p * DRAWS as f64;
                (n as f64 - e).powi(2) / e
            })
            .sum::<f64>()
    };
    // 7 degrees of freedom: P(χ² > 24.32) = 0.001.
    let right = chi_square(plain(temp, 1234));
    assert!(right < 24.32, "χ² = {right:.1} for the right temperature");
    let wrong = chi_square(plain(1.0, 1234));
    assert!(wrong > 100.0, "χ² = {wrong:.1} for a wrong temperature");
}
