//! The base run's next-token distributions, saved for a later KL-divergence comparison
//! (llama.cpp's `--kl-divergence-base`). A GGUF file: the corpus tokens, the window size, and
//! one F16 row of log-probabilities per scored position, in scoring order.

use std::path::Path;

use plumb_gguf::{GgmlType, GgufFile, GgufWriter};

use crate::TraceError;

const ARCHITECTURE: &str = "plumb.logprobs";
const N_CTX_KEY: &str = "plumb.logprobs.n_ctx";
const MODEL_KEY: &str = "plumb.logprobs.model_file";
const TOKENS: &str = "tokens";
const LOG_PROBS: &str = "log_probs";

/// Writes rows as they are produced, so a caller never holds more than one in f32.
pub struct LogProbWriter {
    n_vocab: usize,
    rows: usize,
    f16: Vec<u8>,
}

impl LogProbWriter {
    pub fn new(n_vocab: usize) -> Self {
        LogProbWriter {
            n_vocab,
            rows: 0,
            f16: Vec::new(),
        }
    }

    pub fn push(&mut self, log_probs: &[f64]) {
        assert_eq!(log_probs.len(), self.n_vocab, "one full row per position");
        self.f16.extend(
            log_probs
                .iter()
                .flat_map(|&v| half::f16::from_f64(v.max(-65504.0)).to_le_bytes()),
        );
        self.rows += 1;
    }

    pub fn write(
        self,
        path: &Path,
        n_ctx: usize,
        model_file: &str,
        tokens: &[u32],
    ) -> Result<(), TraceError> {
        let mut w = GgufWriter::new();
        w.set("general.architecture", ARCHITECTURE);
        w.set(N_CTX_KEY, n_ctx as u64);
        w.set(MODEL_KEY, model_file);
        let token_bytes = tokens
            .iter()
            .flat_map(|&t| (t as i32).to_le_bytes())
            .collect();
        w.add_tensor(TOKENS, GgmlType::I32, &[tokens.len() as u64], token_bytes)?;
        w.add_tensor(
            LOG_PROBS,
            GgmlType::F16,
            &[self.n_vocab as u64, self.rows as u64],
            self.f16,
        )?;
        Ok(w.write_file(path)?)
    }
}

/// A saved base run.
pub struct SavedLogProbs {
    file: GgufFile,
    pub n_ctx: usize,
    pub model_file: String,
    pub tokens: Vec<u32>,
    pub n_vocab: usize,
    pub n_rows: usize,
}

impl SavedLogProbs {
    pub fn read(path: &Path) -> Result<Self, TraceError> {
        let file = GgufFile::open(path)?;
        let md = file.metadata();
        if md.architecture().unwrap_or("") != ARCHITECTURE {
            return Err(TraceError::NotATrace {
                path: path.display().to_string(),
                found: md.architecture().unwrap_or("").to_owned(),
            });
        }
        let n_ctx = md.get_usize(N_CTX_KEY)?;
        let model_file = md.get_str(MODEL_KEY)?.to_owned();
        let tokens = file
            .tensor_bytes(TOKENS)?
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")) as u32)
            .collect();
        let info = file.require_tensor(LOG_PROBS)?;
        let (n_vocab, n_rows) = (info.row_len() as usize, info.n_rows() as usize);
        Ok(SavedLogProbs {
            n_ctx,
            model_file,
            tokens,
            n_vocab,
            n_rows,
            file,
        })
    }

    /// Row `i` as f64 log-probabilities.
    pub fn row(&self, i: usize) -> Vec<f64> {
        let bytes = self.file.tensor_bytes(LOG_PROBS).expect("checked on read");
        bytes[i * self.n_vocab * 2..(i + 1) * self.n_vocab * 2]
            .chunks_exact(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect()
    }
}
