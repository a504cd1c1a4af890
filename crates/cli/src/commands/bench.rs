//! `plumb bench`: prompt-processing and generation speed, measured and printed the way
//! llama-bench does it, so the two can be compared line by line.
//!
//! `ppN` evaluates N prompt tokens from an empty context in batches of `--batch-size`, with
//! logits for the last one only; `tgN` generates N tokens one forward pass at a time from an
//! empty context. Each test runs once to warm up, then `--repetitions` times; the rate is the
//! mean of the repetitions' tokens per second, ± their standard deviation. The tokens are
//! arbitrary but fixed, as llama-bench's are, since speed does not depend on them.
//!
//! `--n-depth D` (llama-bench's `-d`) first fills the context with D tokens, untimed, so that
//! `tgN @ dD` measures generation with D positions already cached. `--parallel S` instead
//! measures what llama-batched-bench does: S sequences each take an N-token prompt (`ppN ×S`,
//! all prompts together) and then generate M tokens in S-token passes, one token of each
//! sequence per pass (`tgM ×S`); the rates are aggregate tokens per second.

use std::time::Instant;

use anyhow::Context;
use plumb_backend_cpu::KvCacheType;
use plumb_gguf::GgufFile;
use plumb_model::{Backend, Batch, KvConfig, LogitsFor, Model};
use serde_json::json;

use crate::backend_choice::{BackendArgs, BackendChoice, WithBackend};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name (pulled on first use)
    #[arg(short, long)]
    model: String,
    /// Prompt lengths to test, comma-separated (0 skips prompt processing)
    #[arg(
        short = 'p',
        long = "n-prompt",
        value_delimiter = ',',
        default_value = "512"
    )]
    n_prompt: Vec<usize>,
    /// Generation lengths to test, comma-separated (0 skips generation)
    #[arg(
        short = 'n',
        long = "n-gen",
        value_delimiter = ',',
        default_value = "128"
    )]
    n_gen: Vec<usize>,
    /// Context depths: tokens already in the cache before each test, comma-separated
    #[arg(
        short = 'd',
        long = "n-depth",
        value_delimiter = ',',
        default_value = "0"
    )]
    n_depth: Vec<usize>,
    /// Sequence counts for batched tests (as llama-batched-bench), comma-separated: each
    /// count S runs S sequences of a -p prompt then -n generated tokens
    #[arg(long, value_delimiter = ',')]
    parallel: Vec<usize>,
    /// Repetitions of each test
    #[arg(short = 'r', long, default_value_t = 5)]
    repetitions: usize,
    /// Thread counts to test, comma-separated [default: all cores]
    #[arg(short = 't', long, value_delimiter = ',')]
    threads: Vec<usize>,
    /// The backend to measure [default: cuda where a CUDA device is present, else cpu]
    #[arg(long, value_enum)]
    backend: Option<BackendChoice>,
    /// KV cache type for the cpu backend: f32, f16 or q8_0 [default: f16]
    #[arg(long, value_name = "TYPE")]
    cache_type: Option<KvCacheType>,
    /// Prompt tokens per forward pass
    #[arg(short = 'b', long = "batch-size", default_value_t = 512)]
    batch_size: usize,
    /// Print JSON instead of a table
    #[arg(long)]
    json: bool,
}

/// One measured test.
struct Sample {
    test: String,
    n_prompt: usize,
    n_gen: usize,
    threads: usize,
    rates: Vec<f64>,
}

impl Sample {
    fn mean(&self) -> f64 {
        self.rates.iter().sum::<f64>() / self.rates.len() as f64
    }

    fn stddev(&self) -> f64 {
        if self.rates.len() < 2 {
            return 0.0;
        }
        let mean = self.mean();
        let var = self.rates.iter().map(|r| (r - mean).powi(2)).sum::<f64>()
            / (self.rates.len() - 1) as f64;
        var.sqrt()
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.repetitions == 0 {
        anyhow::bail!("--repetitions must be at least 1");
    }
    if args.batch_size == 0 {
        anyhow::bail!("--batch-size must be at least 1");
    }
    if args.parallel.contains(&0) {
        anyhow::bail!("--parallel counts must be at least 1");
    }
    if !args.parallel.is_empty() && args.n_depth.iter().any(|&d| d > 0) {
        anyhow::bail!("--n-depth and --parallel cannot be combined");
    }
    let path = plumb_hub::resolve_model(&args.model)?;
    let file = GgufFile::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let description = ModelDescription::of(&file);
    let choice = BackendChoice::or_default(args.backend);
    let thread_counts = if args.threads.is_empty() {
        vec![BackendArgs::with_backend(choice).threads()]
    } else {
        args.threads.clone()
    };

    let mut samples = Vec::new();
    for &threads in &thread_counts {
        let backend = BackendArgs {
            backend: Some(choice),
            threads: Some(threads),
            cache_type: args.cache_type,
        };
        samples.extend(backend.dispatch(Measure {
            path: &path,
            args: &args,
            threads,
        })?);
    }
    let peak_rss = peak_rss_bytes();
    let backend_label = match (choice, args.cache_type) {
        (BackendChoice::Cpu, ty) => format!(
            "cpu ({}, {})",
            ty.unwrap_or(KvCacheType::F16).name(),
            plumb_ggml::Isa::detect().name()
        ),
        (choice, _) => choice.name().to_owned(),
    };

    if args.json {
        let rows: Vec<_> = samples
            .iter()
            .map(|s| {
                json!({
                    "model_filename": path.display().to_string(),
                    "model_type": description.label,
                    "model_size": description.size_bytes,
                    "model_n_params": description.n_params,
                    "backend": backend_label,
                    "n_threads": s.threads,
                    "n_prompt": s.n_prompt,
                    "n_gen": s.n_gen,
                    "test": s.test,
                    "avg_ts": s.mean(),
                    "stddev_ts": s.stddev(),
                    "samples_ts": s.rates,
                    "peak_rss_bytes": peak_rss,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    println!(
        "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>8} | {:>20} |",
        "model", "size", "params", "backend", "threads", "test", "t/s"
    );
    println!(
        "| {:-<30} | {:->10} | {:->10} | {:-<10} | {:->7} | {:->8} | {:->20} |",
        "", "", "", "", "", "", ""
    );
    for s in &samples {
        println!(
            "| {:<30} | {:>10} | {:>10} | {:<10} | {:>7} | {:>8} | {:>20} |",
            description.label,
            format!(
                "{:.2} MiB",
                description.size_bytes as f64 / (1 << 20) as f64
            ),
            format_params(description.n_params),
            backend_label,
            s.threads,
            s.test,
            format!("{:.2} ± {:.2}", s.mean(), s.stddev()),
        );
    }
    match peak_rss {
        Some(bytes) => println!("\npeak RSS: {:.1} MiB", bytes as f64 / (1 << 20) as f64),
        None => println!("\npeak RSS: not available on this system"),
    }
    Ok(())
}

struct Measure<'a> {
    path: &'a std::path::Path,
    args: &'a Args,
    threads: usize,
}

impl WithBackend for Measure<'_> {
    type Output = Vec<Sample>;

    fn run<B: Backend>(self, backend: B) -> anyhow::Result<Vec<Sample>> {
        let args = self.args;
        let model = Model::load(self.path, backend)
            .with_context(|| format!("loading {}", self.path.display()))?;
        if args.parallel.is_empty() {
            single_sequence(&model, args, self.threads)
        } else {
            parallel_sequences(&model, args, self.threads)
        }
    }
}

/// Fixed, arbitrary tokens spread over the vocabulary.
fn token<B: Backend>(model: &Model<B>, i: usize) -> u32 {
    let n_vocab = model.hparams().n_vocab as u64;
    ((i as u64 * 2_654_435_761) % n_vocab) as u32
}

/// llama-bench's tests: ppN and tgN of one sequence, at each depth.
fn single_sequence<B: Backend>(
    model: &Model<B>,
    args: &Args,
    threads: usize,
) -> anyhow::Result<Vec<Sample>> {
    let longest = args
        .n_prompt
        .iter()
        .chain(&args.n_gen)
        .copied()
        .max()
        .unwrap_or(0);
    let deepest = args.n_depth.iter().copied().max().unwrap_or(0);
    let mut cache = model.new_kv_cache(KvConfig::new(
        (deepest + longest).max(1),
        1,
        args.batch_size.min(deepest.max(longest)).max(1),
    ))?;
    let mut samples = Vec::new();
    for &depth in &args.n_depth {
        let suffix = if depth > 0 {
            format!(" @ d{depth}")
        } else {
            String::new()
        };
        // The context before each timed run: `depth` tokens, untimed.
        let fill = |cache: &mut plumb_model::KvCache<B>| -> anyhow::Result<()> {
            cache.clear_seq(0);
            if depth > 0 {
                let tokens: Vec<u32> = (0..depth).map(|i| token(model, i)).collect();
                model.eval(cache, 0, &tokens, LogitsFor::Last)?;
            }
            Ok(())
        };
        for &n in args.n_prompt.iter().filter(|&&n| n > 0) {
            let tokens: Vec<u32> = (0..n).map(|i| token(model, depth + i)).collect();
            let rates = repeat(args.repetitions, || {
                fill(&mut cache)?;
                let start = Instant::now();
                model.eval(&mut cache, 0, &tokens, LogitsFor::Last)?;
                Ok(n as f64 / start.elapsed().as_secs_f64())
            })?;
            samples.push(Sample {
                test: format!("pp{n}{suffix}"),
                n_prompt: n,
                n_gen: 0,
                threads,
                rates,
            });
        }
        for &n in args.n_gen.iter().filter(|&&n| n > 0) {
            let rates = repeat(args.repetitions, || {
                fill(&mut cache)?;
                let start = Instant::now();
                for i in 0..n {
                    model.eval(&mut cache, 0, &[token(model, depth + i)], LogitsFor::Last)?;
                }
                Ok(n as f64 / start.elapsed().as_secs_f64())
            })?;
            samples.push(Sample {
                test: format!("tg{n}{suffix}"),
                n_prompt: 0,
                n_gen: n,
                threads,
                rates,
            });
        }
    }
    Ok(samples)
}

/// llama-batched-bench's tests: for each sequence count S and each (prompt, generation)
/// length pair, S prompts in passes of at most `--batch-size` tokens, then the generation in
/// passes of one token per sequence, each pass's logits for every sequence.
fn parallel_sequences<B: Backend>(
    model: &Model<B>,
    args: &Args,
    threads: usize,
) -> anyhow::Result<Vec<Sample>> {
    let most = args.parallel.iter().copied().max().unwrap_or(1);
    let longest_prompt = args.n_prompt.iter().copied().max().unwrap_or(0);
    let longest_gen = args.n_gen.iter().copied().max().unwrap_or(0);
    let mut cache = model.new_kv_cache(KvConfig::new(
        (longest_prompt + longest_gen).max(1),
        most,
        args.batch_size.max(most),
    ))?;
    let mut samples = Vec::new();
    for &seqs in &args.parallel {
        for &n_prompt in &args.n_prompt {
            for &n_gen in &args.n_gen {
                let (mut pp_rates, mut tg_rates) = (Vec::new(), Vec::new());
                for rep in 0..=args.repetitions {
                    for seq in 0..seqs {
                        cache.clear_seq(seq);
                    }
                    // Every sequence's prompt, sequence after sequence, in full passes.
                    let prompt: Vec<(usize, usize)> = (0..seqs)
                        .flat_map(|seq| (0..n_prompt).map(move |pos| (seq, pos)))
                        .collect();
                    let start = Instant::now();
                    for pass in prompt.chunks(args.batch_size.max(seqs)) {
                        let mut batch = Batch::new();
                        for &(seq, pos) in pass {
                            let last = pos + 1 == n_prompt;
                            batch.push(token(model, seq * n_prompt + pos), seq, pos, last);
                        }
                        model.forward(&batch, &mut cache)?;
                    }
                    let pp = (seqs * n_prompt) as f64 / start.elapsed().as_secs_f64();
                    let start = Instant::now();
                    for i in 0..n_gen {
                        let mut batch = Batch::new();
                        for seq in 0..seqs {
                            batch.push(token(model, seq + i), seq, n_prompt + i, true);
                        }
                        model.forward(&batch, &mut cache)?;
                    }
                    let tg = (seqs * n_gen) as f64 / start.elapsed().as_secs_f64();
                    // Repetition 0 warms up.
                    if rep > 0 {
                        pp_rates.push(pp);
                        tg_rates.push(tg);
                    }
                }
                for (test, n, rates) in [("pp", n_prompt, pp_rates), ("tg", n_gen, tg_rates)] {
                    if n > 0 {
                        samples.push(Sample {
                            test: format!("{test}{n} ×{seqs}"),
                            n_prompt: if test == "pp" { n } else { 0 },
                            n_gen: if test == "tg" { n } else { 0 },
                            threads,
                            rates,
                        });
                    }
                }
            }
        }
    }
    Ok(samples)
}

/// One warm-up run, then `n` measured ones.
fn repeat(n: usize, mut run: impl FnMut() -> anyhow::Result<f64>) -> anyhow::Result<Vec<f64>> {
    run()?;
    (0..n).map(|_| run()).collect()
}

/// What the table says about the model, as llama-bench's columns do.
struct ModelDescription {
    label: String,
    size_bytes: u64,
    n_params: u64,
}

impl ModelDescription {
    fn of(file: &GgufFile) -> Self {
        let size_bytes = file.tensors().iter().map(|t| t.size).sum();
        let n_params = file.tensors().iter().map(|t| t.n_elements()).sum();
        let md = file.metadata();
        let arch = md.get_str("general.architecture").unwrap_or("?");
        let file_type = md
            .get_u32("general.file_type")
            .ok()
            .map_or("?".to_owned(), file_type_name);
        ModelDescription {
            label: format!("{arch} {} {file_type}", format_params(n_params)),
            size_bytes,
            n_params,
        }
    }
}

/// `general.file_type` as llama.cpp names it.
fn file_type_name(ftype: u32) -> String {
    match ftype {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K - Medium",
        11 => "Q3_K - Small",
        12 => "Q3_K - Medium",
        13 => "Q3_K - Large",
        14 => "Q4_K - Small",
        15 => "Q4_K - Medium",
        16 => "Q5_K - Small",
        17 => "Q5_K - Medium",
        18 => "Q6_K",
        25 => "IQ4_NL",
        30 => "IQ4_XS",
        32 => "BF16",
        other => return format!("file type {other}"),
    }
    .to_owned()
}

fn format_params(n: u64) -> String {
    match n {
        n if n >= 1_000_000_000 => format!("{:.2} B", n as f64 / 1e9),
        n if n >= 1_000_000 => format!("{:.2} M", n as f64 / 1e6),
        n => format!("{n}"),
    }
}

/// The process's peak resident set size (Linux's `VmHWM`).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
