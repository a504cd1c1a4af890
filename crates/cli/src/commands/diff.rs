//! `plumb diff A.trace.gguf B.trace.gguf`: walk two traces in graph order and name the first
//! tensor where they diverge, and the op that produced it.
//!
//! Exit status: 0 when the traces agree, 1 when they diverge, 2 when they cannot be compared.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use plumb_verify::{diff, op_that_produced, DiffReport, Tolerance, Trace, Verdict};

#[derive(clap::Args)]
pub struct Args {
    /// The reference trace; relative errors are relative to it
    a: PathBuf,
    /// The trace compared with it
    b: PathBuf,
    /// Tolerance preset: `llama.cpp` (sized to llama.cpp's 8-bit activation noise) or
    /// `same-engine` (two plumb backends; the default)
    #[arg(long, value_name = "PRESET")]
    against: Option<String>,
    /// Largest allowed relative RMS error, overriding the preset's
    #[arg(long, value_name = "REL")]
    tolerance: Option<f64>,
    /// Smallest allowed cosine similarity, overriding the preset's
    #[arg(long, value_name = "COS")]
    min_cosine: Option<f64>,
    /// Print a machine-readable JSON report
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> ExitCode {
    match compare(&args) {
        Ok(report) if report.agree() => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}

fn compare(args: &Args) -> anyhow::Result<DiffReport> {
    let mut tolerance = match &args.against {
        None => Tolerance::default(),
        Some(name) => Tolerance::preset(name).with_context(|| {
            format!("unknown tolerance preset {name:?} (known: llama.cpp, same-engine)")
        })?,
    };
    if let Some(t) = args.tolerance {
        tolerance.max_rel_rms = t;
    }
    if let Some(c) = args.min_cosine {
        tolerance.min_cosine = c;
    }
    let read = |p: &PathBuf| Trace::read(p).with_context(|| format!("reading {}", p.display()));
    let (a, b) = (read(&args.a)?, read(&args.b)?);
    let report = diff(&a, &b, tolerance);
    if report.tokens_differ {
        bail!(
            "the traces were made from different tokens ({:?} vs {:?}); compare runs of the same input",
            a.tokens,
            b.tokens
        );
    }
    if report.compared == 0 {
        bail!("the traces have no tensor name in common");
    }
    if args.json {
        let doc = serde_json::json!({
            "a": { "path": args.a, "info": a.info },
            "b": { "path": args.b, "info": b.info },
            "agree": report.agree(),
            "first_divergence": report.first_divergence().map(|t| serde_json::json!({
                "name": t.name,
                "op": op_that_produced(&t.name),
            })),
            "report": report,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!(
            "{}",
            report_text(
                &args.a.display().to_string(),
                &args.b.display().to_string(),
                &a,
                &b,
                &report
            )
        );
    }
    Ok(report)
}

fn describe(trace: &Trace) -> String {
    let i = &trace.info;
    let producer = i
        .reference
        .clone()
        .or_else(|| {
            i.plumb_version
                .as_ref()
                .map(|v| format!("plumb {v}, backend {}", i.backend.as_deref().unwrap_or("?")))
        })
        .unwrap_or_else(|| "unknown producer".into());
    format!(
        "{producer}; model {}; {} tokens, {} tensors",
        i.model_file.as_deref().unwrap_or("?"),
        trace.tokens.len(),
        trace.tensors.len()
    )
}

/// The human-readable report; `plumb verify` prints the same one.
pub(crate) fn report_text(
    a_label: &str,
    b_label: &str,
    a: &Trace,
    b: &Trace,
    report: &DiffReport,
) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "A: {a_label} ({})", describe(a));
    let _ = writeln!(s, "B: {b_label} ({})", describe(b));
    let _ = writeln!(
        s,
        "tolerance: relative RMS error <= {:.1e}, cosine >= {}\n",
        report.tolerance.max_rel_rms, report.tolerance.min_cosine
    );
    let width = report
        .tensors
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        s,
        "{:<width$}  {:<16} {:>10} {:>10} {:>10}  verdict",
        "tensor", "shape", "cosine", "max abs", "rel RMS"
    );
    let num = |v: Option<f64>, f: fn(f64) -> String| v.map(f).unwrap_or_else(|| "-".into());
    for t in &report.tensors {
        let verdict = match &t.verdict {
            Verdict::Agree => "ok".to_owned(),
            Verdict::Diverged { reason } => format!("DIVERGED: {reason}"),
            Verdict::ShapeMismatch { a, b } => format!("SHAPE MISMATCH: {a:?} vs {b:?}"),
            Verdict::OnlyInA => "only in A".to_owned(),
        };
        let _ = writeln!(
            s,
            "{:<width$}  {:<16} {:>10} {:>10} {:>10}  {verdict}",
            t.name,
            format!("{:?}", t.shape),
            num(t.cosine, |v| format!("{v:.6}")),
            num(t.max_abs_err, |v| format!("{v:.3e}")),
            num(t.rel_rms_err, |v| format!("{v:.3e}")),
        );
    }
    if !report.only_in_b.is_empty() {
        const SHOWN: usize = 8;
        let names = &report.only_in_b;
        let more = names.len().saturating_sub(SHOWN);
        let _ = write!(
            s,
            "\nonly in B ({}): {}",
            names.len(),
            names[..names.len() - more].join(", ")
        );
        let _ = writeln!(
            s,
            "{}",
            if more > 0 {
                format!(", ... and {more} more")
            } else {
                String::new()
            }
        );
    }
    match report.first_divergence() {
        None => {
            let _ = writeln!(
                s,
                "\nagree: {} tensors compared, all within tolerance",
                report.compared
            );
        }
        Some(t) => {
            let _ = writeln!(
                s,
                "\nfirst divergence: {}\n  produced by: {}",
                t.name,
                op_that_produced(&t.name)
            );
        }
    }
    s
}
