//! Attention over the f16 paged cache against the reference's f32 one: several sequences in
//! one batch, their blocks scattered over the pool, grouped-query heads, a sliding-window
//! layer, prompts, decoding (which splits long contexts across blocks) and forks' block
//! copies.

mod common;

use common::{assert_close, kv_cache, run, with_pass, REF};
use plumb_backend_cuda::CudaBackend;
use plumb_backend_ref::{HostTensor, RefBackend};
use plumb_model::{AttentionStep, Backend, KvCache, KvConfig, LayerKv, TokenPos};
use plumb_testutil::Rng;

const N_HEAD: usize = 8;
const N_HEAD_KV: usize = 2;
const HEAD_DIM: usize = 32;
const BLOCK: usize = 4;
const WINDOW: usize = 5;
/// f16 keys and values: about 1e-3 of relative rounding, which the softmax and the weighted
/// sum do not amplify much.
const TOL: f32 = 5e-3;

/// Two layers: layer 0 global, layer 1 with a window (a group of its own).
fn layers() -> Vec<LayerKv> {
    vec![
        LayerKv::new(N_HEAD_KV, HEAD_DIM, HEAD_DIM, None),
        LayerKv::new(N_HEAD_KV, HEAD_DIM, HEAD_DIM, Some(WINDOW)),
    ]
}

/// The same cache on both backends, which the same passes page the same way.
struct Caches {
    cuda: CudaBackend,
    device: KvCache<CudaBackend>,
    host: KvCache<RefBackend>,
    rng: Rng,
}

/// Per layer, the attention output.
fn attend<B: Backend>(
    backend: &B,
    cache: &mut KvCache<B>,
    places: &[TokenPos],
    inputs: &[[B::Tensor; 3]],
) -> Vec<B::Tensor> {
    let tokens = vec![0; places.len()];
    with_pass(backend, cache, &tokens, places, &[], |pass, storage| {
        let mut out = Vec::new();
        for (layer, [q, k, v]) in inputs.iter().enumerate() {
            backend.store_kv(k, v, storage, layer, pass)?;
            let step = AttentionStep {
                layer,
                n_head: N_HEAD,
                scale: 1.0 / (HEAD_DIM as f32).sqrt(),
                softcap: None,
            };
            out.push(backend.attention(q, storage, &step, pass)?);
        }
        Ok(out)
    })
    .unwrap()
}

impl Caches {
    fn new(cuda: CudaBackend, config: KvConfig) -> Caches {
        Caches {
            device: kv_cache(&cuda, config, layers()),
            host: kv_cache(&REF, config, layers()),
            cuda,
            rng: Rng::new(11),
        }
    }

    /// One pass of `places` through both layers on both backends, with random Q, K and V,
    /// compared.
    fn pass(&mut self, places: &[TokenPos], what: &str) {
        let n = places.len();
        let mut host = Vec::new();
        let mut device = Vec::new();
        for _ in 0..2 {
            let mut input = |width: usize| {
                // Keys and queries a few times larger than unit, so that the softmax is peaked.
                let values: Vec<f32> = self.rng.values(n * width, 3.0);
                let d = self.cuda.upload(n, width, values.clone()).unwrap();
                (HostTensor::new(n, width, values), d)
            };
            let (q, qd) = input(N_HEAD * HEAD_DIM);
            let (k, kd) = input(N_HEAD_KV * HEAD_DIM);
            let (v, vd) = input(N_HEAD_KV * HEAD_DIM);
            host.push([q, k, v]);
            device.push([qd, kd, vd]);
        }
        let want = attend(&REF, &mut self.host, places, &host);
        let got = attend(&self.cuda, &mut self.device, places, &device);
        for (layer, (got, want)) in got.iter().zip(&want).enumerate() {
            assert_close(
                &self.cuda,
                got,
                want,
                TOL,
                &format!("{what}, layer {layer}"),
            );
        }
    }
}

#[test]
fn paged_attention_matches_the_reference() {
    let cuda = require_cuda!();
    let mut caches = Caches::new(cuda, KvConfig::new(320, 4, 320).with_block_size(BLOCK));
    // Blocks taken and given back first, so that the sequences get scattered ones.
    caches.pass(&[run(3, 0, 41), run(2, 0, 9)].concat(), "scattering");
    caches.host.clear_seq(3);
    caches.device.clear_seq(3);

    // Prompts of three sequences at once (one of them continuing), then more of two of them.
    caches.pass(
        &[run(0, 0, 20), run(1, 0, 200), run(2, 9, 11)].concat(),
        "prompts",
    );
    caches.pass(
        &[run(1, 200, 290), run(0, 20, 30)].concat(),
        "second chunks",
    );

    // Sequence 3 starts as a copy of sequence 2, whose partial last block it copies before
    // writing to it.
    caches.host.fork(2, 3).unwrap();
    caches.device.fork(2, 3).unwrap();

    // Decoding: one token of each sequence per pass, over long contexts.
    let lens = [37, 300, 14, 18];
    let mut lens_now = [30, 290, 11, 11];
    while lens_now.iter().zip(lens).any(|(&n, len)| n < len) {
        let batch: Vec<TokenPos> = (0..4)
            .filter(|&s| lens_now[s] < lens[s])
            .map(|s| TokenPos {
                seq: s,
                pos: lens_now[s],
            })
            .collect();
        caches.pass(&batch, &format!("decoding at {lens_now:?}"));
        for t in &batch {
            lens_now[t.seq] += 1;
        }
    }
}

#[test]
fn one_long_sequence_decodes_across_split_boundaries() {
    let cuda = require_cuda!();
    let mut caches = Caches::new(cuda, KvConfig::new(720, 1, 720).with_block_size(BLOCK));
    caches.pass(&run(0, 0, 700), "prompt of 700");
    for pos in 700..712 {
        caches.pass(&run(0, pos, pos + 1), &format!("decoding position {pos}"));
    }
}
