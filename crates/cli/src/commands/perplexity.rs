//! `plumb perplexity`: perplexity over a text file the way llama-perplexity computes it, and
//! the KL divergence against a saved base run (`--save-logits` / `--kl-base`).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Context};
use plumb_model::{Backend, KvConfig, LogitsFor, Model};
use plumb_tokenizer::Tokenizer;
use plumb_verify::{
    log_softmax, scored_positions, windows, KlStats, LogProbWriter, NllMean, SavedLogProbs,
};

use crate::backend_choice::{BackendArgs, WithBackend};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name
    #[arg(short, long)]
    model: String,
    /// The text to score
    #[arg(short = 'f', long = "file", value_name = "TEXT")]
    file: PathBuf,
    /// Tokens per window
    #[arg(short = 'c', long = "ctx", default_value_t = 512)]
    ctx: usize,
    /// Tokens per forward pass (default: the whole window)
    #[arg(short = 'b', long)]
    batch: Option<usize>,
    /// Score only the first N windows
    #[arg(long, value_name = "N")]
    chunks: Option<usize>,
    /// Save this run's distributions as the base for a later --kl-base run
    #[arg(long, value_name = "FILE", conflicts_with = "kl_base")]
    save_logits: Option<PathBuf>,
    /// Compare with the distributions saved by an earlier --save-logits run
    #[arg(long, value_name = "FILE")]
    kl_base: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.ctx < 4 {
        bail!("--ctx must be at least 4, got {}", args.ctx);
    }
    args.backend.clone().dispatch(Perplexity(args))
}

struct Perplexity(Args);

impl WithBackend for Perplexity {
    type Output = ();

    fn run<B: Backend>(self, backend: B) -> anyhow::Result<()> {
        score(self.0, backend)
    }
}

fn score<B: Backend>(args: Args, backend: B) -> anyhow::Result<()> {
    let path = plumb_hub::resolve_model(&args.model)?;
    let model =
        Model::load(&path, backend).with_context(|| format!("loading {}", path.display()))?;
    let tokenizer = Tokenizer::from_gguf(model.metadata())?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let tokens = tokenizer.encode(&text, true, false)?;
    let bos = tokenizer.add_bos().then(|| tokenizer.bos_id()).flatten();
    let mut windows = windows(&tokens, args.ctx, bos);
    if windows.is_empty() {
        bail!(
            "{} has {} tokens, fewer than one window of --ctx {}",
            args.file.display(),
            tokens.len(),
            args.ctx
        );
    }
    windows.truncate(args.chunks.unwrap_or(usize::MAX));
    let base = args
        .kl_base
        .as_ref()
        .map(|p| SavedLogProbs::read(p).with_context(|| format!("reading {}", p.display())))
        .transpose()?;
    if let Some(base) = &base {
        let scored = windows.len() * scored_positions(args.ctx).len();
        if base.n_ctx != args.ctx
            || base.tokens != tokens
            || base.n_vocab != model.hparams().n_vocab
            || base.n_rows < scored
        {
            bail!(
                "--kl-base {} was saved from other tokens or settings (its model {}, ctx {}, {} rows); use the same text, --ctx and tokenizer",
                args.kl_base.as_ref().expect("base").display(),
                base.model_file,
                base.n_ctx,
                base.n_rows
            );
        }
    }
    let n_vocab = model.hparams().n_vocab;
    let mut saved = args
        .save_logits
        .as_ref()
        .map(|_| LogProbWriter::new(n_vocab));
    let mut cache = model.new_kv_cache(KvConfig::new(
        args.ctx,
        1,
        args.batch.unwrap_or(args.ctx).clamp(1, args.ctx),
    ))?;

    eprintln!(
        "perplexity: {} tokens, {} windows of {}, scoring the logits at positions {}..={} of each",
        tokens.len(),
        windows.len(),
        args.ctx,
        scored_positions(args.ctx).start,
        scored_positions(args.ctx).end - 1
    );
    let start = Instant::now();
    let (mut nll, mut kl, mut base_nll) =
        (NllMean::default(), KlStats::default(), NllMean::default());
    let mut row = 0;
    for (c, window) in windows.iter().enumerate() {
        cache.clear_seq(0);
        let logits = model.eval(&mut cache, 0, window, LogitsFor::All)?;
        for pos in scored_positions(args.ctx) {
            let log_probs = log_softmax(logits.row(pos));
            let next = window[pos + 1] as usize;
            nll.add(-log_probs[next]);
            if let Some(base) = &base {
                let base_row = base.row(row);
                base_nll.add(-base_row[next]);
                kl.add(&base_row, &log_probs);
            }
            if let Some(saved) = &mut saved {
                saved.push(&log_probs);
            }
            row += 1;
        }
        eprint!("[{}]{:.4},", c + 1, nll.perplexity());
        let _ = std::io::stderr().flush();
    }
    eprintln!();
    println!(
        "Final estimate: PPL = {:.4} +/- {:.5} ({} tokens scored, {:.1} s)",
        nll.perplexity(),
        nll.perplexity_error(),
        nll.count(),
        start.elapsed().as_secs_f64()
    );
    if let (Some(saved), Some(out)) = (saved, &args.save_logits) {
        let model_file = path
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        saved
            .write(out, args.ctx, &model_file, &tokens)
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!("saved {row} rows of log-probabilities to {}", out.display());
    }
    if base.is_some() {
        println!(
            "PPL ratio (this / base): {:.6}  (base PPL {:.4})",
            nll.perplexity() / base_nll.perplexity(),
            base_nll.perplexity()
        );
        println!("Mean KLD: {:.6}", kl.mean());
        for (label, q) in [
            ("Median", 0.5),
            ("90%", 0.9),
            ("95%", 0.95),
            ("99%", 0.99),
            ("Maximum", 1.0),
        ] {
            println!("{label:<8} KLD: {:.6}", kl.quantile(q));
        }
        println!("Same top-1: {:.3}%", 100.0 * kl.top1_agreement());
    }
    Ok(())
}
