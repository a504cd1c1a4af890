//! Weights packed for the GEMM once at load (`CpuBackend::with_packed_weights`, what `plumb
//! serve` runs on) give the numbers that products packing them each time give: bit for bit at
//! 9 tokens, where both go through the GEMM, and a batch of 3 tokens gives its rows exactly
//! as they come out of a batch of 9 (a row's sums do not depend on its batch mates).

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_model::{Batch, KvConfig, Model};
use plumb_testutil::require_model;

/// Logits of `tokens`, each the first token of its own sequence, in one batch.
fn first_tokens(model: &Model<CpuBackend>, tokens: &[u32]) -> Vec<Vec<f32>> {
    let n = tokens.len();
    let mut cache = model.new_kv_cache(KvConfig::new(8, n, n)).unwrap();
    let mut batch = Batch::new();
    for (seq, &token) in tokens.iter().enumerate() {
        batch.push(token, seq, 0, true);
    }
    let logits = model.forward(&batch, &mut cache).unwrap();
    logits.rows().map(<[f32]>::to_vec).collect()
}

#[test]
fn packed_weights_give_the_numbers_of_weights_packed_per_product() {
    // gemma3-270m has Q8_0, Q5_0, Q4_K and Q6_K matrices: both GEMM families.
    let path = require_model!("gemma3-270m");
    let backend = || CpuBackend::new(2, KvCacheType::F16).unwrap();
    let plain = Model::load(&path, backend()).unwrap();
    let packed = Model::load(&path, backend().with_packed_weights()).unwrap();
    let tokens = [2, 818, 5279, 529, 7001, 563, 236743, 600, 1000];
    let nine = first_tokens(&packed, &tokens);
    assert_eq!(nine, first_tokens(&plain, &tokens));
    assert_eq!(first_tokens(&packed, &tokens[..3]), nine[..3]);
}
