//! Parsing and validating a GGUF header, and the file (memory-mapped, or one owned buffer) that
//! owns the tensor data.
//!
//! Every count, length and offset read from the file is checked against the bytes that remain
//! before anything is allocated for it, so a hostile header cannot make the reader allocate
//! more than the file's own size.

use std::collections::HashSet;
use std::ops::Deref;
use std::path::{Path, PathBuf};

#[cfg(any(unix, windows))]
use memmap2::Mmap;

use crate::metadata::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT};
use crate::value::{Array, ValueType};
use crate::{GgmlType, GgufError, Metadata, Result, Value};

pub const MAGIC: [u8; 4] = *b"GGUF";
/// ggml's `GGML_MAX_DIMS`.
pub const MAX_DIMS: u32 = 4;
/// Arrays nested deeper than this are rejected; no real file nests at all beyond one level,
/// and the limit keeps recursion bounded.
const MAX_ARRAY_DEPTH: usize = 8;

/// One tensor's entry in the header. `shape` is in ggml order: `shape[0]` is the row length
/// (the fastest-varying dimension).
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    pub shape: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Offset from the start of the data section.
    pub offset: u64,
    /// Bytes of data, derived from type and shape.
    pub size: u64,
}

impl TensorInfo {
    pub fn n_elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Elements per row, `shape[0]`.
    pub fn row_len(&self) -> u64 {
        self.shape[0]
    }

    /// Rows: the product of all dimensions but the first.
    pub fn n_rows(&self) -> u64 {
        self.shape[1..].iter().product()
    }

    /// Bytes per row.
    pub fn row_bytes(&self) -> u64 {
        self.size / self.n_rows().max(1)
    }
}

/// A parsed and validated header: everything in a GGUF file but the tensor data.
#[derive(Debug, Clone)]
pub struct GgufHeader {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

impl GgufHeader {
    /// Parses and validates the header of a whole GGUF file held in `bytes`: all tensor data
    /// must lie inside `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let mut r = Cursor { bytes, pos: 0 };
        let magic: [u8; 4] = r.take(4, "magic")?.try_into().expect("4 bytes");
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic });
        }
        let version = r.u32("version")?;
        if version.swap_bytes() <= 3 && version > 0xFFFF {
            return Err(GgufError::BigEndian);
        }
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let n_tensors = r.u64("tensor count")?;
        let n_kv = r.u64("metadata count")?;
        // A tensor info takes at least 8 (name) + 4 (n_dims) + 8 (one dim) + 4 + 8 bytes, and a
        // key/value pair at least 8 (key) + 4 (type) + 1 bytes.
        r.check_count(n_tensors, 32, "tensor count")?;
        r.check_count(n_kv, 13, "metadata count")?;

        let mut metadata = Metadata::new();
        for i in 0..n_kv {
            let key = r.string(&format!("metadata key #{i}"))?;
            let type_id = r.u32(&format!("type of metadata key {key:?}"))?;
            let value_type =
                ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                    key: key.clone(),
                    type_id,
                })?;
            let value = r.value(value_type, &key, 0)?;
            metadata.insert(key, value)?;
        }

        let alignment = match metadata.get(ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) => u64::from(*a),
            Some(v) => {
                return Err(GgufError::WrongType {
                    key: ALIGNMENT_KEY.to_owned(),
                    expected: "u32",
                    found: v.type_description(),
                })
            }
        };
        if alignment == 0 || !alignment.is_power_of_two() {
            return Err(GgufError::BadAlignment(alignment));
        }

        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut names = HashSet::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = r.string(&format!("name of tensor #{i}"))?;
            if !names.insert(name.clone()) {
                return Err(GgufError::DuplicateTensor(name));
            }
            let n_dims = r.u32(&format!("dimension count of tensor {name:?}"))?;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::BadDimCount {
                    tensor: name,
                    n_dims,
                });
            }
            let mut shape = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                shape.push(r.u64(&format!("dimension {d} of tensor {name:?}"))?);
            }
            let type_id = r.u32(&format!("type of tensor {name:?}"))?;
            let ggml_type =
                GgmlType::from_id(type_id).ok_or_else(|| GgufError::UnknownTensorType {
                    tensor: name.clone(),
                    type_id,
                })?;
            let offset = r.u64(&format!("data offset of tensor {name:?}"))?;
            let size = tensor_size(&name, &shape, ggml_type)?;
            tensors.push(TensorInfo {
                name,
                shape,
                ggml_type,
                offset,
                size,
            });
        }

        let data_offset = align_up(r.pos as u64, alignment);
        if !tensors.is_empty() && data_offset > bytes.len() as u64 {
            return Err(GgufError::Truncated {
                what: "padding before the data section".to_owned(),
                offset: r.pos as u64,
                needed: data_offset - r.pos as u64,
                available: r.remaining(),
            });
        }
        let data_len = (bytes.len() as u64).saturating_sub(data_offset);
        check_tensor_placement(&tensors, alignment, data_len)?;

        Ok(GgufHeader {
            version,
            metadata,
            tensors,
            alignment,
            data_offset,
        })
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

/// Bytes a tensor of this type and shape takes, with every failure named.
pub(crate) fn tensor_size(name: &str, shape: &[u64], ggml_type: GgmlType) -> Result<u64> {
    let bad = |reason: String| GgufError::BadShape {
        tensor: name.to_owned(),
        shape: shape.to_vec(),
        reason,
    };
    let block = ggml_type.block_size() as u64;
    if !shape[0].is_multiple_of(block) {
        return Err(bad(format!(
            "row length {} is not a multiple of the {ggml_type} block size {block}",
            shape[0]
        )));
    }
    let n_elements = shape
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n < i64::MAX as u64)
        .ok_or_else(|| bad("element count overflows".to_owned()))?;
    ggml_type
        .row_bytes(n_elements)
        .ok_or_else(|| bad("byte size overflows".to_owned()))
}

fn check_tensor_placement(tensors: &[TensorInfo], alignment: u64, data_len: u64) -> Result<()> {
    for t in tensors {
        if !t.offset.is_multiple_of(alignment) {
            return Err(GgufError::Misaligned {
                tensor: t.name.clone(),
                offset: t.offset,
                alignment,
            });
        }
        match t.offset.checked_add(t.size) {
            Some(end) if end <= data_len => {}
            end => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    offset: t.offset,
                    end: end.unwrap_or(u64::MAX),
                    data_len,
                })
            }
        }
    }
    let mut by_offset: Vec<&TensorInfo> = tensors.iter().filter(|t| t.size > 0).collect();
    by_offset.sort_by_key(|t| t.offset);
    for pair in by_offset.windows(2) {
        if pair[0].offset + pair[0].size > pair[1].offset {
            return Err(GgufError::OverlappingTensors {
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok(())
}

pub(crate) fn align_up(offset: u64, alignment: u64) -> u64 {
    offset.div_ceil(alignment) * alignment
}

struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> u64 {
        (self.bytes.len() - self.pos) as u64
    }

    fn take(&mut self, n: u64, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(GgufError::Truncated {
                what: what.to_owned(),
                offset: self.pos as u64,
                needed: n,
                available: self.remaining(),
            });
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(&self.bytes[start..self.pos])
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        Ok(self.take(N as u64, what)?.try_into().expect("N bytes"))
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn check_count(&self, count: u64, min_item_len: u64, what: &str) -> Result<()> {
        if count > self.remaining() / min_item_len {
            return Err(GgufError::CountTooLarge {
                what: what.to_owned(),
                count,
                available: self.remaining(),
            });
        }
        Ok(())
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let len = self.u64(what)?;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 {
            what: what.to_owned(),
        })
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value> {
        let what = || format!("value of metadata key {key:?}");
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what())?[0]),
            ValueType::I8 => Value::I8(self.array::<1>(&what())?[0] as i8),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what())?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what())?)),
            ValueType::U32 => Value::U32(self.u32(&what())?),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what())?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what())?)),
            ValueType::U64 => Value::U64(self.u64(&what())?),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what())?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what())?)),
            ValueType::Bool => match self.array::<1>(&what())?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => {
                    return Err(GgufError::WrongType {
                        key: key.to_owned(),
                        expected: "a bool (0 or 1)",
                        found: format!("byte {b}"),
                    })
                }
            },
            ValueType::String => Value::String(self.string(&what())?),
            ValueType::Array => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::WrongType {
                        key: key.to_owned(),
                        expected: "arrays nested at most 8 deep",
                        found: "deeper nesting".to_owned(),
                    });
                }
                let type_id = self.u32(&format!("array item type of metadata key {key:?}"))?;
                let item_type =
                    ValueType::from_id(type_id).ok_or_else(|| GgufError::UnknownValueType {
                        key: key.to_owned(),
                        type_id,
                    })?;
                let count = self.u64(&format!("array length of metadata key {key:?}"))?;
                self.check_count(
                    count,
                    item_type.min_encoded_len(),
                    &format!("array of metadata key {key:?}"),
                )?;
                let mut items = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    items.push(self.value(item_type, key, depth + 1)?);
                }
                Value::Array(Array { item_type, items })
            }
        })
    }
}

/// The bytes behind a [`GgufFile`]: a read-only memory map, or an owned buffer (WebAssembly,
/// which has no memory maps; tests, fuzzing).
enum Storage {
    #[cfg(any(unix, windows))]
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl Deref for Storage {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            #[cfg(any(unix, windows))]
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// An open GGUF file: its validated header, and zero-copy access to the tensor data.
pub struct GgufFile {
    path: Option<PathBuf>,
    storage: Storage,
    header: GgufHeader,
}

impl GgufFile {
    /// Maps the file read-only and validates its header.
    #[cfg(any(unix, windows))]
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let io = |source| GgufError::Io {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; plumb never writes model files while they are open, and
        // a file truncated underneath a running process is outside what any mmap reader handles.
        let mmap = unsafe { Mmap::map(&file) }.map_err(io)?;
        let header = GgufHeader::parse(&mmap)?;
        Ok(GgufFile {
            path: Some(path.to_owned()),
            storage: Storage::Mapped(mmap),
            header,
        })
    }

    /// Reads the whole file into memory and validates its header: targets without memory maps
    /// (WASI; in a browser there are no files, and [`GgufFile::from_bytes`] takes the bytes).
    #[cfg(not(any(unix, windows)))]
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| GgufError::Io {
            path: path.to_owned(),
            source,
        })?;
        let mut file = GgufFile::from_bytes(bytes)?;
        file.path = Some(path.to_owned());
        Ok(file)
    }

    /// Validates a GGUF file held in memory. The buffer becomes the file's storage: tensor data
    /// is borrowed from it, never copied.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self> {
        let header = GgufHeader::parse(&bytes)?;
        Ok(GgufFile {
            path: None,
            storage: Storage::Owned(bytes),
            header,
        })
    }

    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    pub fn version(&self) -> u32 {
        self.header.version
    }

    pub fn metadata(&self) -> &Metadata {
        &self.header.metadata
    }

    pub fn tensors(&self) -> &[TensorInfo] {
        &self.header.tensors
    }

    pub fn tensor_info(&self, name: &str) -> Option<&TensorInfo> {
        self.header.tensor(name)
    }

    /// The tensor's info, or an error naming the missing tensor.
    pub fn require_tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.tensor_info(name)
            .ok_or_else(|| GgufError::MissingTensor(name.to_owned()))
    }

    /// The raw bytes of a tensor, borrowed from the map.
    pub fn tensor_data(&self, info: &TensorInfo) -> &[u8] {
        let start = (self.header.data_offset + info.offset) as usize;
        &self.storage[start..start + info.size as usize]
    }

    /// The raw bytes of the named tensor.
    pub fn tensor_bytes(&self, name: &str) -> Result<&[u8]> {
        Ok(self.tensor_data(self.require_tensor(name)?))
    }

    /// Size of the whole file in bytes.
    pub fn file_size(&self) -> u64 {
        self.storage.len() as u64
    }
}
