//! `plumb inspect`: what is in a GGUF file, and the dequantized values of any one tensor.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::ops::Range;
use std::path::PathBuf;

use anyhow::{bail, Context};
use plumb_gguf::{GgmlType, GgufFile, Metadata, TensorInfo, Value};
use serde_json::{json, Value as Json};

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name (pulled on first use)
    model: String,
    /// Print a machine-readable JSON document instead of tables
    #[arg(long)]
    json: bool,
    /// Show the dequantized values of this tensor instead of the summary
    #[arg(long, value_name = "NAME")]
    tensor: Option<String>,
    /// With --tensor: only these rows (a row is shape[0] values), e.g. 0..4
    #[arg(long, value_name = "A..B", requires = "tensor", value_parser = parse_rows)]
    rows: Option<Range<u64>>,
    /// With --tensor: write the values as little-endian f32 to this file instead of printing
    #[arg(long, value_name = "OUT.f32", requires = "tensor")]
    raw: Option<PathBuf>,
}

pub fn run(args: Args) -> anyhow::Result<()> {
    let path = plumb_hub::resolve_model(&args.model)?;
    let file = GgufFile::open(&path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = std::io::stdout().lock();
    match &args.tensor {
        Some(name) => {
            let info = file.require_tensor(name)?;
            let rows = args.rows.clone().unwrap_or(0..info.n_rows());
            let values = dequantize_rows(&file, info, rows.clone())?;
            match &args.raw {
                Some(raw) => {
                    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
                    std::fs::write(raw, bytes)
                        .with_context(|| format!("writing {}", raw.display()))?;
                    eprintln!(
                        "wrote {} values of {name} (rows {}..{}) to {}",
                        values.len(),
                        rows.start,
                        rows.end,
                        raw.display()
                    );
                }
                None if args.json => {
                    let doc = json!({
                        "name": info.name,
                        "type": info.ggml_type.name(),
                        "shape": info.shape,
                        "rows": [rows.start, rows.end],
                        "values": values.chunks(info.row_len() as usize).collect::<Vec<_>>(),
                    });
                    writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
                }
                None => out.write_all(tensor_text(info, rows.start, &values).as_bytes())?,
            }
        }
        None if args.json => writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&summary_json(&file))?
        )?,
        None => out.write_all(summary_text(&file).as_bytes())?,
    }
    Ok(())
}

fn parse_rows(s: &str) -> Result<Range<u64>, String> {
    let (a, b) = s
        .split_once("..")
        .ok_or_else(|| format!("expected A..B, got {s:?}"))?;
    let a: u64 = a.parse().map_err(|_| format!("bad row number {a:?}"))?;
    let b: u64 = b.parse().map_err(|_| format!("bad row number {b:?}"))?;
    if a >= b {
        return Err(format!("empty row range {a}..{b}"));
    }
    Ok(a..b)
}

fn dequantize_rows(
    file: &GgufFile,
    info: &TensorInfo,
    rows: Range<u64>,
) -> anyhow::Result<Vec<f32>> {
    if rows.end > info.n_rows() {
        bail!(
            "tensor {:?} has {} rows; rows {}..{} are out of range",
            info.name,
            info.n_rows(),
            rows.start,
            rows.end
        );
    }
    let row_len = info.row_len() as usize;
    let row_bytes = info.row_bytes() as usize;
    let data = file.tensor_data(info);
    let mut values = vec![0f32; row_len * (rows.end - rows.start) as usize];
    for (i, row) in rows.clone().enumerate() {
        let src = &data[row as usize * row_bytes..][..row_bytes];
        plumb_ggml::dequantize_row(info.ggml_type, src, &mut values[i * row_len..][..row_len])
            .with_context(|| format!("dequantizing row {row} of tensor {:?}", info.name))?;
    }
    Ok(values)
}

fn tensor_text(info: &TensorInfo, first_row: u64, values: &[f32]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} {} {:?} ({} rows of {})",
        info.name,
        info.ggml_type,
        info.shape,
        info.n_rows(),
        info.row_len()
    );
    for (i, row) in values.chunks(info.row_len() as usize).enumerate() {
        let _ = write!(s, "row {}:", first_row + i as u64);
        for v in row {
            let _ = write!(s, " {v:.6}");
        }
        s.push('\n');
    }
    s
}

/// The handful of hyperparameters a person looks for first, read straight from the metadata.
/// Missing keys show as "-": this is a view of the file, not a validation of the model.
fn architecture_summary(md: &Metadata) -> Vec<(&'static str, String)> {
    let arch = md.architecture().unwrap_or("-").to_owned();
    let get = |suffix: &str| {
        md.get(&format!("{arch}.{suffix}"))
            .map(|v| v.to_string())
            .unwrap_or_else(|| "-".into())
    };
    let n_embd = md.get_u64(&format!("{arch}.embedding_length")).ok();
    let n_head = md.get_u64(&format!("{arch}.attention.head_count")).ok();
    let head_dim = md
        .get_u64(&format!("{arch}.attention.key_length"))
        .ok()
        .or(n_embd.zip(n_head).and_then(|(e, h)| e.checked_div(h)));
    let vocab = md
        .get("tokenizer.ggml.tokens")
        .and_then(Value::as_array)
        .map(|a| a.len().to_string());
    let string_or_dash = |key: &str| md.get_str(key).unwrap_or("-").to_owned();
    let mut rope = format!("base {}", get("rope.freq_base"));
    if md.contains(&format!("{arch}.rope.dimension_count")) {
        let _ = write!(rope, ", dims {}", get("rope.dimension_count"));
    }
    if let Ok(scaling) = md.get_str(&format!("{arch}.rope.scaling.type")) {
        let _ = write!(rope, ", scaling {scaling} x{}", get("rope.scaling.factor"));
    }
    let mut rows = vec![
        ("architecture", arch.clone()),
        ("name", string_or_dash("general.name")),
        ("layers", get("block_count")),
        ("embedding width", get("embedding_length")),
        ("feed-forward width", get("feed_forward_length")),
        (
            "heads / kv heads",
            format!(
                "{} / {}",
                get("attention.head_count"),
                get("attention.head_count_kv")
            ),
        ),
        (
            "head dim",
            head_dim
                .map(|d| d.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        ("context (train)", get("context_length")),
        ("rope", rope),
        ("rms norm eps", get("attention.layer_norm_rms_epsilon")),
    ];
    if md.contains(&format!("{arch}.attention.sliding_window")) {
        rows.push(("sliding window", get("attention.sliding_window")));
    }
    rows.extend([
        ("vocab", vocab.unwrap_or_else(|| "-".into())),
        (
            "tokenizer",
            format!(
                "{} / pre {}",
                string_or_dash("tokenizer.ggml.model"),
                string_or_dash("tokenizer.ggml.pre")
            ),
        ),
        (
            "chat template",
            if md.contains("tokenizer.chat_template") {
                "present"
            } else {
                "none"
            }
            .into(),
        ),
    ]);
    rows
}

#[derive(Default)]
struct TypeTotal {
    tensors: usize,
    elements: u64,
    bytes: u64,
}

fn totals_by_type(file: &GgufFile) -> BTreeMap<GgmlType, TypeTotal> {
    let mut totals = BTreeMap::<GgmlType, TypeTotal>::new();
    for t in file.tensors() {
        let total = totals.entry(t.ggml_type).or_default();
        total.tensors += 1;
        total.elements += t.n_elements();
        total.bytes += t.size;
    }
    totals
}

fn summary_text(file: &GgufFile) -> String {
    let md = file.metadata();
    let mut s = String::new();
    let n_params: u64 = file.tensors().iter().map(TensorInfo::n_elements).sum();
    let _ = writeln!(
        s,
        "GGUF v{}, {} bytes, {} tensors ({:.1}M parameters), {} metadata keys, alignment {}\n",
        file.version(),
        file.file_size(),
        file.tensors().len(),
        n_params as f64 / 1e6,
        md.len(),
        file.header().alignment
    );
    // Trace files and test-vector files are GGUF too, but describe no model.
    let describes_a_model = md
        .arch_key("block_count")
        .is_ok_and(|key| md.contains(&key));
    if describes_a_model {
        s.push_str("architecture:\n");
        for (k, v) in architecture_summary(md) {
            let _ = writeln!(s, "  {k:<20} {v}");
        }
        s.push('\n');
    }
    s.push_str("metadata:\n");
    let width = md.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in md.iter() {
        let _ = writeln!(
            s,
            "  {k:<width$}  {:<14} {}",
            v.type_description(),
            elide(&v.to_string())
        );
    }
    s.push_str("\ntensors:\n");
    let width = file
        .tensors()
        .iter()
        .map(|t| t.name.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        s,
        "  {:<width$}  {:<8} {:<22} {:>12}",
        "name", "type", "shape", "bytes"
    );
    for t in file.tensors() {
        let _ = writeln!(
            s,
            "  {:<width$}  {:<8} {:<22} {:>12}",
            t.name,
            t.ggml_type.name(),
            format!("{:?}", t.shape),
            t.size
        );
    }
    s.push_str("\ntotals by type:\n");
    let _ = writeln!(
        s,
        "  {:<8} {:>7} {:>14} {:>14}",
        "type", "tensors", "elements", "bytes"
    );
    for (ty, total) in totals_by_type(file) {
        let _ = writeln!(
            s,
            "  {:<8} {:>7} {:>14} {:>14}",
            ty.name(),
            total.tensors,
            total.elements,
            total.bytes
        );
    }
    s
}

/// Long strings (chat templates, mostly) are cut for the table; `--json` has them whole.
fn elide(text: &str) -> String {
    const MAX_CHARS: usize = 120;
    let one_line = text.replace('\n', "\\n");
    if one_line.chars().count() <= MAX_CHARS {
        return one_line;
    }
    let head: String = one_line.chars().take(MAX_CHARS).collect();
    format!("{head}... ({} chars)", one_line.chars().count())
}

/// Arrays become `{type, len, items}` with at most this many items; the tokenizer arrays of a
/// real model would otherwise be megabytes of JSON.
const JSON_ARRAY_ITEMS: usize = 16;

fn value_json(v: &Value) -> Json {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::Array(a) => json!({
            "item_type": a.item_type.name(),
            "len": a.len(),
            "items": a.items.iter().take(JSON_ARRAY_ITEMS).map(value_json).collect::<Vec<_>>(),
            "truncated": a.len() > JSON_ARRAY_ITEMS,
        }),
    }
}

fn summary_json(file: &GgufFile) -> Json {
    let md = file.metadata();
    let metadata: serde_json::Map<String, Json> = md
        .iter()
        .map(|(k, v)| {
            (
                k.to_owned(),
                json!({"type": v.type_description(), "value": value_json(v)}),
            )
        })
        .collect();
    let architecture: serde_json::Map<String, Json> = architecture_summary(md)
        .into_iter()
        .map(|(k, v)| (k.to_owned(), json!(v)))
        .collect();
    let tensors: Vec<Json> = file
        .tensors()
        .iter()
        .map(|t| json!({"name": t.name, "type": t.ggml_type.name(), "shape": t.shape, "bytes": t.size, "offset": t.offset}))
        .collect();
    let totals: serde_json::Map<String, Json> = totals_by_type(file)
        .into_iter()
        .map(|(ty, t)| {
            (
                ty.name().to_owned(),
                json!({"tensors": t.tensors, "elements": t.elements, "bytes": t.bytes}),
            )
        })
        .collect();
    json!({
        "file": file.path().map(|p| p.display().to_string()),
        "version": file.version(),
        "file_bytes": file.file_size(),
        "alignment": file.header().alignment,
        "parameters": file.tensors().iter().map(TensorInfo::n_elements).sum::<u64>(),
        "architecture": architecture,
        "metadata": metadata,
        "tensors": tensors,
        "totals_by_type": totals,
    })
}
