//! Writing GGUF version 3: metadata, tensor infos, then each tensor's data at an aligned offset.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::metadata::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::reader::{align_up, tensor_size, MAGIC, MAX_DIMS};
use crate::{GgmlType, GgufError, Metadata, Result, Value};

struct PendingTensor {
    name: String,
    shape: Vec<u64>,
    ggml_type: GgmlType,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes them as one GGUF file.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts from existing metadata, e.g. to rewrite a file.
    pub fn with_metadata(metadata: Metadata) -> Self {
        GgufWriter {
            metadata,
            tensors: Vec::new(),
        }
    }

    pub fn metadata_mut(&mut self) -> &mut Metadata {
        &mut self.metadata
    }

    /// Sets a metadata key (replacing an earlier value).
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) -> &mut Self {
        self.metadata.set(key, value);
        self
    }

    /// Adds a tensor. `shape` is in ggml order and `data` must be exactly the bytes that type and
    /// shape require.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ggml_type: GgmlType,
        shape: &[u64],
        data: Vec<u8>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let size = check_tensor(
            &name,
            ggml_type,
            shape,
            self.tensors.iter().map(|t| &*t.name),
        )?;
        if size != data.len() as u64 {
            return Err(GgufError::BadShape {
                tensor: name,
                shape: shape.to_vec(),
                reason: format!(
                    "{ggml_type} data of this shape is {size} bytes, {} were given",
                    data.len()
                ),
            });
        }
        self.tensors.push(PendingTensor {
            name,
            shape: shape.to_vec(),
            ggml_type,
            data,
        });
        Ok(self)
    }

    /// Adds an F32 tensor.
    pub fn add_f32(
        &mut self,
        name: impl Into<String>,
        shape: &[u64],
        values: &[f32],
    ) -> Result<&mut Self> {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, GgmlType::F32, shape, data)
    }

    /// Writes the whole file.
    pub fn write_to(&self, out: &mut impl Write) -> Result<()> {
        let alignment = alignment(&self.metadata)?;
        self.write_inner(out, alignment)
            .map_err(|source| GgufError::Io {
                path: "<gguf writer>".into(),
                source,
            })
    }

    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.write_to(&mut out)?;
        Ok(out)
    }

    /// Writes the file to `path`, via a temporary file beside it so that a failed write never
    /// leaves a half-written model under the final name.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let alignment = alignment(&self.metadata)?;
        let tmp = partial_path(path);
        let mut w = BufWriter::new(File::create(&tmp).map_err(io)?);
        self.write_inner(&mut w, alignment).map_err(io)?;
        w.into_inner()
            .map_err(|e| io(e.into_error()))?
            .sync_all()
            .map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)
    }

    fn write_inner(&self, w: &mut impl Write, alignment: u64) -> io::Result<()> {
        let layouts = self.tensors.iter().map(|t| TensorLayout {
            name: &t.name,
            shape: &t.shape,
            ggml_type: t.ggml_type,
            size: t.data.len() as u64,
        });
        let (header, offsets) = encode_header(&self.metadata, layouts, alignment);
        w.write_all(&header)?;
        let mut written = 0u64;
        for (t, &off) in self.tensors.iter().zip(&offsets) {
            w.write_all(&vec![0; (off - written) as usize])?;
            w.write_all(&t.data)?;
            written = off + t.data.len() as u64;
        }
        Ok(())
    }
}

/// The temporary file a model is written to before it is renamed to `path`.
pub(crate) fn partial_path(path: &Path) -> PathBuf {
    path.with_extension("gguf.partial")
}

/// The `general.alignment` of the metadata, or GGUF's default.
pub(crate) fn alignment(metadata: &Metadata) -> Result<u64> {
    match metadata.get(ALIGNMENT_KEY) {
        None => Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(a)) if a.is_power_of_two() => Ok(u64::from(*a)),
        Some(Value::U32(a)) => Err(GgufError::BadAlignment(u64::from(*a))),
        Some(v) => Err(GgufError::WrongType {
            key: ALIGNMENT_KEY.to_owned(),
            expected: "u32",
            found: v.type_description(),
        }),
    }
}

/// Checks a tensor about to be written (its dimension count, a name not among `earlier`,
/// whole blocks) and gives its data size in bytes.
pub(crate) fn check_tensor<'a>(
    name: &str,
    ggml_type: GgmlType,
    shape: &[u64],
    mut earlier: impl Iterator<Item = &'a str>,
) -> Result<u64> {
    if shape.is_empty() || shape.len() > MAX_DIMS as usize {
        return Err(GgufError::BadDimCount {
            tensor: name.to_owned(),
            n_dims: shape.len() as u32,
        });
    }
    if earlier.any(|e| e == name) {
        return Err(GgufError::DuplicateTensor(name.to_owned()));
    }
    tensor_size(name, shape, ggml_type)
}

/// What the header says of one tensor.
pub(crate) struct TensorLayout<'a> {
    pub name: &'a str,
    pub shape: &'a [u64],
    pub ggml_type: GgmlType,
    pub size: u64,
}

/// The header (magic, counts, metadata, tensor infos), padded to the alignment so that the
/// data section starts right after it, and each tensor's offset in the data section.
pub(crate) fn encode_header<'a>(
    metadata: &Metadata,
    tensors: impl ExactSizeIterator<Item = TensorLayout<'a>>,
    alignment: u64,
) -> (Vec<u8>, Vec<u64>) {
    let mut header = Vec::new();
    header.extend(MAGIC);
    header.extend(3u32.to_le_bytes());
    header.extend((tensors.len() as u64).to_le_bytes());
    header.extend((metadata.len() as u64).to_le_bytes());
    for (key, value) in metadata.iter() {
        encode_str(&mut header, key);
        header.extend((value.value_type() as u32).to_le_bytes());
        encode_value(&mut header, value);
    }
    let mut offset = 0u64;
    let mut offsets = Vec::with_capacity(tensors.len());
    for t in tensors {
        encode_str(&mut header, t.name);
        header.extend((t.shape.len() as u32).to_le_bytes());
        for d in t.shape {
            header.extend(d.to_le_bytes());
        }
        header.extend(t.ggml_type.id().to_le_bytes());
        header.extend(offset.to_le_bytes());
        offsets.push(offset);
        offset = align_up(offset + t.size, alignment);
    }
    let data_start = align_up(header.len() as u64, alignment);
    header.resize(data_start as usize, 0);
    (header, offsets)
}

fn encode_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend((s.len() as u64).to_le_bytes());
    buf.extend(s.as_bytes());
}

fn encode_value(buf: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => buf.push(*v),
        Value::I8(v) => buf.push(*v as u8),
        Value::U16(v) => buf.extend(v.to_le_bytes()),
        Value::I16(v) => buf.extend(v.to_le_bytes()),
        Value::U32(v) => buf.extend(v.to_le_bytes()),
        Value::I32(v) => buf.extend(v.to_le_bytes()),
        Value::F32(v) => buf.extend(v.to_le_bytes()),
        Value::Bool(v) => buf.push(u8::from(*v)),
        Value::String(s) => encode_str(buf, s),
        Value::U64(v) => buf.extend(v.to_le_bytes()),
        Value::I64(v) => buf.extend(v.to_le_bytes()),
        Value::F64(v) => buf.extend(v.to_le_bytes()),
        Value::Array(a) => {
            buf.extend((a.item_type as u32).to_le_bytes());
            buf.extend((a.items.len() as u64).to_le_bytes());
            for item in &a.items {
                encode_value(buf, item);
            }
        }
    }
}
