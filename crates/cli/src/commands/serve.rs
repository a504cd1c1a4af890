//! `plumb serve`: an OpenAI-compatible HTTP server, with llama-server's flags.
//!
//! The model runs on the engine's scheduler thread (and the backend's compute threads);
//! HTTP runs on a small tokio runtime of its own, so that parsing and streaming do not
//! compete with the compute threads for the cores.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{bail, Context};
use plumb_engine::{chat_template, Engine, EngineConfig, EngineError};
use plumb_model::{Backend, HyperParams};
use plumb_server::{AppState, Defaults, ServerConfig};

use crate::backend_choice::{BackendArgs, WithBackend};
use crate::generation_args::{context_size, kv_tokens_in_memory, load, seed_flag};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name (pulled on first use)
    #[arg(short, long)]
    model: String,
    /// Address to listen on
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on; 0 picks a free one (the listening line shows it)
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Requests must send this key as `Authorization: Bearer KEY` [default: $PLUMB_API_KEY,
    /// else $LLAMA_API_KEY; none: no key needed]
    #[arg(long, value_name = "KEY")]
    api_key: Option<String>,
    /// Sequences decoded together at most (a request with n choices takes n); also spelled
    /// -np
    #[arg(long, default_value_t = 4)]
    parallel: usize,
    /// Positions one sequence may hold, prompt and reply together [default: the model's
    /// training context, at most 4096]
    #[arg(short = 'c', long = "ctx-size")]
    ctx_size: Option<usize>,
    /// Tokens of KV cache for all sequences together [default: parallel × ctx-size, at most
    /// what a quarter of the available memory holds]
    #[arg(long, value_name = "TOKENS")]
    kv_budget: Option<usize>,
    /// Prompt tokens evaluated per scheduler step at most
    #[arg(short = 'b', long = "batch-size", default_value_t = 256)]
    batch_size: usize,
    /// Requests waiting for a sequence at most; more are refused with 503
    #[arg(long, default_value_t = 64)]
    max_queue: usize,
    /// The model's name in the API [default: the file's name without .gguf]
    #[arg(short = 'a', long)]
    alias: Option<String>,
    /// Chat template instead of the model's: a built-in name or a Jinja file
    #[arg(long, value_name = "NAME|FILE")]
    chat_template: Option<String>,
    /// Tokens to generate when a request sets no max_tokens (-1: until the model ends the
    /// text or the context is full)
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = -1,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    /// Temperature when a request sets none; 0 is greedy decoding
    #[arg(long, default_value_t = 0.8)]
    temp: f32,
    /// Seed when a request sets none [default: -1, a random seed per request]
    #[arg(short = 's', long, allow_negative_numbers = true)]
    seed: Option<i64>,
    /// Serve the chat page from DIR beside the API (built by `npm --prefix web run build`),
    /// cross-origin isolated (COOP same-origin, COEP require-corp)
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = "web/dist")]
    web: Option<PathBuf>,
    #[command(flatten)]
    backend: BackendArgs,
}

/// llama-server's two-letter short flags, which clap cannot declare, as their long names.
pub fn long_flag(arg: &str) -> Option<&'static str> {
    match arg {
        "-np" => Some("--parallel"),
        _ => None,
    }
}

pub fn run(args: Args) -> anyhow::Result<()> {
    if args.parallel == 0 || args.max_queue == 0 || args.batch_size == 0 {
        bail!("--parallel, --max-queue and --batch-size must be at least 1");
    }
    if args.n_predict == 0 || args.n_predict < -1 {
        bail!(
            "--n-predict must be -1 (no limit) or at least 1, got {}",
            args.n_predict
        );
    }
    if !(args.temp.is_finite() && args.temp >= 0.0) {
        bail!("--temp must be a number ≥ 0, got {}", args.temp);
    }
    if let Some(dir) = &args.web {
        if !dir.join("index.html").is_file() {
            bail!(
                "--web {}: no index.html there (build the page: npm --prefix web ci && \
                 npm --prefix web run build)",
                dir.display()
            );
        }
    }
    let backend = args.backend.clone();
    backend.dispatch_batched(Serve { args })
}

struct Serve {
    args: Args,
}

impl WithBackend for Serve {
    type Output = ();

    fn run<B: Backend + 'static>(self, backend: B) -> anyhow::Result<()> {
        let args = self.args;
        let path = plumb_hub::resolve_model(&args.model)?;
        let loaded = load(&path.to_string_lossy(), backend)?;
        let hparams = loaded.model.hparams().clone();
        let n_ctx = context_size(args.ctx_size, &hparams)?;
        let kv_tokens = kv_budget(&args, &hparams, n_ctx)?;
        let template = match chat_template(&loaded.model, args.chat_template.as_deref()) {
            Ok(template) => Some(template),
            Err(EngineError::NoChatTemplate) => {
                eprintln!("plumb serve: the model has no chat template; chat completions are refused (use --chat-template)");
                None
            }
            Err(err) => return Err(err).context("--chat-template"),
        };
        let tokenizer = Arc::new(loaded.tokenizer);
        let backend_name = loaded.model.backend().name();
        let engine = Engine::spawn(
            loaded.model,
            tokenizer.clone(),
            EngineConfig {
                n_parallel: args.parallel,
                n_ctx,
                kv_tokens,
                step_tokens: args.batch_size,
                max_queue: args.max_queue,
            },
        )?;
        let config = ServerConfig {
            model_name: args.alias.clone().unwrap_or_else(|| stem(&path)),
            other_names: model_names(&args.model, &path),
            api_key: args.api_key.clone().or_else(api_key_from_env),
            defaults: Defaults {
                temperature: args.temp,
                seed: seed_flag(args.seed)?,
                max_tokens: usize::try_from(args.n_predict).ok(),
            },
            web_dir: args.web.clone(),
        };
        eprintln!(
            "plumb serve: {}, context {n_ctx}, {} parallel, KV budget {kv_tokens} tokens, {backend_name} backend",
            config.model_name, args.parallel
        );
        let state = Arc::new(AppState::new(Arc::new(engine), tokenizer, template, config));
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(http_threads())
            .max_blocking_threads(4)
            .thread_name("plumb-http")
            .enable_all()
            .build()
            .context("starting the HTTP runtime")?;
        runtime.block_on(async {
            let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
                .await
                .with_context(|| format!("listening on {}:{}", args.host, args.port))?;
            let addr: SocketAddr = listener.local_addr()?;
            eprintln!("plumb serve: listening on http://{addr}");
            if let Some(dir) = &args.web {
                eprintln!(
                    "plumb serve: the chat page ({}) at http://{addr}/",
                    dir.display()
                );
            }
            plumb_server::serve(listener, state, plumb_server::shutdown_signal())
                .await
                .context("serving")
        })?;
        eprintln!("plumb serve: stopped");
        Ok(())
    }
}

/// Worker threads for HTTP: few, so that they leave the cores to the model.
fn http_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / 4).clamp(1, 2)
}

/// `--kv-budget`, else `parallel × ctx` capped so that the cache takes at most a quarter of
/// the available memory (and at least one full context).
fn kv_budget(args: &Args, hparams: &HyperParams, n_ctx: usize) -> anyhow::Result<usize> {
    if let Some(tokens) = args.kv_budget {
        if tokens < n_ctx {
            bail!(
                "--kv-budget {tokens} cannot hold one full context of {n_ctx} tokens (--ctx-size)"
            );
        }
        return Ok(tokens);
    }
    let wanted = args.parallel.saturating_mul(n_ctx);
    let Some(fits) = kv_tokens_in_memory(hparams, args.backend.kv_element_bytes()) else {
        return Ok(wanted);
    };
    Ok(wanted.min(fits).max(n_ctx))
}

fn api_key_from_env() -> Option<String> {
    ["PLUMB_API_KEY", "LLAMA_API_KEY"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|key| !key.is_empty())
}

fn stem(path: &std::path::Path) -> String {
    path.file_stem()
        .map_or_else(|| "model".into(), |s| s.to_string_lossy().into_owned())
}

/// Names a request's `model` may use besides the alias: what `-m` said, the file's name
/// and its stem.
fn model_names(model_flag: &str, path: &std::path::Path) -> Vec<String> {
    let mut names = vec![model_flag.to_owned(), stem(path)];
    if let Some(name) = path.file_name() {
        names.push(name.to_string_lossy().into_owned());
    }
    names
}
