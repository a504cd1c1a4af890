//! The `plumb` command line.

mod backend_choice;
mod commands;
mod generation_args;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "plumb",
    version,
    about = "Run GGUF language models, and prove the numbers are right"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show a GGUF file's architecture, metadata and tensors, or one tensor's values
    Inspect(commands::inspect::Args),
    /// Measure prompt-processing and generation speed, as llama-bench does
    Bench(commands::bench::Args),
    /// Download a model from the catalog or a URL into the model cache
    Pull(commands::pull::Args),
    /// Tokenize text with a model's tokenizer and print ids and pieces
    Tokenize(commands::tokenize::Args),
    /// Generate text from a prompt
    Run(commands::run::Args),
    /// Chat with a model in the terminal (or through stdin)
    Chat(commands::chat::Args),
    /// Serve a model over HTTP with an OpenAI-compatible API
    Serve(commands::serve::Args),
    /// Run a prompt and record every named intermediate tensor (or print their statistics)
    Trace(commands::trace::Args),
    /// Run the reference and another backend on the same tokens and diff them layer by layer
    Verify(commands::verify::Args),
    /// Perplexity of a text, and KL divergence against a saved base run
    Perplexity(commands::perplexity::Args),
    /// Compare two trace files layer by layer and name the first divergent tensor
    Diff(commands::diff::Args),
    /// Write a random-weight GGUF model of a real model's shape and llama.cpp type mix
    Synth(commands::synth::Args),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("PLUMB_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args.get(1).is_some_and(|a| a == "serve") {
        // llama-server's two-letter short flags, which clap cannot declare.
        for arg in &mut args[2..] {
            if let Some(long) = arg.to_str().and_then(commands::serve::long_flag) {
                *arg = long.into();
            }
        }
    }
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Diff(args) => return commands::diff::run(args),
        Command::Verify(args) => return commands::verify::run(args),
        Command::Bench(args) => commands::bench::run(args),
        Command::Inspect(args) => commands::inspect::run(args),
        Command::Trace(args) => commands::trace::run(args),
        Command::Perplexity(args) => commands::perplexity::run(args),
        Command::Pull(args) => commands::pull::run(args),
        Command::Tokenize(args) => commands::tokenize::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Chat(args) => commands::chat::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Synth(args) => commands::synth::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
