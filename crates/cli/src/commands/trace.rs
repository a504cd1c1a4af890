//! `plumb trace`: run a prompt and keep every named intermediate, as a trace file or as
//! statistics.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use plumb_model::{Backend, Batch, KvConfig, LogitsFor, Model, ObservedTensor, Observer};
use plumb_tokenizer::Tokenizer;
use plumb_verify::{TensorStats, Trace, TraceInfo};

use crate::backend_choice::{BackendArgs, WithBackend};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name
    #[arg(short, long)]
    model: String,
    /// The prompt; tokenized with the model's BOS as llama.cpp does
    #[arg(short, long)]
    prompt: String,
    /// Only tensors whose names match one of these comma-separated patterns (`*` matches any
    /// run of characters), e.g. `l_out-*,result_norm`
    #[arg(long, value_name = "PATTERN")]
    tensors: Option<String>,
    /// Write the trace to this GGUF file
    #[arg(short, long, value_name = "FILE", required_unless_present = "stats")]
    output: Option<PathBuf>,
    /// Print statistics of each tensor instead of (or besides, with -o) writing them
    #[arg(long)]
    stats: bool,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = plumb_hub::resolve_model(&args.model)?;
    let patterns: Vec<&str> = args
        .tensors
        .as_deref()
        .map(|p| {
            p.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .collect()
        })
        .unwrap_or_default();
    let trace = record(&path, &args.backend, &args.prompt, &patterns)?;
    if trace.tensors.is_empty() {
        bail!(
            "no tensor name matches {:?}",
            args.tensors.unwrap_or_default()
        );
    }
    if args.stats {
        print!("{}", stats_text(&trace.tensors));
    }
    if let Some(out) = &args.output {
        let trace = Trace {
            info: TraceInfo {
                model_sha256: Some(plumb_hub::sha256_file(&path)?),
                ..trace.info
            },
            ..trace
        };
        trace
            .write(out)
            .with_context(|| format!("writing {}", out.display()))?;
        eprintln!(
            "wrote {} tensors for {} tokens to {}",
            trace.tensors.len(),
            trace.tokens.len(),
            out.display()
        );
    }
    Ok(())
}

/// Runs `prompt` through the model on `backend` and records the intermediates whose names
/// match `patterns` (all of them when there is none).
pub(crate) fn record(
    path: &Path,
    backend: &BackendArgs,
    prompt: &str,
    patterns: &[&str],
) -> anyhow::Result<Trace> {
    backend.dispatch(Recording {
        path,
        prompt,
        patterns,
    })
}

struct Recording<'a> {
    path: &'a Path,
    prompt: &'a str,
    patterns: &'a [&'a str],
}

impl WithBackend for Recording<'_> {
    type Output = Trace;

    fn run<B: Backend>(self, backend: B) -> anyhow::Result<Trace> {
        let Recording {
            path,
            prompt,
            patterns,
        } = self;
        let name = backend.name();
        let model =
            Model::load(path, backend).with_context(|| format!("loading {}", path.display()))?;
        let tokenizer = Tokenizer::from_gguf(model.metadata())?;
        let tokens = tokenizer.encode(prompt, true, false)?;
        if tokens.is_empty() {
            bail!("the prompt gives no tokens");
        }
        let mut recorder = Filtered {
            patterns,
            tensors: Vec::new(),
        };
        let mut cache = model.new_kv_cache(KvConfig::new(tokens.len(), 1, tokens.len()))?;
        let batch = Batch::sequence(0, 0, &tokens, LogitsFor::All);
        model.forward_observed(&batch, &mut cache, &mut recorder)?;
        Ok(Trace {
            info: TraceInfo {
                model_file: path.file_name().map(|f| f.to_string_lossy().into_owned()),
                model_sha256: None,
                prompt: Some(prompt.to_owned()),
                backend: Some(name.to_owned()),
                plumb_version: Some(env!("CARGO_PKG_VERSION").into()),
                reference: None,
            },
            tokens: tokens.iter().map(|&t| t as i32).collect(),
            tensors: recorder.tensors,
        })
    }
}

/// Keeps the tensors whose names match any pattern (all of them when there is none).
struct Filtered<'a> {
    patterns: &'a [&'a str],
    tensors: Vec<ObservedTensor>,
}

impl Observer for Filtered<'_> {
    fn wants(&mut self, name: &str) -> bool {
        self.patterns.is_empty() || self.patterns.iter().any(|p| glob_match(p, name))
    }

    fn observe(&mut self, name: &str, shape: &[usize], data: &[f32]) {
        if self.wants(name) {
            self.tensors.push(ObservedTensor {
                name: name.to_owned(),
                shape: shape.to_vec(),
                data: data.to_vec(),
            });
        }
    }
}

/// Whether `name` matches `pattern`, where `*` stands for any run of characters.
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(i) => rest = &rest[i + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

fn stats_text(tensors: &[ObservedTensor]) -> String {
    let mut s = String::new();
    let width = tensors.iter().map(|t| t.name.len()).max().unwrap_or(6);
    let _ = writeln!(
        s,
        "{:<width$}  {:<16} {:>11} {:>11} {:>11} {:>11} {:>6} {:>7}  first values",
        "tensor", "shape", "min", "max", "mean", "rms", "zeros", "nan/inf"
    );
    let num = |v: Option<f64>| v.map_or("-".to_owned(), |v| format!("{v:.4e}"));
    for t in tensors {
        let st = TensorStats::of(&t.data);
        let first: Vec<String> = st.first.iter().map(|v| format!("{v:.4}")).collect();
        let _ = writeln!(
            s,
            "{:<width$}  {:<16} {:>11} {:>11} {:>11} {:>11} {:>6} {:>7}  {}{}",
            t.name,
            format!("{:?}", t.shape),
            num(st.min.map(f64::from)),
            num(st.max.map(f64::from)),
            num(st.mean),
            num(st.rms),
            st.zeros,
            st.nan + st.inf,
            first.join(" "),
            if st.is_suspicious() {
                "  <-- suspicious"
            } else {
                ""
            }
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn glob_patterns() {
        assert!(glob_match("l_out-*", "l_out-12"));
        assert!(glob_match("*", "anything"));
        assert!(glob_match("result_norm", "result_norm"));
        assert!(!glob_match("result_norm", "result_norm2"));
        assert!(glob_match("*cur-0", "Qcur-0"));
        assert!(!glob_match("*cur-0", "Qcur-01"));
        assert!(glob_match("a*b*c", "a-x-b-y-c"));
        assert!(!glob_match("a*b*c", "a-x-c"));
        assert!(!glob_match("ab*ba", "aba"));
    }
}
