//! `plumb run`: generate text from a prompt, streaming it to stdout, with llama.cpp-style
//! timings on stderr. Decoding is greedy; sampling comes with the sampler.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use plumb_backend_ref::RefBackend;
use plumb_model::{argmax, Architecture, Backend, KvConfig, LogitsFor, Model};
use plumb_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};

/// The context used when `--ctx-size` is not given, if the model was trained for at least
/// this much (llama.cpp's default too).
const DEFAULT_CTX: usize = 4096;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name (pulled if needed)
    #[arg(short, long)]
    model: String,
    /// The prompt (with --chat, the user's message)
    #[arg(short, long)]
    prompt: String,
    /// Tokens to generate at most
    #[arg(short = 'n', long = "n-predict", default_value_t = 128)]
    n_predict: usize,
    /// Sampling temperature; only 0 (greedy decoding) is implemented so far
    #[arg(long, default_value_t = 0.0)]
    temp: f32,
    /// Random seed for sampling; greedy decoding does not use it
    #[arg(long)]
    seed: Option<u64>,
    /// Wrap the prompt in the model's chat template as a user turn
    #[arg(long)]
    chat: bool,
    /// A system message for --chat
    #[arg(long, value_name = "TEXT", requires = "chat")]
    system: Option<String>,
    /// Chat template to use instead of the model's: a built-in name or a Jinja file
    #[arg(long, value_name = "NAME|FILE", requires = "chat")]
    chat_template: Option<String>,
    /// Context size in tokens (prompt and generation together) [default: the model's
    /// training context, at most 4096]
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Prompt tokens evaluated per forward pass
    #[arg(short = 'b', long = "batch-size", default_value_t = 256)]
    batch_size: usize,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.temp > 0.0 {
        bail!(
            "--temp {} asks for sampling, which plumb does not have yet; \
             use --temp 0 for greedy decoding",
            args.temp
        );
    }
    if args.seed.is_some() {
        tracing::info!("--seed has no effect on greedy decoding");
    }

    let load_start = Instant::now();
    let path = plumb_hub::resolve_model(&args.model)?;
    let model = Model::load(&path, RefBackend::new())?;
    let tokenizer = Tokenizer::from_gguf(model.metadata())?;
    let load_time = load_start.elapsed();

    let tokens = prompt_tokens(&args, &model, &tokenizer)?;
    if tokens.is_empty() {
        bail!("the prompt gives no tokens");
    }
    let n_ctx = args
        .ctx_size
        .unwrap_or_else(|| model.hparams().n_ctx_train.min(DEFAULT_CTX));
    if tokens.len() >= n_ctx {
        bail!(
            "the prompt is {} tokens, which leaves no room in a context of {n_ctx} \
             (raise --ctx-size)",
            tokens.len()
        );
    }
    let mut cache = model.new_kv_cache(KvConfig {
        n_ctx,
        n_seq: 1,
        max_batch: args.batch_size.max(1),
    })?;

    let prompt_start = Instant::now();
    let mut logits = model.eval(&mut cache, 0, &tokens, LogitsFor::Last)?;
    let prompt_time = prompt_start.elapsed();

    let mut stdout = std::io::stdout().lock();
    let mut text = tokenizer.stream_decoder();
    let mut decode_time = Duration::ZERO;
    let mut n_decoded = 0;
    let mut n_generated = 0;
    while n_generated < args.n_predict {
        let next = argmax(logits.last().context("no logits for the last token")?) as u32;
        if tokenizer.is_end_of_generation(next) {
            break;
        }
        n_generated += 1;
        stdout.write_all(text.push(next)?.as_bytes())?;
        stdout.flush()?;
        if n_generated == args.n_predict {
            break;
        }
        if cache.seq_len(0) >= n_ctx {
            eprintln!("\nplumb: the context of {n_ctx} tokens is full; stopping");
            break;
        }
        let step = Instant::now();
        logits = model.eval(&mut cache, 0, &[next], LogitsFor::Last)?;
        decode_time += step.elapsed();
        n_decoded += 1;
    }
    stdout.write_all(text.flush().as_bytes())?;
    writeln!(stdout)?;
    drop(stdout);

    eprintln!();
    eprintln!(
        "plumb: load time   = {:10.2} ms",
        load_time.as_secs_f64() * 1e3
    );
    eprintln!(
        "plumb: prompt eval = {}",
        rate(prompt_time, tokens.len(), "tokens")
    );
    eprintln!(
        "plumb: generation  = {}",
        rate(decode_time, n_decoded, "runs  ")
    );
    eprintln!(
        "plumb: {} prompt tokens, {n_generated} generated, greedy, {} backend",
        tokens.len(),
        model.backend().name()
    );
    Ok(())
}

/// The prompt's token ids: the text as it is, or rendered as a chat turn.
fn prompt_tokens(
    args: &Args,
    model: &Model<RefBackend>,
    tokenizer: &Tokenizer,
) -> anyhow::Result<Vec<u32>> {
    if !args.chat {
        return Ok(tokenizer.encode(&args.prompt, true, false)?);
    }
    let template = match &args.chat_template {
        Some(name) => ChatTemplate::select(name)?,
        None => match ChatTemplate::from_gguf(model.metadata())? {
            Some(template) => template,
            // Gemma GGUFs often come without a template; llama.cpp then detects Gemma and
            // uses its built-in one.
            None if model.hparams().architecture == Architecture::Gemma3 => {
                ChatTemplate::named("gemma")?
            }
            None => bail!("the model has no chat template; pass one with --chat-template"),
        },
    };
    let mut messages = Vec::new();
    if let Some(system) = &args.system {
        messages.push(ChatMessage::new("system", system.as_str()));
    }
    messages.push(ChatMessage::new("user", args.prompt.as_str()));
    let text = template.render(&messages, true)?;
    // A template that writes the BOS token itself must not get a second one.
    let writes_bos = tokenizer
        .bos_id()
        .and_then(|id| tokenizer.token_text(id))
        .is_some_and(|bos| !bos.is_empty() && text.starts_with(bos));
    Ok(tokenizer.encode(&text, !writes_bos, true)?)
}

/// `  123.45 ms /    17 tokens (  7.26 ms per token, 137.71 tokens per second)`.
fn rate(time: Duration, n: usize, unit: &str) -> String {
    let ms = time.as_secs_f64() * 1e3;
    if n == 0 {
        return format!("{ms:10.2} ms / {n:5} {unit}");
    }
    format!(
        "{ms:10.2} ms / {n:5} {unit} ({:8.2} ms per token, {:8.2} tokens per second)",
        ms / n as f64,
        n as f64 / time.as_secs_f64().max(1e-9)
    )
}
