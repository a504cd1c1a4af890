//! The flags `plumb run` and `plumb chat` share (model, backend, context, sampler chain, stop
//! strings), with llama.cpp's names and defaults, and what they turn into: the context size,
//! the sampler configuration, the generation limits.

use std::time::Instant;

use anyhow::{bail, Context};
use plumb_engine::sampling::{
    parse_sampler_letters, parse_samplers, random_seed, SamplerKind, SamplingConfig,
};
use plumb_engine::GenerateOptions;
use plumb_model::{Backend, HyperParams, Model};
use plumb_tokenizer::Tokenizer;

use crate::backend_choice::BackendArgs;

/// The context used when `--ctx-size` is not given, if the model was trained for at least
/// this much (llama.cpp's default too).
const DEFAULT_CTX: usize = 4096;

/// The share of the available memory the default context's KV cache may take.
const KV_MEMORY_SHARE: u64 = 4;

#[derive(clap::Args, Debug, Clone)]
pub struct GenerationArgs {
    /// GGUF file, or a catalog model name (pulled on first use)
    #[arg(short, long)]
    pub model: String,
    /// Context size in tokens, prompt and generation together [default: the model's training
    /// context, at most 4096, and at most what a quarter of the available memory holds as an
    /// f32 KV cache]
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
    /// Prompt tokens evaluated per forward pass
    #[arg(short = 'b', long = "batch-size", default_value_t = 256)]
    pub batch_size: usize,
    /// Stop generating when this text appears; it is not printed. Repeatable; \n, \t, \r,
    /// \\ and \" are understood
    #[arg(long, value_name = "TEXT")]
    pub stop: Vec<String>,
    #[command(flatten)]
    pub backend: BackendArgs,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// The sampler chain's flags, as llama.cpp names them.
#[derive(clap::Args, Debug, Clone)]
#[command(next_help_heading = "Sampling")]
pub struct SamplingArgs {
    /// Temperature; 0 is greedy decoding
    #[arg(long, default_value_t = 0.8)]
    pub temp: f32,
    /// Keep the K most likely tokens (0 = off)
    #[arg(long, default_value_t = 40, allow_negative_numbers = true)]
    pub top_k: i32,
    /// Keep the most likely tokens up to this total probability (1.0 = off)
    #[arg(long, default_value_t = 0.95)]
    pub top_p: f32,
    /// Drop tokens less likely than this times the most likely one (0.0 = off)
    #[arg(long, default_value_t = 0.05)]
    pub min_p: f32,
    /// Locally typical sampling, parameter p (1.0 = off)
    #[arg(long = "typical", default_value_t = 1.0)]
    pub typical: f32,
    /// Keep tokens within N standard deviations of the top logit (-1 = off)
    #[arg(long, default_value_t = -1.0, allow_negative_numbers = true)]
    pub top_n_sigma: f32,
    /// Penalize repeating any of the last tokens (1.0 = off)
    #[arg(long, default_value_t = 1.0)]
    pub repeat_penalty: f32,
    /// Tokens the penalties look back over, the prompt included (0 = off, -1 = the context
    /// size)
    #[arg(long, default_value_t = 64, allow_negative_numbers = true)]
    pub repeat_last_n: i64,
    /// Subtracted once from the logit of every token seen in the last tokens (0.0 = off)
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub presence_penalty: f32,
    /// Subtracted from a token's logit for each time it was seen (0.0 = off)
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    pub frequency_penalty: f32,
    /// Random seed; the same seed and inputs give the same text [default: random, printed]
    #[arg(short = 's', long, allow_negative_numbers = true)]
    pub seed: Option<i64>,
    /// Add BIAS to a token's logit, e.g. `15043+1`, `15043-1.5`, `2-inf` (bans token 2);
    /// repeatable
    #[arg(
        short = 'l',
        long = "logit-bias",
        value_name = "TOKEN(+|-)BIAS",
        value_parser = parse_logit_bias,
        allow_hyphen_values = true
    )]
    pub logit_bias: Vec<(u32, f32)>,
    /// The samplers in order, separated by ';' [default:
    /// penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature; dry and xtc are
    /// accepted and do nothing]
    #[arg(long, value_name = "SAMPLERS", value_parser = parse_sampler_order)]
    pub samplers: Option<SamplerOrder>,
    /// The samplers in order, one letter each (e=penalties d=dry s=top_n_sigma k=top_k
    /// y=typ_p p=top_p m=min_p x=xtc t=temperature) [default: edskypmxt]
    #[arg(
        long = "sampling-seq",
        alias = "sampler-seq",
        value_name = "LETTERS",
        value_parser = parse_sampler_seq,
        conflicts_with = "samplers"
    )]
    pub sampling_seq: Option<SamplerOrder>,
}

/// A sampler order given on the command line.
#[derive(Debug, Clone)]
pub struct SamplerOrder(Vec<SamplerKind>);

fn parse_sampler_order(list: &str) -> Result<SamplerOrder, String> {
    parse_samplers(list)
        .map(SamplerOrder)
        .map_err(|e| e.to_string())
}

fn parse_sampler_seq(letters: &str) -> Result<SamplerOrder, String> {
    parse_sampler_letters(letters)
        .map(SamplerOrder)
        .map_err(|e| e.to_string())
}

/// `TOKEN+BIAS` or `TOKEN-BIAS`, as llama.cpp's `--logit-bias`.
fn parse_logit_bias(text: &str) -> Result<(u32, f32), String> {
    let bad = || format!("{text:?} is not TOKEN+BIAS or TOKEN-BIAS (e.g. 15043+1, 15043-inf)");
    let sign_at = text.find(['+', '-']).ok_or_else(bad)?;
    let token: u32 = text[..sign_at].trim().parse().map_err(|_| bad())?;
    let magnitude: f32 = text[sign_at + 1..].trim().parse().map_err(|_| bad())?;
    let bias = if text[sign_at..].starts_with('-') {
        -magnitude
    } else {
        magnitude
    };
    Ok((token, bias))
}

impl SamplingArgs {
    /// The sampler configuration for a model of `n_vocab` tokens in a context of `n_ctx`;
    /// a missing seed becomes a random one.
    pub fn config(&self, n_vocab: usize, n_ctx: usize) -> anyhow::Result<SamplingConfig> {
        let seed = seed_flag(self.seed)?.unwrap_or_else(random_seed);
        let repeat_last_n = match self.repeat_last_n {
            -1 => n_ctx,
            n => usize::try_from(n).map_err(|_| {
                anyhow::anyhow!("--repeat-last-n {n}: use a count, 0 (off) or -1 (the context)")
            })?,
        };
        let samplers = self
            .samplers
            .as_ref()
            .or(self.sampling_seq.as_ref())
            .map_or_else(|| SamplerKind::DEFAULT_ORDER.to_vec(), |o| o.0.clone());
        let config = SamplingConfig {
            temperature: self.temp,
            top_k: usize::try_from(self.top_k).unwrap_or(0),
            top_p: self.top_p,
            min_p: self.min_p,
            typical_p: self.typical,
            top_n_sigma: self.top_n_sigma,
            repeat_last_n,
            repeat_penalty: self.repeat_penalty,
            frequency_penalty: self.frequency_penalty,
            presence_penalty: self.presence_penalty,
            logit_bias: self.logit_bias.clone(),
            samplers,
            seed,
        };
        // The sampler checks the values; building one here reports bad flags before any
        // generation starts.
        plumb_engine::sampling::Sampler::new(config.clone(), n_vocab).context("sampling flags")?;
        Ok(config)
    }
}

/// llama.cpp's `--seed`: -1 or 0xFFFFFFFF (or none) ask for a random seed, `None` here.
pub fn seed_flag(flag: Option<i64>) -> anyhow::Result<Option<u32>> {
    match flag {
        None | Some(-1) | Some(0xFFFF_FFFF) => Ok(None),
        Some(seed) => u32::try_from(seed)
            .map(Some)
            .map_err(|_| anyhow::anyhow!("--seed {seed}: use 0 to 4294967294, or -1")),
    }
}

impl GenerationArgs {
    /// The context size: `--ctx-size`, else the default described in its help.
    pub fn context_size(&self, hparams: &HyperParams) -> anyhow::Result<usize> {
        context_size(self.ctx_size, hparams)
    }

    /// The stop strings, escapes processed.
    pub fn stop_strings(&self) -> anyhow::Result<Vec<String>> {
        self.stop
            .iter()
            .map(|s| {
                let text = unescape(s);
                if text.is_empty() {
                    bail!("--stop needs a non-empty text");
                }
                Ok(text)
            })
            .collect()
    }

    /// Generation limits: at most `n_predict` tokens (negative: no limit) and the stop
    /// strings.
    pub fn options(&self, n_predict: i64) -> anyhow::Result<GenerateOptions> {
        Ok(GenerateOptions {
            max_tokens: usize::try_from(n_predict).ok(),
            stop: self.stop_strings()?,
        })
    }
}

/// `--ctx-size` (at least 2), else the model's training context, at most [`DEFAULT_CTX`] and
/// at most what [`kv_tokens_in_memory`] holds in f32, the largest cache type any backend uses.
pub fn context_size(flag: Option<usize>, hparams: &HyperParams) -> anyhow::Result<usize> {
    if let Some(n) = flag {
        if n < 2 {
            bail!("--ctx-size must be at least 2, got {n}");
        }
        return Ok(n);
    }
    let n_ctx = hparams.n_ctx_train.min(DEFAULT_CTX);
    match kv_tokens_in_memory(hparams, 4.0) {
        Some(fits) if fits < n_ctx => {
            tracing::info!(n_ctx = fits, "context capped by available memory");
            Ok(fits.max(2))
        }
        _ => Ok(n_ctx),
    }
}

/// Positions of KV cache, K and V of every layer at `element_bytes` a value, that a
/// [`KV_MEMORY_SHARE`]th of the available memory holds; `None` when that is unknown.
pub fn kv_tokens_in_memory(hparams: &HyperParams, element_bytes: f64) -> Option<usize> {
    let values = hparams.n_layer * hparams.n_head_kv * (hparams.head_dim_k + hparams.head_dim_v);
    let bytes_per_token = (values as f64 * element_bytes).max(1.0);
    let available = available_memory()?;
    Some(((available / KV_MEMORY_SHARE) as f64 / bytes_per_token) as usize)
}

/// `MemAvailable` from `/proc/meminfo`, in bytes, where there is one.
fn available_memory() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// llama.cpp's escapes: `\n`, `\t`, `\r`, `\\`, `\"`, `\'`; anything else stays as written.
fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(c @ ('\\' | '"' | '\'')) => out.push(c),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A model and its tokenizer, loaded on `backend`, and how long that took.
pub struct Loaded<B: Backend> {
    pub model: Model<B>,
    pub tokenizer: Tokenizer,
    pub load_time: std::time::Duration,
}

/// Resolves `--model` (pulling a catalog model on first use) and loads it.
pub fn load<B: Backend>(model: &str, backend: B) -> anyhow::Result<Loaded<B>> {
    let start = Instant::now();
    let path = plumb_hub::resolve_model(model)?;
    let model = Model::load(&path, backend)?;
    let tokenizer = Tokenizer::from_gguf(model.metadata())
        .with_context(|| format!("tokenizer of {}", path.display()))?;
    Ok(Loaded {
        model,
        tokenizer,
        load_time: start.elapsed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logit_bias_reads_llama_cpp_syntax() {
        assert_eq!(parse_logit_bias("15043+1"), Ok((15043, 1.0)));
        assert_eq!(parse_logit_bias("15043-1.5"), Ok((15043, -1.5)));
        assert_eq!(parse_logit_bias("2-inf"), Ok((2, f32::NEG_INFINITY)));
        for bad in ["15043", "+1", "x+1", "1+x", "-1+2"] {
            assert!(parse_logit_bias(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stop_strings_understand_escapes() {
        assert_eq!(unescape(r"a\nb\t\\c\q\"), "a\nb\t\\c\\q\\");
    }
}
