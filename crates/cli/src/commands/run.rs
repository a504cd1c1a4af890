//! `plumb run`: generate text from a prompt, streaming it to stdout, with llama.cpp-style
//! timings on stderr (or one JSON object with `--json`).
//!
//! A raw prompt is tokenized as llama-cli does: BOS as the model asks, and control tokens
//! written in the text (`<|im_start|>`) become those tokens. With `--chat` the prompt is a
//! user message in the model's chat template, after an optional system message and an
//! optional earlier conversation (`--messages`, a transcript as `plumb chat` saves it).
//!
//! Prompt and generated tokens together never exceed the context: a prompt that does not
//! fit is an error, and a generation that fills the context stops with a message on stderr.

use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use plumb_engine::sampling::Sampler;
use plumb_engine::{chat_template, ChatSession, Generation, Session, StopReason};
use plumb_model::Backend;

use crate::backend_choice::WithBackend;
use crate::commands::chat::read_transcript;
use crate::generation_args::{load, GenerationArgs};

#[derive(clap::Args)]
pub struct Args {
    /// The prompt; `-` reads it from stdin (with --chat, the user's message)
    #[arg(short, long, conflicts_with = "file", required_unless_present = "file")]
    prompt: Option<String>,
    /// Read the prompt from a file (one trailing newline is dropped, as llama.cpp does)
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    file: Option<PathBuf>,
    /// Tokens to generate at most (-1: until the model ends the text or the context is full)
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = 128,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    /// Send the prompt as a user message in the model's chat template
    #[arg(long)]
    chat: bool,
    /// A system message for --chat (replaces one from --messages)
    #[arg(long, value_name = "TEXT", requires = "chat")]
    system: Option<String>,
    /// Chat template to use instead of the model's: a built-in name or a Jinja file
    #[arg(long, value_name = "NAME|FILE", requires = "chat")]
    chat_template: Option<String>,
    /// The conversation before the prompt, for --chat: a JSON transcript as `plumb chat`'s
    /// /save writes it
    #[arg(long, value_name = "FILE", requires = "chat")]
    messages: Option<PathBuf>,
    /// Print the timings on stderr as one JSON object
    #[arg(long)]
    json: bool,
    // Last: the help heading of the sampling flags, at its end, applies to any flag after it.
    #[command(flatten)]
    gen: GenerationArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let prompt = read_prompt(&args)?;
    let backend = args.gen.backend.clone();
    backend.dispatch(Run { args, prompt })
}

/// The prompt text: `-p`, stdin for `-p -`, or the file of `-f`.
fn read_prompt(args: &Args) -> anyhow::Result<String> {
    let text = match (&args.prompt, &args.file) {
        (Some(prompt), _) if prompt == "-" => {
            let mut text = String::new();
            std::io::stdin()
                .read_to_string(&mut text)
                .context("reading the prompt from stdin")?;
            text
        }
        (Some(prompt), _) => return Ok(prompt.clone()),
        (None, Some(path)) => std::fs::read_to_string(path)
            .with_context(|| format!("reading the prompt from {}", path.display()))?,
        (None, None) => bail!("give a prompt with -p TEXT, -p - (stdin) or -f FILE"),
    };
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(text.strip_suffix('\r').unwrap_or(text).to_owned())
}

struct Run {
    args: Args,
    prompt: String,
}

impl WithBackend for Run {
    type Output = ();

    fn run<B: Backend>(self, backend: B) -> anyhow::Result<()> {
        let Run { args, prompt } = self;
        let loaded = load(&args.gen.model, backend)?;
        let (model, tokenizer) = (&loaded.model, &loaded.tokenizer);
        let n_ctx = args.gen.context_size(model.hparams())?;
        let config = args.gen.sampling.config(model.hparams().n_vocab, n_ctx)?;
        let options = args.gen.options(args.n_predict)?;
        let mut sampler = Sampler::new(config.clone(), model.hparams().n_vocab)?;
        if !args.json {
            eprintln!("plumb: seed {}", config.seed);
            eprintln!("plumb: sampler chain: {}", config.describe());
        }
        let session = Session::new(model, tokenizer, n_ctx, args.gen.batch_size)?;

        let mut stdout = std::io::stdout().lock();
        let mut write_error = None;
        let on_text = |piece: &str| match stdout
            .write_all(piece.as_bytes())
            .and_then(|()| stdout.flush())
        {
            Ok(()) => ControlFlow::Continue(()),
            Err(err) => {
                write_error = Some(err);
                ControlFlow::Break(())
            }
        };
        let generation = if args.chat {
            let template = chat_template(model, args.chat_template.as_deref())?;
            let mut chat = ChatSession::new(session, template);
            if let Some(path) = &args.messages {
                chat.set_messages(read_transcript(path)?);
            }
            if let Some(system) = &args.system {
                chat.set_system(Some(system));
            }
            chat.send(&prompt, &mut sampler, &options, on_text)?
        } else {
            let tokens = tokenizer.encode(&prompt, true, true)?;
            let mut session = session;
            session.generate(&tokens, &mut sampler, &options, on_text)?
        };
        if let Some(err) = write_error {
            return Err(err).context("writing to stdout");
        }
        writeln!(stdout)?;
        drop(stdout);

        if generation.stop == StopReason::ContextFull {
            eprintln!(
                "plumb: the context of {n_ctx} tokens is full; generation stopped \
                 (raise --ctx-size)"
            );
        }
        let report = Report {
            generation: &generation,
            load_time: loaded.load_time,
            n_ctx,
            seed: config.seed,
            backend: model.backend().name(),
        };
        if args.json {
            eprintln!("{}", report.json());
        } else {
            report.print();
        }
        Ok(())
    }
}

struct Report<'a> {
    generation: &'a Generation,
    load_time: Duration,
    n_ctx: usize,
    seed: u32,
    backend: &'static str,
}

impl Report<'_> {
    /// llama.cpp's `common_perf_print` layout.
    fn print(&self) {
        let g = self.generation;
        let t = &g.timings;
        eprintln!();
        eprintln!("plumb: load time   = {:10.2} ms", ms(self.load_time));
        eprintln!(
            "plumb: prompt eval = {}",
            rate(t.prompt_eval, g.prompt.n_evaluated, "tokens")
        );
        eprintln!(
            "plumb: generation  = {}",
            rate(t.decode, t.n_decoded, "runs  ")
        );
        eprintln!(
            "plumb: sampling    = {}",
            rate(t.sampling, g.tokens.len(), "tokens")
        );
        eprintln!(
            "plumb: {} prompt tokens, {} generated, stop: {}, context {}, seed {}, {} backend",
            g.prompt.n_tokens,
            g.tokens.len(),
            g.stop.name(),
            self.n_ctx,
            self.seed,
            self.backend
        );
    }

    fn json(&self) -> serde_json::Value {
        let g = self.generation;
        let t = &g.timings;
        serde_json::json!({
            "load_ms": ms(self.load_time),
            "prompt_tokens": g.prompt.n_tokens,
            "prompt_eval_tokens": g.prompt.n_evaluated,
            "prompt_eval_ms": ms(t.prompt_eval),
            "prompt_tokens_per_second": per_second(g.prompt.n_evaluated, t.prompt_eval),
            "generated_tokens": g.tokens.len(),
            "decode_runs": t.n_decoded,
            "decode_ms": ms(t.decode),
            "decode_tokens_per_second": per_second(t.n_decoded, t.decode),
            "sampling_ms": ms(t.sampling),
            "stop": g.stop.name(),
            "n_ctx": self.n_ctx,
            "seed": self.seed,
            "backend": self.backend,
        })
    }
}

fn ms(time: Duration) -> f64 {
    time.as_secs_f64() * 1e3
}

fn per_second(n: usize, time: Duration) -> f64 {
    n as f64 / time.as_secs_f64().max(1e-9)
}

/// `  123.45 ms /    17 tokens (  7.26 ms per token, 137.71 tokens per second)`.
fn rate(time: Duration, n: usize, unit: &str) -> String {
    let ms = ms(time);
    if n == 0 {
        return format!("{ms:10.2} ms / {n:5} {unit}");
    }
    format!(
        "{ms:10.2} ms / {n:5} {unit} ({:8.2} ms per token, {:8.2} tokens per second)",
        ms / n as f64,
        per_second(n, time)
    )
}
