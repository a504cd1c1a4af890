//! Model architectures written once against a small set of backend operations.
//!
//! - [`HyperParams`] come from GGUF metadata, with llama.cpp's defaults for missing keys.
//! - [`Backend`] is the op set (embedding, RMSNorm, matmul, bias, RoPE, attention over the KV
//!   cache, copies of KV blocks, gated activation, residual add, row selection);
//!   `plumb-backend-ref` is the f32
//!   reference implementation.
//! - `arch/` has one file per architecture: llama (with qwen2 and qwen3 as variants of it),
//!   gemma2 and gemma3.
//! - [`KvCache`] holds several sequences at different positions in blocks of a shared pool
//!   (paged, as vLLM's), with a prefix cache of whole blocks, forking, and sliding-window
//!   layers that give back the blocks they no longer see.
//! - An [`Observer`] sees every intermediate under llama.cpp's graph name.
//!
//! ```no_run
//! # fn demo<B: plumb_model::Backend>(backend: B) -> plumb_model::Result<()> {
//! use plumb_model::{KvConfig, LogitsFor, Model};
//! let model = Model::load("model.gguf", backend)?;
//! let mut cache = model.new_kv_cache(KvConfig::new(2048, 1, 256))?;
//! let logits = model.eval(&mut cache, 0, &[1, 415, 5565], LogitsFor::Last)?;
//! let next = plumb_model::argmax(logits.last().unwrap());
//! # Ok(()) }
//! ```

mod arch;
mod backend;
mod batch;
mod error;
mod hparams;
mod kv_cache;
mod layers;
mod model;
mod observer;
mod pass;
mod rope;
pub mod routing;
mod weights;

pub use backend::{
    Activation, Activations, AttentionStep, Backend, GatedFfnWeights, MoeFfnWeights, PassInputs,
    Projection, TokenPos, WeightUse,
};
pub use batch::{argmax, top_k, Batch, Logits, LogitsFor, TopLogits};
pub use error::{ModelError, Result};
pub use hparams::{Architecture, HyperParams};
pub use kv_cache::{
    BlockCopy, BlockTable, BlockTables, KvCache, KvConfig, KvGroup, KvLayout, LayerKv, PassKv,
};
pub use model::Model;
pub use observer::{ObservedTensor, Observer, Recorder};
pub use rope::{Rope, RopeStyle, Yarn};
pub use weights::WeightTensor;
