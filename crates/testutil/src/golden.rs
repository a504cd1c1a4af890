//! llama.cpp's golden next-token distributions (`testdata/golden/<model>/logits.gguf`) and the
//! metrics every backend is held to (see `testdata/golden/README.md`):
//!
//! - coarsened KL(llama.cpp ‖ plumb) over llama.cpp's top-64 tokens plus one "rest" bucket,
//!   averaged over positions: at most [`MAX_MEAN_KL`];
//! - firm top-1: where llama.cpp's top-1 logit leads its top-2 by at least [`FIRM_MARGIN`],
//!   plumb's argmax is llama.cpp's top-1;
//! - greedy: plumb's greedy continuation equals llama.cpp's up to the first step whose margin
//!   is below [`FIRM_MARGIN`].

use std::fmt;
use std::path::Path;

use plumb_gguf::{GgmlType, GgufFile};
use plumb_model::{Backend, KvConfig, LogitsFor, Model};

/// The models with golden data.
pub const MODELS: [&str; 3] = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"];
/// Below this top-1/top-2 logit margin llama.cpp's own choice is too close to call.
pub const FIRM_MARGIN: f32 = 0.5;
/// The firm margin of top-1 choices for a backend that rounds activations to 8 bits as
/// llama.cpp does, but adds its integer block sums in its own order: its logits then carry
/// noise of their own. On gemma3's `long` prompt, position 1, plumb's cpu backend puts
/// llama.cpp's top-1 ahead by 0.25 through its one-row kernels and behind by 0.02 through its
/// GEMM, both valid orders of the same exact integer sums (llama.cpp: ahead by 0.53; the f32
/// reference: 0.56). A choice llama.cpp makes by less than 0.5 + 0.25 is within that noise.
pub const FIRM_MARGIN_8BIT: f32 = 0.75;
/// The largest acceptable mean coarsened KL for one prompt.
pub const MAX_MEAN_KL: f64 = 0.01;

/// One model's `logits.gguf`.
pub struct GoldenLogits {
    /// The sha256 of the model file llama.cpp ran.
    pub model_sha256: String,
    pub n_vocab: usize,
    pub prompts: Vec<GoldenPrompt>,
}

/// One prompt's tokens, llama.cpp's top-k logits at every position, and its greedy
/// continuation.
pub struct GoldenPrompt {
    pub name: String,
    pub text: String,
    /// The prompt's ids, BOS included where the vocabulary adds one.
    pub tokens: Vec<u32>,
    top_k: usize,
    top_ids: Vec<u32>,
    top_logits: Vec<f32>,
    lse: Vec<f32>,
    /// The full logits row at the last prompt position.
    pub last_logits: Vec<f32>,
    pub greedy: Vec<u32>,
    /// At each greedy step, llama.cpp's top-1 minus top-2 logit.
    pub greedy_margin: Vec<f32>,
}

impl GoldenLogits {
    /// `testdata/golden/<model>/logits.gguf`.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = GgufFile::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let md = file.metadata();
        let err = |e: plumb_gguf::GgufError| format!("{}: {e}", path.display());
        let top_k = md.get_usize("golden.top_k").map_err(err)?;
        let n_vocab = md.get_usize("golden.n_vocab").map_err(err)?;
        let model_sha256 = md.get_str("golden.model_sha256").map_err(err)?.to_owned();
        let names = md.get_str_array("golden.prompts").map_err(err)?;
        let prompts = names
            .iter()
            .map(|name| {
                let key = |field: &str| format!("{name}.{field}");
                Ok(GoldenPrompt {
                    name: name.to_string(),
                    text: md.get_str(&key("text")).map_err(err)?.to_owned(),
                    tokens: read_ids(&file, &key("tokens"))?,
                    top_k,
                    top_ids: read_ids(&file, &key("top_ids"))?,
                    top_logits: read_f32(&file, &key("top_logits"))?,
                    lse: read_f32(&file, &key("lse"))?,
                    last_logits: read_f32(&file, &key("last_logits"))?,
                    greedy: read_ids(&file, &key("greedy"))?,
                    greedy_margin: read_f32(&file, &key("greedy_margin"))?,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        for p in &prompts {
            let n = p.tokens.len();
            if p.top_ids.len() != n * top_k || p.top_logits.len() != n * top_k || p.lse.len() != n {
                return Err(format!(
                    "{}: prompt {:?} has inconsistent table sizes",
                    path.display(),
                    p.name
                ));
            }
        }
        Ok(GoldenLogits {
            model_sha256,
            n_vocab,
            prompts,
        })
    }

    pub fn prompt(&self, name: &str) -> Option<&GoldenPrompt> {
        self.prompts.iter().find(|p| p.name == name)
    }
}

fn tensor<'a>(file: &'a GgufFile, name: &str, ty: GgmlType) -> Result<&'a [u8], String> {
    let info = file.require_tensor(name).map_err(|e| e.to_string())?;
    if info.ggml_type != ty {
        return Err(format!("{name} is {}, expected {ty}", info.ggml_type));
    }
    Ok(file.tensor_data(info))
}

fn read_f32(file: &GgufFile, name: &str) -> Result<Vec<f32>, String> {
    Ok(tensor(file, name, GgmlType::F32)?
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn read_ids(file: &GgufFile, name: &str) -> Result<Vec<u32>, String> {
    tensor(file, name, GgmlType::I32)?
        .chunks_exact(4)
        .map(|b| {
            let id = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            u32::try_from(id).map_err(|_| format!("{name} holds the negative id {id}"))
        })
        .collect()
}

impl GoldenPrompt {
    /// llama.cpp's top-k ids at position `i`, best first.
    pub fn top_ids(&self, i: usize) -> &[u32] {
        &self.top_ids[i * self.top_k..(i + 1) * self.top_k]
    }

    pub fn top_logits(&self, i: usize) -> &[f32] {
        &self.top_logits[i * self.top_k..(i + 1) * self.top_k]
    }

    /// llama.cpp's top-1 minus top-2 logit at position `i`.
    pub fn margin(&self, i: usize) -> f32 {
        let top = self.top_logits(i);
        top[0] - top[1]
    }

    /// The greedy tokens up to, not including, the first step llama.cpp itself was unsure of:
    /// the part of the continuation any correct implementation must reproduce.
    pub fn firm_greedy(&self) -> &[u32] {
        let n = self
            .greedy_margin
            .iter()
            .position(|&m| m < FIRM_MARGIN)
            .unwrap_or(self.greedy.len());
        &self.greedy[..n]
    }

    /// The coarsened KL(llama.cpp ‖ q) at prompt position `i`, for plumb's logits `q`.
    pub fn kl(&self, i: usize, logits: &[f32]) -> f64 {
        coarsened_kl(self.top_ids(i), self.top_logits(i), self.lse[i], logits)
    }
}

/// KL(p ‖ q) over the ids of p's top-k plus one bucket for all other tokens, where p is given by
/// its top-k logits and its log-sum-exp, and q by a full logits row.
pub fn coarsened_kl(top_ids: &[u32], top_logits: &[f32], p_lse: f32, q_logits: &[f32]) -> f64 {
    let q_lse = log_sum_exp(q_logits);
    let mut kl = 0.0;
    let (mut p_top, mut q_top) = (0.0, 0.0);
    for (&id, &logit) in top_ids.iter().zip(top_logits) {
        let log_p = f64::from(logit) - f64::from(p_lse);
        let log_q = f64::from(q_logits[id as usize]) - q_lse;
        kl += log_p.exp() * (log_p - log_q);
        p_top += log_p.exp();
        q_top += log_q.exp();
    }
    let (p_rest, q_rest) = (1.0 - p_top, 1.0 - q_top);
    // When the top-k hold (nearly) all of p's mass, the rest bucket is rounding noise.
    if p_rest > 1e-12 {
        kl += p_rest * (p_rest / q_rest.max(1e-30)).ln();
    }
    kl
}

pub fn log_sum_exp(logits: &[f32]) -> f64 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = logits
        .iter()
        .map(|&l| (f64::from(l) - f64::from(max)).exp())
        .sum();
    f64::from(max) + sum.ln()
}

/// The index of the largest logit (the first on ties).
pub fn argmax(logits: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as u32
}

/// The metrics of one prompt, accumulated position by position.
#[derive(Debug, Clone, Default)]
pub struct Scorecard {
    pub prompt: String,
    kl_sum: f64,
    pub max_kl: f64,
    pub positions: usize,
    /// Positions where plumb's argmax differs from llama.cpp's top-1, with llama.cpp's margin.
    pub top1_misses: Vec<(usize, f32)>,
    /// Greedy steps compared (the firm prefix), and the first that differed.
    pub greedy_checked: usize,
    pub greedy_mismatch: Option<usize>,
}

impl Scorecard {
    pub fn new(prompt: &GoldenPrompt) -> Self {
        Scorecard {
            prompt: prompt.name.clone(),
            ..Self::default()
        }
    }

    /// Scores plumb's logits after prompt position `i`.
    pub fn position(&mut self, prompt: &GoldenPrompt, i: usize, logits: &[f32]) {
        let kl = prompt.kl(i, logits);
        self.kl_sum += kl;
        self.max_kl = self.max_kl.max(kl);
        self.positions += 1;
        if argmax(logits) != prompt.top_ids(i)[0] {
            self.top1_misses.push((i, prompt.margin(i)));
        }
    }

    /// Scores plumb's logits after the prompt and `step` firm greedy tokens.
    pub fn greedy_step(&mut self, prompt: &GoldenPrompt, step: usize, logits: &[f32]) {
        self.greedy_checked += 1;
        if self.greedy_mismatch.is_none() && argmax(logits) != prompt.greedy[step] {
            self.greedy_mismatch = Some(step);
        }
    }

    pub fn mean_kl(&self) -> f64 {
        self.kl_sum / self.positions.max(1) as f64
    }

    /// Top-1 misses at positions where llama.cpp was sure, by at least `firm_margin`.
    pub fn firm_misses(&self, firm_margin: f32) -> Vec<(usize, f32)> {
        self.top1_misses
            .iter()
            .copied()
            .filter(|&(_, m)| m >= firm_margin)
            .collect()
    }

    /// Every threshold of the golden metrics, top-1 choices counted as firm from
    /// `firm_margin` on ([`FIRM_MARGIN`] or [`FIRM_MARGIN_8BIT`]), or a description of what
    /// failed.
    pub fn check(&self, firm_margin: f32) -> Result<(), String> {
        let mut failures = Vec::new();
        if self.mean_kl() > MAX_MEAN_KL || self.mean_kl().is_nan() {
            failures.push(format!("mean KL {:.5} > {MAX_MEAN_KL}", self.mean_kl()));
        }
        let firm = self.firm_misses(firm_margin);
        if !firm.is_empty() {
            failures.push(format!(
                "top-1 differs at firm positions (pos, margin) {firm:?}"
            ));
        }
        if let Some(step) = self.greedy_mismatch {
            failures.push(format!("greedy continuation differs at step {step}"));
        }
        if failures.is_empty() {
            Ok(())
        } else {
            Err(format!("{}: {}", self.prompt, failures.join("; ")))
        }
    }
}

/// Scores any forward pass on one golden prompt. The prompt and llama.cpp's firm greedy
/// tokens are fed in one teacher-forced run, in chunks of `chunk` tokens: the greedy
/// continuation matches up to step s exactly when the argmax after the prompt and the first s
/// greedy tokens is greedy token s, for every s. `eval` runs one chunk, continuing the
/// sequence, and returns each token's logits.
pub fn score_teacher_forced(
    prompt: &GoldenPrompt,
    chunk: usize,
    mut eval: impl FnMut(&[u32]) -> Vec<Vec<f32>>,
) -> Scorecard {
    let firm = prompt.firm_greedy();
    let n_prompt = prompt.tokens.len();
    // The last firm token's own logits are not compared, so it need not be fed.
    let fed: Vec<u32> = prompt
        .tokens
        .iter()
        .chain(firm.iter().take(firm.len().saturating_sub(1)))
        .copied()
        .collect();
    let mut card = Scorecard::new(prompt);
    for (c, tokens) in fed.chunks(chunk).enumerate() {
        for (r, row) in eval(tokens).iter().enumerate() {
            let i = c * chunk + r;
            if i < n_prompt {
                card.position(prompt, i, row);
            }
            if i + 1 >= n_prompt && i + 1 - n_prompt < firm.len() {
                card.greedy_step(prompt, i + 1 - n_prompt, row);
            }
        }
    }
    card
}

/// Scores every prompt of `golden` with `score`, prints each scorecard as a table row, and
/// fails the test, listing every failing prompt, unless all pass with top-1 choices firm from
/// `firm_margin` on.
pub fn check_every_prompt(
    name: &str,
    golden: &GoldenLogits,
    firm_margin: f32,
    mut score: impl FnMut(&GoldenPrompt) -> Scorecard,
) {
    let mut failures = Vec::new();
    for prompt in &golden.prompts {
        let start = std::time::Instant::now();
        let card = score(prompt);
        eprintln!("{name:<18} {card} {:.1}s", start.elapsed().as_secs_f64());
        if let Err(failure) = card.check(firm_margin) {
            failures.push(failure);
        }
    }
    assert!(failures.is_empty(), "{name}: {}", failures.join("\n"));
}

/// Tokens per forward pass of [`check_model`]; bounds the logits held at once (gemma3: 128 ×
/// 262144 floats).
const CHUNK: usize = 128;

/// Holds `backend` to llama.cpp's golden logits of the model `name` on every golden prompt
/// ([`check_every_prompt`], top-1 choices firm from `firm_margin` on), each prompt run
/// teacher-forced in passes of up to [`CHUNK`] tokens. Every backend's golden tests call it.
/// Skips loudly when the model is missing; its golden data is part of the repository.
pub fn check_model<B: Backend>(name: &str, backend: B, firm_margin: f32) {
    check_model_where(name, backend, firm_margin, |_| {});
}

/// [`check_model`] on the golden prompts named in `prompts` alone: for a backend too slow
/// to run the long ones in every test run. Panics, naming it, on a prompt the golden data
/// does not have.
pub fn check_model_prompts<B: Backend>(name: &str, backend: B, firm_margin: f32, prompts: &[&str]) {
    check_model_where(name, backend, firm_margin, |golden| {
        for wanted in prompts {
            assert!(
                golden.prompt(wanted).is_some(),
                "golden/{name}/logits.gguf has no prompt {wanted:?}"
            );
        }
        golden
            .prompts
            .retain(|p| prompts.contains(&p.name.as_str()));
    });
}

/// [`check_model`] on the golden data as `select` leaves it.
fn check_model_where<B: Backend>(
    name: &str,
    backend: B,
    firm_margin: f32,
    select: impl FnOnce(&mut GoldenLogits),
) {
    let test = format!("golden {name} ({})", backend.name());
    let Some(model_path) = crate::model(&test, name) else {
        return;
    };
    let mut golden =
        GoldenLogits::open(&crate::testdata(&format!("golden/{name}/logits.gguf"))).unwrap();
    select(&mut golden);
    let label = format!("{name} ({})", backend.name());
    let model = Model::load(&model_path, backend).unwrap();
    check_loaded(&label, &model, &golden, firm_margin);
}

/// The context of llama.cpp's golden runs (tools/reference/llama_session.py): phi3 picks its
/// RoPE factors by the context a sequence may hold, so the cache holds at least as much.
const GOLDEN_N_CTX: usize = 1024;

/// Holds a loaded model to golden logits ([`check_every_prompt`], top-1 choices firm from
/// `firm_margin` on); `label` names it in the table and in failures. The synthetic
/// architecture models' tests call it directly.
pub fn check_loaded<B: Backend>(
    label: &str,
    model: &Model<B>,
    golden: &GoldenLogits,
    firm_margin: f32,
) {
    assert_eq!(model.hparams().n_vocab, golden.n_vocab);
    check_every_prompt(label, golden, firm_margin, |prompt| {
        let n_ctx = teacher_forced_len(prompt).max(GOLDEN_N_CTX);
        let mut cache = model.new_kv_cache(KvConfig::new(n_ctx, 1, CHUNK)).unwrap();
        score_teacher_forced(prompt, CHUNK, |tokens| {
            let logits = model.eval(&mut cache, 0, tokens, LogitsFor::All).unwrap();
            logits.rows().map(<[f32]>::to_vec).collect()
        })
    });
}

/// The total length `score_teacher_forced` feeds for `prompt`: the context a run needs.
pub fn teacher_forced_len(prompt: &GoldenPrompt) -> usize {
    prompt.tokens.len() + prompt.firm_greedy().len().saturating_sub(1)
}

impl fmt::Display for Scorecard {
    /// One table row: prompt, positions, mean and max KL, top-1 misses (all / firm), greedy.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let worst_miss = self
            .top1_misses
            .iter()
            .map(|&(_, m)| m)
            .fold(0.0f32, f32::max);
        let greedy = match self.greedy_mismatch {
            None => format!("{}/{} ok", self.greedy_checked, self.greedy_checked),
            Some(step) => format!("differs at {step}"),
        };
        write!(
            f,
            "| {:<9} | {:>4} | {:.5} | {:.5} | {} (max margin {:.2}) / {} | {} |",
            self.prompt,
            self.positions,
            self.mean_kl(),
            self.max_kl,
            self.top1_misses.len(),
            worst_miss,
            self.firm_misses(FIRM_MARGIN).len(),
            greedy
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kl_is_zero_for_the_same_distribution_and_grows_with_difference() {
        let logits = [2.0f32, 1.0, 0.5, -1.0, -3.0];
        let lse = log_sum_exp(&logits) as f32;
        let ids = [0u32, 1, 2];
        let top = [2.0f32, 1.0, 0.5];
        assert!(coarsened_kl(&ids, &top, lse, &logits).abs() < 1e-7);

        let shifted = [1.0f32, 2.0, 0.5, -1.0, -3.0];
        let kl = coarsened_kl(&ids, &top, lse, &shifted);
        assert!(kl > 0.1, "{kl}");

        // Mass moved between two tokens outside the top-k is invisible to the coarsened KL.
        let outside = [2.0f32, 1.0, 0.5, -3.0, -1.0];
        assert!(coarsened_kl(&ids, &top, lse, &outside).abs() < 1e-7);
    }

    #[test]
    fn scorecard_fails_on_a_firm_miss_only() {
        let mut card = Scorecard {
            positions: 1,
            ..Scorecard::default()
        };
        card.top1_misses.push((3, 0.2));
        assert!(card.check(FIRM_MARGIN).is_ok());
        card.top1_misses.push((4, 0.7));
        assert!(card.check(FIRM_MARGIN).unwrap_err().contains("firm"));
        assert!(card.check(FIRM_MARGIN_8BIT).is_ok());
        card.top1_misses.push((5, 0.8));
        assert!(card.check(FIRM_MARGIN_8BIT).is_err());
    }
}
