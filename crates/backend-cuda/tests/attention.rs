//! Attention over the f16 paged cache against the reference's f32 one: several sequences in
//! one batch, their blocks scattered over the pool, grouped-query heads, a sliding-window
//! layer, prompts, decoding (which splits contexts of up to 4500 positions here across
//! blocks) and forks' block copies. Heads of 32 dimensions take the general kernel; of 64 and 128 the tensor-core
//! kernel for prompts and the flash-decoding one for decoding, which also takes 256.

mod common;

use common::{assert_close, kv_cache, run, with_pass, REF};
use plumb_backend_cuda::{CudaBackend, CudaTensor};
use plumb_backend_ref::{HostTensor, RefBackend};
use plumb_model::{AttentionStep, Backend, KvCache, KvConfig, LayerKv, TokenPos};
use plumb_testutil::Rng;

const BLOCK: usize = 4;
const WINDOW: usize = 5;
/// f16 keys and values: about 1e-3 of relative rounding, which the softmax and the weighted
/// sum do not amplify much.
const TOL: f32 = 5e-3;

/// Query heads, KV heads and head dimensions.
#[derive(Clone, Copy, Debug)]
struct Heads {
    n_head: usize,
    n_head_kv: usize,
    dim: usize,
}

/// 8 query heads in groups of 4, of 32 dimensions: the general kernel's.
const GENERAL: Heads = Heads {
    n_head: 8,
    n_head_kv: 2,
    dim: 32,
};

/// Two layers: layer 0 global, layer 1 with a window (a group of its own).
fn layers(heads: Heads) -> Vec<LayerKv> {
    let Heads { n_head_kv, dim, .. } = heads;
    vec![
        LayerKv::new(n_head_kv, dim, dim, None),
        LayerKv::new(n_head_kv, dim, dim, Some(WINDOW)),
    ]
}

/// The same cache on both backends, which the same passes page the same way.
struct Caches {
    heads: Heads,
    cuda: CudaBackend,
    device: KvCache<CudaBackend>,
    host: KvCache<RefBackend>,
    rng: Rng,
}

/// Per layer, the attention output.
fn attend<B: Backend>(
    backend: &B,
    cache: &mut KvCache<B>,
    heads: Heads,
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
                n_head: heads.n_head,
                scale: 1.0 / (heads.dim as f32).sqrt(),
                softcap: None,
            };
            out.push(backend.attention(q, storage, &step, pass)?);
        }
        Ok(out)
    })
    .unwrap()
}

impl Caches {
    fn new(cuda: CudaBackend, config: KvConfig, heads: Heads) -> Caches {
        Caches {
            device: kv_cache(&cuda, config, layers(heads)),
            host: kv_cache(&REF, config, layers(heads)),
            heads,
            cuda,
            rng: Rng::new(11),
        }
    }

    /// `n` rows of `width` random values on both backends: a few times larger than unit, so
    /// that the softmax of queries and keys is peaked.
    fn input(&mut self, n: usize, width: usize) -> (HostTensor, CudaTensor) {
        let values: Vec<f32> = self.rng.values(n * width, 3.0);
        let d = self.cuda.upload(n, width, values.clone()).unwrap();
        (HostTensor::new(n, width, values), d)
    }

    /// One pass of `places` through both layers on both backends, with random Q, K and V,
    /// compared.
    fn pass(&mut self, places: &[TokenPos], what: &str) {
        let n = places.len();
        let Heads {
            n_head,
            n_head_kv,
            dim,
        } = self.heads;
        let mut host = Vec::new();
        let mut device = Vec::new();
        for _ in 0..2 {
            let (q, qd) = self.input(n, n_head * dim);
            let (k, kd) = self.input(n, n_head_kv * dim);
            let (v, vd) = self.input(n, n_head_kv * dim);
            host.push([q, k, v]);
            device.push([qd, kd, vd]);
        }
        let want = attend(&REF, &mut self.host, self.heads, places, &host);
        let got = attend(&self.cuda, &mut self.device, self.heads, places, &device);
        for (layer, (got, want)) in got.iter().zip(&want).enumerate() {
            assert_close(
                &self.cuda,
                got,
                want,
                TOL,
                &format!("{:?}: {what}, layer {layer}", self.heads),
            );
        }
    }
}

/// Stores K and V of `places` in every layer, attending nothing.
fn store<B: Backend>(
    backend: &B,
    cache: &mut KvCache<B>,
    places: &[TokenPos],
    inputs: &[[B::Tensor; 2]],
) {
    let tokens = vec![0; places.len()];
    with_pass(backend, cache, &tokens, places, &[], |pass, storage| {
        for (layer, [k, v]) in inputs.iter().enumerate() {
            backend.store_kv(k, v, storage, layer, pass)?;
        }
        Ok(())
    })
    .unwrap();
}

impl Caches {
    /// Random keys and values of `places` into both layers on both backends, attending
    /// nothing: long contexts without the reference's quadratic cost of attending them.
    fn fill(&mut self, places: &[TokenPos]) {
        let (n, width) = (places.len(), self.heads.n_head_kv * self.heads.dim);
        let mut host = Vec::new();
        let mut device = Vec::new();
        for _ in 0..2 {
            let (k, kd) = self.input(n, width);
            let (v, vd) = self.input(n, width);
            host.push([k, v]);
            device.push([kd, vd]);
        }
        store(&REF, &mut self.host, places, &host);
        store(&self.cuda, &mut self.device, places, &device);
    }
}

/// Prompts of several sequences in one pass (one continuing, one cut short by a window),
/// forks, then decoding of all of them over contexts of up to 300 positions.
fn prompts_then_decoding(cuda: CudaBackend, heads: Heads) {
    let mut caches = Caches::new(
        cuda,
        KvConfig::new(320, 4, 320).with_block_size(BLOCK),
        heads,
    );
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
fn paged_attention_matches_the_reference() {
    let cuda = require_cuda!();
    prompts_then_decoding(cuda, GENERAL);
}

#[test]
fn prompts_on_tensor_cores_and_flash_decoding_match_the_reference() {
    for (n_head, n_head_kv, dim) in [(8, 2, 64), (4, 4, 128), (6, 2, 128)] {
        let heads = Heads {
            n_head,
            n_head_kv,
            dim,
        };
        prompts_then_decoding(require_cuda!(), heads);
    }
}

/// A prompt of 700 positions, then 12 tokens decoded one at a time, each context split
/// across blocks.
fn one_long_sequence(cuda: CudaBackend, heads: Heads) {
    let config = KvConfig::new(720, 1, 720).with_block_size(BLOCK);
    let mut caches = Caches::new(cuda, config, heads);
    caches.pass(&run(0, 0, 700), "prompt of 700");
    for pos in 700..712 {
        caches.pass(&run(0, pos, pos + 1), &format!("decoding position {pos}"));
    }
}

#[test]
fn one_long_sequence_decodes_across_split_boundaries() {
    let cuda = require_cuda!();
    one_long_sequence(cuda, GENERAL);
}

#[test]
fn flash_decoding_of_one_long_sequence_matches_the_reference() {
    // Every head dimension, and groups of 1, 7, 3 and 16 query heads per KV head (16: two
    // blocks of 8 per KV head).
    for (n_head, n_head_kv, dim) in [
        (4, 4, 64),
        (14, 2, 64),
        (6, 2, 128),
        (16, 1, 128),
        (4, 1, 256),
        (8, 8, 256),
    ] {
        let heads = Heads {
            n_head,
            n_head_kv,
            dim,
        };
        one_long_sequence(require_cuda!(), heads);
    }
}

/// Sequences of 4500, 1000 and 37 positions, filled without attending, then decoded together
/// (a server's continuous batch): the longest cut into many splits of several stages each,
/// splits past the shorter ones' ends, a window; then the longest alone, its splits filling
/// the GPU.
fn long_contexts_of_different_lengths(cuda: CudaBackend, heads: Heads) {
    const FILL: usize = 512;
    let lens = [4500, 1000, 37];
    let config = KvConfig::new(4600, lens.len(), FILL).with_block_size(16);
    let mut caches = Caches::new(cuda, config, heads);
    for (seq, &len) in lens.iter().enumerate() {
        for from in (0..len).step_by(FILL) {
            caches.fill(&run(seq, from, (from + FILL).min(len)));
        }
    }
    for step in 0..3 {
        let batch: Vec<TokenPos> = (0..lens.len())
            .map(|seq| TokenPos {
                seq,
                pos: lens[seq] + step,
            })
            .collect();
        caches.pass(&batch, &format!("decoding {lens:?} + {step}"));
    }
    caches.pass(&run(0, 4503, 4504), "decoding the longest alone");
}

#[test]
fn flash_decoding_of_long_contexts_in_a_batch_matches_the_reference() {
    // TinyLlama's 8 query heads per KV head of 64, Llama-2's heads of 128 without groups,
    // and heads of 256 in groups of 8.
    for (n_head, n_head_kv, dim) in [(32, 4, 64), (8, 8, 128), (16, 2, 256)] {
        let heads = Heads {
            n_head,
            n_head_kv,
            dim,
        };
        long_contexts_of_different_lengths(require_cuda!(), heads);
    }
}
