//! A forward pass on the wgpu backend waits for the GPU once, for its logits, and decoding token by token gives the logits of the whole sequence evaluated at once.

mod common;

use plumb_backend_wgpu::WgpuBackend;
use plumb_model::{KvConfig, LogitsFor, Model};
use plumb_testutil::require_model;

const TOKENS: [u32; 6] = [1, 504, 3458, 282, 4649, 314];

#[test]
fn a_decode_step_waits_once_and_matches_the_whole_sequence() {
    let gpu = require_gpu!();
    let path = require_model!("smollm2-135m");
    let model = Model::load(&path, gpu).unwrap();
    let config = KvConfig::new(16, 1, 16);

    let mut cache = model.new_kv_cache(config).unwrap();
    let whole = model.eval(&mut cache, 0, &TOKENS, LogitsFor::All).unwrap();

    let mut cache = model.new_kv_cache(config).unwrap();
    let backend: &WgpuBackend = model.backend();
    for (i, &token) in TOKENS.iter().enumerate() {
        let before = backend.readbacks();
        let step = model
            .eval(&mut cache, 0, &[token], LogitsFor::Last)
            .unwrap();
        assert_eq!(
            backend.readbacks() - before,
            1,
            "decoding token {i} read back more than its logits"
        );
        assert_close(i, step.last().unwrap(), whole.row(i));
    }
}

/// Each decoded token's logits against the whole sequence's at its position: every step,
/// since a step's dispatches are submitted in parts (`commands.rs`), and parts that ran
/// before their parameters were written (read those of the pass before, or none) gave NaN
/// logits on lavapipe.
fn assert_close(i: usize, b: &[f32], a: &[f32]) {
    // The two paths sum in different orders: the tiled product against the mat-vec, and
    // when decoding the gated FFN's activation inside the up projection. On lavapipe they
    // differed by 5.5e-5 (fc4c54d), and by 1.5e-4 once the RMSNorm and attention kernels
    // summed four values at a time (f197205), which both paths share: f32 rounding carried
    // through 30 layers. A token at the wrong position or slot moves the logits by far more.
    let err = common::max_rel_diff(b, a);
    assert!(
        err <= 5e-4,
        "token {i}'s decoded logits are off by {err} from the whole sequence's"
    );
}
