//! `plumb chat`: a multi-turn conversation with a model in its chat template.
//!
//! On a terminal: line editing and history, the reply streamed as it is generated, Ctrl-C
//! stops the reply (the session goes on), Ctrl-D quits, and a line ending in `\` continues
//! on the next one. With stdin from a pipe or a file, each line (with the same `\`
//! continuation) is one message or command, stdout gets each reply followed by a newline and
//! nothing else, so a script can drive a chat.
//!
//! After every reply a line on stderr gives the turn's numbers:
//! `plumb: turn 2: 61 prompt tokens, 44 reused, 17 evaluated, 9 generated, stop: eog (…)`.
//! "reused" is the prompt's leading tokens the KV cache already held from the turns before;
//! only the "evaluated" ones went through the model.

use std::io::{BufRead, IsTerminal, Write};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use plumb_engine::sampling::Sampler;
use plumb_engine::{chat_template, ChatSession, Generation, Session, StopReason, Transcript};
use plumb_model::Backend;
use plumb_tokenizer::ChatMessage;
use rustyline::error::ReadlineError;

use crate::backend_choice::WithBackend;
use crate::generation_args::{load, GenerationArgs};

#[derive(clap::Args)]
pub struct Args {
    /// The system message
    #[arg(long, value_name = "TEXT")]
    system: Option<String>,
    /// Chat template to use instead of the model's: a built-in name or a Jinja file
    #[arg(long, value_name = "NAME|FILE")]
    chat_template: Option<String>,
    /// Tokens per reply at most (-1: until the model ends its turn or the context is full)
    #[arg(
        short = 'n',
        long = "n-predict",
        default_value_t = -1,
        allow_negative_numbers = true
    )]
    n_predict: i64,
    // Last: the help heading of the sampling flags, at its end, applies to any flag after it.
    #[command(flatten)]
    gen: GenerationArgs,
}

const HELP: &str = "\
/reset          forget the conversation (the system message stays)
/system TEXT    set the system message (/system alone removes it)
/save FILE      write the conversation to FILE as JSON
/load FILE      continue a conversation saved with /save
/help           this list
/exit           quit (so does Ctrl-D)
A line ending in \\ continues on the next line. Ctrl-C stops a reply.";

/// Whether a reply is being generated: Ctrl-C then stops it instead of quitting.
static GENERATING: AtomicBool = AtomicBool::new(false);
/// Set by Ctrl-C during a reply; checked between tokens.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

pub fn run(args: Args) -> anyhow::Result<()> {
    let backend = args.gen.backend.clone();
    backend.dispatch(Chat(args))
}

struct Chat(Args);

impl WithBackend for Chat {
    type Output = ();

    fn run<B: Backend>(self, backend: B) -> anyhow::Result<()> {
        let args = self.0;
        let interactive = std::io::stdin().is_terminal();
        let loaded = load(&args.gen.model, backend)?;
        let model = &loaded.model;
        let n_ctx = args.gen.context_size(model.hparams())?;
        let config = args.gen.sampling.config(model.hparams().n_vocab, n_ctx)?;
        let options = args.gen.options(args.n_predict)?;
        let mut sampler = Sampler::new(config.clone(), model.hparams().n_vocab)?;
        let template = chat_template(model, args.chat_template.as_deref())?;
        let session = Session::new(model, &loaded.tokenizer, n_ctx, args.gen.batch_size)?;
        let mut chat = ChatSession::new(session, template);
        if let Some(system) = &args.system {
            chat.set_system(Some(system));
        }
        ctrlc::set_handler(|| {
            if GENERATING.load(Ordering::SeqCst) {
                INTERRUPTED.store(true, Ordering::SeqCst);
            } else {
                std::process::exit(130);
            }
        })
        .context("installing the Ctrl-C handler")?;

        eprintln!(
            "plumb chat: {}, context {n_ctx}, {} backend, seed {}",
            args.gen.model,
            model.backend().name(),
            config.seed
        );
        if interactive {
            eprintln!("/help lists the commands; Ctrl-C stops a reply, Ctrl-D quits.");
        }
        let mut input = Input::new(interactive)?;
        let mut turn = 0;
        while let Some(text) = input.next()? {
            let result = if let Some(command) = text.trim().strip_prefix('/') {
                match command_line(command, &mut chat) {
                    Ok(Flow::Quit) => break,
                    Ok(Flow::Continue) => Ok(()),
                    Err(err) => Err(err),
                }
            } else if text.trim().is_empty() {
                Ok(())
            } else {
                turn += 1;
                reply(&mut chat, &text, &mut sampler, &options)
                    .map(|generation| report_turn(turn, &generation, n_ctx))
                    .inspect_err(|_| turn -= 1)
            };
            match result {
                Ok(()) => {}
                // A person at the terminal can fix it and go on; a script should fail.
                Err(err) if interactive => eprintln!("error: {err:#}"),
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }
}

/// Sends a message and streams the reply to stdout until it ends or Ctrl-C.
fn reply<B: Backend>(
    chat: &mut ChatSession<'_, B>,
    text: &str,
    sampler: &mut Sampler,
    options: &plumb_engine::GenerateOptions,
) -> anyhow::Result<Generation> {
    let mut stdout = std::io::stdout().lock();
    let mut write_error = None;
    INTERRUPTED.store(false, Ordering::SeqCst);
    GENERATING.store(true, Ordering::SeqCst);
    let result = chat.send(text, sampler, options, |piece| {
        if let Err(err) = stdout
            .write_all(piece.as_bytes())
            .and_then(|()| stdout.flush())
        {
            write_error = Some(err);
            return ControlFlow::Break(());
        }
        if INTERRUPTED.load(Ordering::SeqCst) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    GENERATING.store(false, Ordering::SeqCst);
    if let Some(err) = write_error {
        return Err(err).context("writing to stdout");
    }
    let generation = result?;
    writeln!(stdout)?;
    stdout.flush()?;
    Ok(generation)
}

fn report_turn(turn: usize, generation: &Generation, n_ctx: usize) {
    let g = generation;
    let per_second = |n: usize, t: std::time::Duration| n as f64 / t.as_secs_f64().max(1e-9);
    eprintln!(
        "plumb: turn {turn}: {} prompt tokens, {} reused, {} evaluated, {} generated, stop: {} \
         ({:.1} prompt tokens/s, {:.1} generated tokens/s)",
        g.prompt.n_tokens,
        g.prompt.n_reused,
        g.prompt.n_evaluated,
        g.tokens.len(),
        g.stop.name(),
        per_second(g.prompt.n_evaluated, g.timings.prompt_eval),
        per_second(g.timings.n_decoded, g.timings.decode),
    );
    if g.stop == StopReason::ContextFull {
        eprintln!(
            "plumb: the context of {n_ctx} tokens is full; the reply was cut short (/reset, or \
             raise --ctx-size)"
        );
    }
}

enum Flow {
    Continue,
    Quit,
}

/// Runs a `/command`; feedback goes to stderr, so that stdout holds only replies.
fn command_line<B: Backend>(line: &str, chat: &mut ChatSession<'_, B>) -> anyhow::Result<Flow> {
    let (name, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim();
    match name {
        "reset" => {
            chat.reset();
            eprintln!("(conversation cleared)");
        }
        "system" => {
            chat.set_system(Some(rest).filter(|s| !s.is_empty()));
            eprintln!(
                "{}",
                if rest.is_empty() {
                    "(system message removed)"
                } else {
                    "(system message set)"
                }
            );
        }
        "save" => {
            let path = file_argument(name, rest)?;
            std::fs::write(path, Transcript::new(chat.messages()).to_json() + "\n")
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "(saved {} messages to {})",
                chat.messages().len(),
                path.display()
            );
        }
        "load" => {
            let messages = read_transcript(file_argument(name, rest)?)?;
            eprintln!("(loaded {} messages)", messages.len());
            chat.set_messages(messages);
        }
        "help" => eprintln!("{HELP}"),
        "exit" | "quit" => return Ok(Flow::Quit),
        _ => anyhow::bail!("unknown command /{name}; /help lists the commands"),
    }
    Ok(Flow::Continue)
}

fn file_argument<'a>(command: &str, rest: &'a str) -> anyhow::Result<&'a Path> {
    if rest.is_empty() {
        anyhow::bail!("/{command} needs a file name");
    }
    Ok(Path::new(rest))
}

/// The messages of a transcript file as `/save` writes it.
pub(crate) fn read_transcript(path: &Path) -> anyhow::Result<Vec<ChatMessage>> {
    let json =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let transcript = Transcript::from_json(&json).with_context(|| {
        format!(
            "{} is not a chat transcript ({{\"messages\": [{{\"role\": …, \"content\": …}}]}})",
            path.display()
        )
    })?;
    Ok(transcript.into_messages())
}

/// Where messages come from: a line editor on a terminal, plain lines otherwise.
enum Input {
    Terminal(Box<rustyline::DefaultEditor>),
    Piped(std::io::Lines<std::io::StdinLock<'static>>),
}

impl Input {
    fn new(interactive: bool) -> anyhow::Result<Input> {
        Ok(if interactive {
            Input::Terminal(Box::new(
                rustyline::DefaultEditor::new().context("setting up line editing")?,
            ))
        } else {
            Input::Piped(std::io::stdin().lock().lines())
        })
    }

    /// The next message or command, continuation lines joined; `None` at the end.
    fn next(&mut self) -> anyhow::Result<Option<String>> {
        let mut text = String::new();
        loop {
            let line = match self {
                Input::Terminal(editor) => {
                    match editor.readline(if text.is_empty() { "> " } else { ". " }) {
                        Ok(line) => line,
                        Err(ReadlineError::Interrupted) => {
                            if text.is_empty() {
                                eprintln!("(Ctrl-D or /exit quits)");
                            }
                            text.clear();
                            continue;
                        }
                        Err(ReadlineError::Eof) => return Ok(None),
                        Err(err) => return Err(err).context("reading a line"),
                    }
                }
                Input::Piped(lines) => match lines.next() {
                    Some(line) => {
                        let mut line = line.context("reading stdin")?;
                        if line.ends_with('\r') {
                            line.pop();
                        }
                        line
                    }
                    None if text.is_empty() => return Ok(None),
                    None => return Ok(Some(text)),
                },
            };
            match line.strip_suffix('\\') {
                Some(head) => {
                    text.push_str(head);
                    text.push('\n');
                }
                None => {
                    text.push_str(&line);
                    break;
                }
            }
        }
        if let Input::Terminal(editor) = self {
            let _ = editor.add_history_entry(text.as_str());
        }
        Ok(Some(text))
    }
}
