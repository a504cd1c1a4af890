//! The verification toolkit.
//!
//! - [`Trace`]: the named intermediates of one run, stored as a GGUF file of F32 tensors in
//!   graph order, with the run's provenance in metadata. llama.cpp's own hidden states
//!   (`testdata/golden/<model>/trace.gguf`) are in the same format.
//! - [`TensorStats`]: what engine authors print by hand when hunting a bug.
//! - [`diff`]: compares two traces tensor by tensor and names the first divergence.
//! - [`NllMean`], [`KlStats`]: perplexity and KL divergence the way llama-perplexity does them.

mod diff;
mod perplexity;
mod saved_logits;
mod stats;
mod trace;

pub use diff::{diff, op_that_produced, DiffReport, TensorDiff, Tolerance, Verdict};
pub use perplexity::{log_softmax, next_token_kl, scored_positions, windows, KlStats, NllMean};
pub use saved_logits::{LogProbWriter, SavedLogProbs};
pub use stats::TensorStats;
pub use trace::{Trace, TraceError, TraceInfo};
