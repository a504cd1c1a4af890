//! `plumb tokenize`: a model's token ids and pieces for some text, as llama.cpp's
//! `llama-tokenize` prints them.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;

use anyhow::{bail, Context};
use plumb_gguf::GgufFile;
use plumb_tokenizer::{Tokenizer, TokenizerOptions};
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name (pulled on first use)
    #[arg(short, long)]
    model: String,
    /// The text to tokenize (or use --file / --stdin)
    text: Option<std::ffi::OsString>,
    /// Read the text from this file, byte for byte
    #[arg(short, long, value_name = "FILE", conflicts_with = "text")]
    file: Option<PathBuf>,
    /// Read the text from standard input
    #[arg(long, conflicts_with_all = ["text", "file"])]
    stdin: bool,
    /// Do not add BOS (and EOS) even where the model asks for them
    #[arg(long)]
    no_bos: bool,
    /// Turn special-token text such as <|im_start|> into those tokens
    #[arg(long)]
    parse_special: bool,
    /// Use this pre-tokenizer instead of the file's tokenizer.ggml.pre
    #[arg(long, value_name = "NAME")]
    pre: Option<String>,
    /// Print only the ids, as a list
    #[arg(long, conflicts_with = "json")]
    ids: bool,
    /// Print a JSON document with the ids and pieces
    #[arg(long)]
    json: bool,
    /// Also print the number of tokens
    #[arg(long)]
    show_count: bool,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let text = read_text(&args)?;
    let path = plumb_hub::resolve_model(&args.model)?;
    let file = GgufFile::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let options = TokenizerOptions {
        pre_override: args.pre.clone(),
    };
    let tok = Tokenizer::from_gguf_with(file.metadata(), options)
        .with_context(|| format!("building the tokenizer of {}", path.display()))?;
    // As llama-tokenize: special tokens are added only when the model wants BOS.
    let add_special = tok.add_bos() && !args.no_bos;
    let ids = tok.encode_bytes(&text, add_special, args.parse_special)?;
    let pieces: Vec<Vec<u8>> = ids.iter().map(|&id| tok.token_to_piece(id)).collect();

    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = json!({
            "model": path.display().to_string(),
            "add_special": add_special,
            "parse_special": args.parse_special,
            "ids": ids,
            "pieces": pieces.iter().map(|p| String::from_utf8_lossy(p)).collect::<Vec<_>>(),
            "count": ids.len(),
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
        return Ok(());
    }
    if args.ids {
        let list: Vec<String> = ids.iter().map(u32::to_string).collect();
        writeln!(out, "[{}]", list.join(", "))?;
    } else {
        for (id, piece) in ids.iter().zip(&pieces) {
            write!(out, "{id:6} -> '")?;
            out.write_all(piece)?;
            writeln!(out, "'")?;
        }
    }
    if args.show_count {
        writeln!(out, "Total number of tokens: {}", ids.len())?;
    }
    Ok(())
}

/// The text as bytes: it need not be valid UTF-8, and is tokenized as llama.cpp would.
fn read_text(args: &Args) -> anyhow::Result<Vec<u8>> {
    if let Some(path) = &args.file {
        return std::fs::read(path).with_context(|| format!("reading {}", path.display()));
    }
    if args.stdin {
        let mut text = Vec::new();
        std::io::stdin()
            .read_to_end(&mut text)
            .context("reading standard input")?;
        return Ok(text);
    }
    match &args.text {
        Some(text) => Ok(os_bytes(text)),
        None => bail!("give the text to tokenize, or --file FILE, or --stdin"),
    }
}

#[cfg(unix)]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    use std::os::unix::ffi::OsStrExt;
    s.as_bytes().to_vec()
}

#[cfg(not(unix))]
fn os_bytes(s: &std::ffi::OsStr) -> Vec<u8> {
    s.to_string_lossy().into_owned().into_bytes()
}
