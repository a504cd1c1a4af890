//! Trace files: a run's named intermediates as a GGUF file.
//!
//! Layout: `general.architecture = "trace"`; `trace.*` metadata keys for provenance; an I32
//! tensor `tokens` with the input ids; then one F32 tensor per intermediate, in the order the
//! forward pass produced them. This is the layout of llama.cpp's golden traces too, so a
//! plumb trace and a llama.cpp trace diff directly.

use std::path::Path;

use plumb_gguf::{GgmlType, GgufError, GgufFile, GgufWriter};
use plumb_model::ObservedTensor;

pub const ARCHITECTURE: &str = "trace";
pub const TOKENS_TENSOR: &str = "tokens";

/// Provenance of a trace. Every field is optional because traces come from other tools too.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct TraceInfo {
    pub model_file: Option<String>,
    pub model_sha256: Option<String>,
    pub prompt: Option<String>,
    pub backend: Option<String>,
    pub plumb_version: Option<String>,
    /// Free text naming the producer when it is not plumb (e.g. llama.cpp and its commit).
    pub reference: Option<String>,
}

const INFO_KEYS: [&str; 6] = [
    "trace.model_file",
    "trace.model_sha256",
    "trace.prompt",
    "trace.backend",
    "trace.plumb_version",
    "trace.reference",
];

impl TraceInfo {
    fn fields_mut(&mut self) -> [&mut Option<String>; 6] {
        [
            &mut self.model_file,
            &mut self.model_sha256,
            &mut self.prompt,
            &mut self.backend,
            &mut self.plumb_version,
            &mut self.reference,
        ]
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: not a trace file (general.architecture is {found:?}, expected \"trace\")")]
    NotATrace { path: String, found: String },
    #[error("{path}: trace tensor {tensor:?} is {found}, expected F32")]
    NotF32 {
        path: String,
        tensor: String,
        found: GgmlType,
    },
    #[error("trace tensor {tensor:?} has {len} values but shape {shape:?}")]
    ShapeMismatch {
        tensor: String,
        shape: Vec<usize>,
        len: usize,
    },
}

/// The named intermediates of one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub info: TraceInfo,
    pub tokens: Vec<i32>,
    /// In graph order.
    pub tensors: Vec<ObservedTensor>,
}

impl Trace {
    pub fn get(&self, name: &str) -> Option<&ObservedTensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    pub fn read(path: impl AsRef<Path>) -> Result<Self, TraceError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let file = GgufFile::open(path)?;
        let md = file.metadata();
        let arch = md.architecture().unwrap_or("");
        if arch != ARCHITECTURE {
            return Err(TraceError::NotATrace {
                path: shown,
                found: arch.to_owned(),
            });
        }
        let mut info = TraceInfo::default();
        for (slot, key) in info.fields_mut().into_iter().zip(INFO_KEYS) {
            *slot = md.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        }
        let mut trace = Trace {
            info,
            ..Trace::default()
        };
        for t in file.tensors() {
            let bytes = file.tensor_data(t);
            if t.name == TOKENS_TENSOR && t.ggml_type == GgmlType::I32 {
                trace.tokens = bytes
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect();
                continue;
            }
            if t.ggml_type != GgmlType::F32 {
                return Err(TraceError::NotF32 {
                    path: shown,
                    tensor: t.name.clone(),
                    found: t.ggml_type,
                });
            }
            trace.tensors.push(ObservedTensor {
                name: t.name.clone(),
                shape: t.shape.iter().map(|&d| d as usize).collect(),
                data: bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
                    .collect(),
            });
        }
        Ok(trace)
    }

    pub fn to_writer(&self) -> Result<GgufWriter, TraceError> {
        let mut w = GgufWriter::new();
        w.set("general.architecture", ARCHITECTURE);
        let mut info = self.info.clone();
        for (slot, key) in info.fields_mut().into_iter().zip(INFO_KEYS) {
            if let Some(v) = slot.take() {
                w.set(key, v);
            }
        }
        let tokens: Vec<u8> = self.tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        w.add_tensor(
            TOKENS_TENSOR,
            GgmlType::I32,
            &[self.tokens.len() as u64],
            tokens,
        )?;
        for t in &self.tensors {
            let n: usize = t.shape.iter().product();
            if n != t.data.len() {
                return Err(TraceError::ShapeMismatch {
                    tensor: t.name.clone(),
                    shape: t.shape.clone(),
                    len: t.data.len(),
                });
            }
            let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
            w.add_f32(&t.name, &shape, &t.data)?;
        }
        Ok(w)
    }

    pub fn write(&self, path: impl AsRef<Path>) -> Result<(), TraceError> {
        Ok(self.to_writer()?.write_file(path)?)
    }
}
