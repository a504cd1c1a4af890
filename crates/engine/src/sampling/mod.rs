//! llama.cpp's sampler chain: from the model's logits to one token.
//!
//! The chain is the logit bias, then the configurable samplers in order (by default
//! llama.cpp's: penalties, dry, top-n-sigma, top-k, typical, top-p, min-p, xtc, temperature),
//! then a random draw from the softmax of what is left. Each sampler is a function over
//! [`Candidates`] in its own module; [`Sampler`] runs them.
//!
//! `dry` and `xtc` are accepted in a sampler list so that llama.cpp's lists work as they are,
//! but do nothing: llama.cpp's defaults turn both off too (`--dry-multiplier 0`,
//! `--xtc-probability 0`), and plumb has no flags to turn them on.

mod candidates;
mod dist;
mod logit_bias;
mod min_p;
mod penalties;
mod rng;
mod temperature;
mod top_k;
mod top_n_sigma;
mod top_p;
mod typical;

use std::fmt::Write;

pub use candidates::{Candidate, Candidates};
pub use dist::draw;
pub use logit_bias::logit_bias;
pub use min_p::min_p;
pub use penalties::Penalties;
pub use rng::{random_seed, Mt19937};
pub use temperature::temperature;
pub use top_k::top_k;
pub use top_n_sigma::top_n_sigma;
pub use top_p::top_p;
pub use typical::typical;

/// Why a token could not be sampled, or a sampler configuration is unusable.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SamplingError {
    #[error("the model gave a logit of {value} for token {token}: the forward pass is broken")]
    NonFiniteLogit { token: u32, value: f32 },
    #[error("{got} logits for a vocabulary of {expected} tokens")]
    VocabularySize { expected: usize, got: usize },
    #[error("no token is left to sample: the samplers and logit biases ruled out every one")]
    NoCandidates,
    #[error("this sampler chain needs every logit, not only the largest")]
    NeedsAllLogits,
    #[error("{got} of the largest logits, where the chain keeps the top {needed}")]
    TooFewTopLogits { needed: usize, got: usize },
    #[error("unknown sampler {name:?}; known: {}", known_names())]
    UnknownSampler { name: String },
    #[error("unknown sampler letter {letter:?}; known: {}", KNOWN_LETTERS)]
    UnknownSamplerLetter { letter: char },
    #[error("the {name} sampler is not implemented in plumb")]
    UnsupportedSampler { name: String },
    #[error("logit bias for token {token}: outside the vocabulary of {n_vocab}")]
    BiasToken { token: u32, n_vocab: usize },
    #[error("{name} = {value}: {reason}")]
    Parameter {
        name: &'static str,
        value: f32,
        reason: &'static str,
    },
}

/// A configurable step of the chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SamplerKind {
    Penalties,
    /// Accepted, does nothing (see the module documentation).
    Dry,
    TopNSigma,
    TopK,
    TypicalP,
    TopP,
    MinP,
    /// Accepted, does nothing (see the module documentation).
    Xtc,
    Temperature,
}

/// llama.cpp's canonical names, and the other spellings its `--samplers` accepts.
const NAMES: &[(&str, SamplerKind)] = &[
    ("penalties", SamplerKind::Penalties),
    ("dry", SamplerKind::Dry),
    ("top_n_sigma", SamplerKind::TopNSigma),
    ("top_k", SamplerKind::TopK),
    ("typ_p", SamplerKind::TypicalP),
    ("top_p", SamplerKind::TopP),
    ("min_p", SamplerKind::MinP),
    ("xtc", SamplerKind::Xtc),
    ("temperature", SamplerKind::Temperature),
    ("top-k", SamplerKind::TopK),
    ("top-p", SamplerKind::TopP),
    ("top-n-sigma", SamplerKind::TopNSigma),
    ("nucleus", SamplerKind::TopP),
    ("typical-p", SamplerKind::TypicalP),
    ("typical", SamplerKind::TypicalP),
    ("typ-p", SamplerKind::TypicalP),
    ("typ", SamplerKind::TypicalP),
    ("min-p", SamplerKind::MinP),
    ("temp", SamplerKind::Temperature),
];

/// The canonical names, for messages.
fn known_names() -> String {
    SamplerKind::DEFAULT_ORDER.map(SamplerKind::name).join(", ")
}

/// llama.cpp's sampler names that plumb does not have.
const UNSUPPORTED: &[&str] = &["infill", "adaptive_p", "adaptive-p"];

/// The letters of llama.cpp's `--sampling-seq`, in [`SamplerKind::DEFAULT_ORDER`] order.
const KNOWN_LETTERS: &str = "edskypmxt";

impl SamplerKind {
    /// llama.cpp's default order.
    pub const DEFAULT_ORDER: [SamplerKind; 9] = [
        SamplerKind::Penalties,
        SamplerKind::Dry,
        SamplerKind::TopNSigma,
        SamplerKind::TopK,
        SamplerKind::TypicalP,
        SamplerKind::TopP,
        SamplerKind::MinP,
        SamplerKind::Xtc,
        SamplerKind::Temperature,
    ];

    /// The canonical name, as llama.cpp writes it.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(_, kind)| *kind == self)
            .map(|(name, _)| *name)
            .unwrap_or("?")
    }

    /// A sampler by any name llama.cpp's `--samplers` accepts.
    pub fn from_name(name: &str) -> Result<SamplerKind, SamplingError> {
        if let Some((_, kind)) = NAMES.iter().find(|(n, _)| *n == name) {
            return Ok(*kind);
        }
        if UNSUPPORTED.contains(&name) {
            return Err(SamplingError::UnsupportedSampler {
                name: name.to_owned(),
            });
        }
        Err(SamplingError::UnknownSampler {
            name: name.to_owned(),
        })
    }

    /// A sampler by its `--sampling-seq` letter.
    pub fn from_letter(letter: char) -> Result<SamplerKind, SamplingError> {
        Ok(match letter {
            'e' => SamplerKind::Penalties,
            'd' => SamplerKind::Dry,
            's' => SamplerKind::TopNSigma,
            'k' => SamplerKind::TopK,
            'y' => SamplerKind::TypicalP,
            'p' => SamplerKind::TopP,
            'm' => SamplerKind::MinP,
            'x' => SamplerKind::Xtc,
            't' => SamplerKind::Temperature,
            'i' | 'a' => {
                return Err(SamplingError::UnsupportedSampler {
                    name: letter.to_string(),
                })
            }
            _ => return Err(SamplingError::UnknownSamplerLetter { letter }),
        })
    }
}

/// Parses a `--samplers` list: names separated by `;`, as llama.cpp takes them (`,` and
/// spaces are accepted as separators too).
pub fn parse_samplers(list: &str) -> Result<Vec<SamplerKind>, SamplingError> {
    list.split([';', ',', ' '])
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(SamplerKind::from_name)
        .collect()
}

/// Parses a `--sampling-seq` string: one letter per sampler (`edskypmxt` is the default).
pub fn parse_sampler_letters(letters: &str) -> Result<Vec<SamplerKind>, SamplingError> {
    letters.chars().map(SamplerKind::from_letter).collect()
}

/// Everything the chain needs, with llama.cpp's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingConfig {
    /// 0 (or less) is greedy decoding.
    pub temperature: f32,
    /// 0 turns top-k off.
    pub top_k: usize,
    /// 1 turns top-p off.
    pub top_p: f32,
    /// 0 turns min-p off.
    pub min_p: f32,
    /// 1 turns typical sampling off.
    pub typical_p: f32,
    /// 0 or less turns top-n-sigma off.
    pub top_n_sigma: f32,
    /// Tokens the penalties look back over (the prompt included); 0 turns them off.
    pub repeat_last_n: usize,
    /// 1 turns the repetition penalty off.
    pub repeat_penalty: f32,
    pub frequency_penalty: f32,
    pub presence_penalty: f32,
    /// Added to the logits before the chain: `(token, bias)`.
    pub logit_bias: Vec<(u32, f32)>,
    /// The configurable samplers, in order.
    pub samplers: Vec<SamplerKind>,
    pub seed: u32,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        SamplingConfig {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            typical_p: 1.0,
            top_n_sigma: -1.0,
            repeat_last_n: 64,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            samplers: SamplerKind::DEFAULT_ORDER.to_vec(),
            seed: 0,
        }
    }
}

impl SamplingConfig {
    /// Greedy decoding: always the most likely token.
    pub fn greedy() -> Self {
        SamplingConfig {
            temperature: 0.0,
            ..SamplingConfig::default()
        }
    }

    fn check(&self, n_vocab: usize) -> Result<(), SamplingError> {
        let finite = [
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("min_p", self.min_p),
            ("typical_p", self.typical_p),
            ("top_n_sigma", self.top_n_sigma),
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ];
        for (name, value) in finite {
            if !value.is_finite() {
                return Err(SamplingError::Parameter {
                    name,
                    value,
                    reason: "must be a finite number",
                });
            }
        }
        if !(self.repeat_penalty.is_finite() && self.repeat_penalty > 0.0) {
            return Err(SamplingError::Parameter {
                name: "repeat_penalty",
                value: self.repeat_penalty,
                reason: "must be positive (1 turns it off)",
            });
        }
        for &(token, bias) in &self.logit_bias {
            if token as usize >= n_vocab {
                return Err(SamplingError::BiasToken { token, n_vocab });
            }
            if bias.is_nan() || bias == f32::INFINITY {
                return Err(SamplingError::Parameter {
                    name: "logit_bias",
                    value: bias,
                    reason: "must be a number or -inf",
                });
            }
        }
        Ok(())
    }

    /// The chain as llama.cpp prints it: `logits -> top-k 40 -> … -> dist`.
    pub fn describe(&self) -> String {
        let mut out = String::from("logits");
        if !self.logit_bias.is_empty() {
            out.push_str(" -> logit-bias");
        }
        for kind in &self.samplers {
            let _ = match kind {
                SamplerKind::Penalties => write!(
                    out,
                    " -> penalties (last {}, repeat {:.2}, frequency {:.2}, presence {:.2})",
                    self.repeat_last_n,
                    self.repeat_penalty,
                    self.frequency_penalty,
                    self.presence_penalty
                ),
                SamplerKind::Dry | SamplerKind::Xtc => Ok(()),
                SamplerKind::TopNSigma => write!(out, " -> top-n-sigma {:.2}", self.top_n_sigma),
                SamplerKind::TopK => write!(out, " -> top-k {}", self.top_k),
                SamplerKind::TypicalP => write!(out, " -> typical {:.2}", self.typical_p),
                SamplerKind::TopP => write!(out, " -> top-p {:.2}", self.top_p),
                SamplerKind::MinP => write!(out, " -> min-p {:.2}", self.min_p),
                SamplerKind::Temperature => write!(out, " -> temp {:.2}", self.temperature),
            };
        }
        out.push_str(" -> dist");
        out
    }
}

/// The chain, with its state: the penalties' history and the random number generator.
#[derive(Debug, Clone)]
pub struct Sampler {
    config: SamplingConfig,
    n_vocab: usize,
    penalties: Penalties,
    rng: Mt19937,
    candidates: Candidates,
}

impl Sampler {
    /// A chain for a vocabulary of `n_vocab` tokens. Fails on parameters that cannot work
    /// (a NaN, a bias for a token outside the vocabulary).
    pub fn new(config: SamplingConfig, n_vocab: usize) -> Result<Sampler, SamplingError> {
        config.check(n_vocab)?;
        Ok(Sampler {
            penalties: Penalties::new(
                config.repeat_last_n,
                config.repeat_penalty,
                config.frequency_penalty,
                config.presence_penalty,
            ),
            rng: Mt19937::new(config.seed),
            n_vocab,
            config,
            candidates: Candidates::default(),
        })
    }

    /// Starts a new text: the penalties' history becomes `prompt`. The random sequence goes
    /// on.
    pub fn start(&mut self, prompt: &[u32]) {
        self.penalties.reset();
        for &token in prompt {
            self.penalties.accept(token);
        }
    }

    /// Records a token chosen (and kept) as part of the text, for the penalties.
    pub fn accept(&mut self, token: u32) {
        self.penalties.accept(token);
    }

    /// Runs the chain on one row of logits and draws a token. Does not [`Sampler::accept`]
    /// it.
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32, SamplingError> {
        if logits.len() != self.n_vocab {
            return Err(SamplingError::VocabularySize {
                expected: self.n_vocab,
                got: logits.len(),
            });
        }
        let leading_top_k = self.leading_top_k();
        match leading_top_k {
            Some(k) => self.candidates.fill_top(logits, k)?,
            None => self.candidates.fill(logits)?,
        }
        self.run_chain()
    }

    /// How many of a row's largest logits this chain needs, when it needs no others: the
    /// `k` of a chain whose first step that does anything is top-k. A backend can then find
    /// them where it computed the logits ([`plumb_model::Model::forward_top_k`]).
    pub fn needs_only_top(&self) -> Option<usize> {
        self.leading_top_k()
    }

    /// [`Sampler::sample`] from a row's largest logits, largest first (ties: lower id first),
    /// at least [`Sampler::needs_only_top`] of them; what it gives for the whole row.
    pub fn sample_top(&mut self, top: &[(u32, f32)]) -> Result<u32, SamplingError> {
        let Some(k) = self.leading_top_k() else {
            return Err(SamplingError::NeedsAllLogits);
        };
        if top.len() < k.min(self.n_vocab) {
            return Err(SamplingError::TooFewTopLogits {
                needed: k,
                got: top.len(),
            });
        }
        self.candidates.fill_sorted(&top[..k.min(top.len())])?;
        self.run_chain()
    }

    /// Logit bias, the configured samplers, then the draw, over the candidates as filled.
    fn run_chain(&mut self) -> Result<u32, SamplingError> {
        let c = &mut self.candidates;
        logit_bias(c, &self.config.logit_bias);
        for kind in &self.config.samplers {
            match kind {
                SamplerKind::Penalties => self.penalties.apply(c),
                SamplerKind::Dry | SamplerKind::Xtc => {}
                SamplerKind::TopNSigma => top_n_sigma(c, self.config.top_n_sigma),
                SamplerKind::TopK => top_k(c, self.config.top_k),
                SamplerKind::TypicalP => typical(c, self.config.typical_p),
                SamplerKind::TopP => top_p(c, self.config.top_p),
                SamplerKind::MinP => min_p(c, self.config.min_p),
                SamplerKind::Temperature => temperature(c, self.config.temperature),
            }
        }
        let chosen = draw(c, &mut self.rng)?;
        Ok(c.as_slice()[chosen].id)
    }

    /// `k` when the chain's first step that does anything is top-k (with no logit bias
    /// before it), so that the candidates can start as the top `k` of the logits.
    fn leading_top_k(&self) -> Option<usize> {
        if !self.config.logit_bias.is_empty() {
            return None;
        }
        for kind in &self.config.samplers {
            match kind {
                SamplerKind::Dry | SamplerKind::Xtc => {}
                SamplerKind::Penalties if !self.penalties.is_active() => {}
                SamplerKind::TopNSigma if self.config.top_n_sigma <= 0.0 => {}
                SamplerKind::TopK if self.config.top_k > 0 && self.config.top_k < self.n_vocab => {
                    return Some(self.config.top_k)
                }
                _ => return None,
            }
        }
        None
    }

    /// The candidates the last [`Sampler::sample`] drew from, with their probabilities.
    pub fn last_candidates(&self) -> &Candidates {
        &self.candidates
    }
}
