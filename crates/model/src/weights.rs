//! Weight tensors in the model file, and the loader that checks each against the metadata.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use plumb_gguf::{GgmlType, GgufFile, TensorInfo};

use crate::backend::{Backend, WeightUse};
use crate::{ModelError, Result};

/// One tensor of a GGUF file: its header entry and a handle on the mapped file that holds its
/// bytes. Cloning it is cheap and copies no data.
#[derive(Clone)]
pub struct WeightTensor {
    file: Arc<GgufFile>,
    info: TensorInfo,
}

impl WeightTensor {
    pub fn new(file: Arc<GgufFile>, info: TensorInfo) -> Self {
        WeightTensor { file, info }
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn ggml_type(&self) -> GgmlType {
        self.info.ggml_type
    }

    /// GGUF shape, ggml order: `shape()[0]` is the row length.
    pub fn shape(&self) -> &[u64] {
        &self.info.shape
    }

    /// Elements per row.
    pub fn row_len(&self) -> usize {
        self.info.row_len() as usize
    }

    pub fn n_rows(&self) -> usize {
        self.info.n_rows() as usize
    }

    pub fn n_elements(&self) -> usize {
        self.info.n_elements() as usize
    }

    /// All of the tensor's bytes, as stored in the file.
    pub fn bytes(&self) -> &[u8] {
        self.file.tensor_data(&self.info)
    }

    /// The stored bytes of row `i` (`i < n_rows()`).
    pub fn row_bytes(&self, i: usize) -> &[u8] {
        let len = self.info.row_bytes() as usize;
        &self.bytes()[i * len..(i + 1) * len]
    }
}

impl fmt::Debug for WeightTensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {:?}",
            self.info.name, self.info.ggml_type, self.info.shape
        )
    }
}

/// Takes tensors out of a file by name for an architecture's loader: checks each shape against
/// what the metadata implies, hands it to the backend, and remembers what was used so that
/// tensors the architecture does not know can be reported.
pub(crate) struct WeightLoader<'a, B: Backend> {
    file: &'a Arc<GgufFile>,
    backend: &'a B,
    used: HashSet<String>,
}

impl<'a, B: Backend> WeightLoader<'a, B> {
    pub fn new(file: &'a Arc<GgufFile>, backend: &'a B) -> Self {
        WeightLoader {
            file,
            backend,
            used: HashSet::new(),
        }
    }

    /// A required tensor of exactly this shape (ggml order; trailing 1s are insignificant):
    /// a matrix, or a vector when it has one dimension.
    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<B::Weight> {
        let info = self.file.require_tensor(name)?;
        self.take(info.clone(), shape, usage(shape))
    }

    /// A required table whose rows are looked up by token id.
    pub fn embedding(&mut self, name: &str, shape: &[usize]) -> Result<B::Weight> {
        let info = self.file.require_tensor(name)?;
        self.take(info.clone(), shape, WeightUse::Embedding)
    }

    /// A required matrix of `n_in`-wide rows whose consecutive runs of rows are separate
    /// projections fused into one tensor (phi3's `attn_qkv`, `ffn_up`): one weight per part,
    /// `parts[i]` rows each, each a view of its rows of the file.
    pub fn split_rows<const N: usize>(
        &mut self,
        name: &str,
        n_in: usize,
        parts: [usize; N],
    ) -> Result<[B::Weight; N]> {
        let weights = self.split(name, &[n_in, parts.iter().sum()], &parts)?;
        // One weight per part, so exactly N.
        Ok(weights
            .try_into()
            .unwrap_or_else(|_| unreachable!("one weight per part")))
    }

    /// A required stack of `n_expert` matrices of GGUF shape `[n_in, n_out]` (a mixture of
    /// experts' `ffn_*_exps`, shape `[n_in, n_out, n_expert]`): one weight per expert, each a
    /// view of its rows of the file.
    pub fn experts(
        &mut self,
        name: &str,
        n_in: usize,
        n_out: usize,
        n_expert: usize,
    ) -> Result<Vec<B::Weight>> {
        self.split(name, &[n_in, n_out, n_expert], &vec![n_out; n_expert])
    }

    /// Tensor `name` of `shape`, its rows cut into consecutive runs of `parts[i]` rows.
    fn split(&mut self, name: &str, shape: &[usize], parts: &[usize]) -> Result<Vec<B::Weight>> {
        let info = self.file.require_tensor(name)?.clone();
        check_shape(&info, shape)?;
        self.used.insert(info.name.clone());
        let row_bytes = info.row_bytes();
        let mut first = 0;
        parts
            .iter()
            .map(|&rows| {
                let part = TensorInfo {
                    name: format!("{name}[rows {first}..{}]", first + rows),
                    shape: vec![info.row_len(), rows as u64],
                    ggml_type: info.ggml_type,
                    offset: info.offset + first as u64 * row_bytes,
                    size: rows as u64 * row_bytes,
                };
                first += rows;
                let tensor = WeightTensor::new(Arc::clone(self.file), part);
                self.backend.load_weight(tensor, WeightUse::Matrix)
            })
            .collect()
    }

    /// A tensor that some files of the architecture have and others do not.
    pub fn optional(&mut self, name: &str, shape: &[usize]) -> Result<Option<B::Weight>> {
        match self.file.tensor_info(name) {
            Some(info) => self.take(info.clone(), shape, usage(shape)).map(Some),
            None => Ok(None),
        }
    }

    /// A small F32 tensor read to the host, e.g. `rope_freqs.weight`.
    pub fn optional_host_f32(&mut self, name: &str, shape: &[usize]) -> Result<Option<Vec<f32>>> {
        let Some(info) = self.file.tensor_info(name) else {
            return Ok(None);
        };
        check_shape(info, shape)?;
        if info.ggml_type != GgmlType::F32 {
            return Err(ModelError::TensorType {
                tensor: name.to_owned(),
                expected: "F32",
                found: info.ggml_type,
            });
        }
        self.used.insert(name.to_owned());
        let values = self
            .file
            .tensor_data(info)
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        Ok(Some(values))
    }

    /// Whether the file has a tensor of this name.
    pub fn has(&self, name: &str) -> bool {
        self.file.tensor_info(name).is_some()
    }

    /// Tensors in the file that no loader asked for. A model with weights plumb ignores would
    /// compute something else than its authors meant, so the caller warns about them.
    pub fn unused(&self) -> Vec<&str> {
        self.file
            .tensors()
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| !self.used.contains(*n))
            .collect()
    }

    fn take(&mut self, info: TensorInfo, shape: &[usize], usage: WeightUse) -> Result<B::Weight> {
        check_shape(&info, shape)?;
        self.used.insert(info.name.clone());
        self.backend
            .load_weight(WeightTensor::new(Arc::clone(self.file), info), usage)
    }
}

/// How a tensor of this expected shape is used, unless the caller says it is a table.
fn usage(shape: &[usize]) -> WeightUse {
    if shape.len() > 1 {
        WeightUse::Matrix
    } else {
        WeightUse::Vector
    }
}

fn check_shape(info: &TensorInfo, expected: &[usize]) -> Result<()> {
    fn trimmed(shape: &[u64]) -> &[u64] {
        let len = shape.iter().rposition(|&d| d != 1).map_or(0, |i| i + 1);
        &shape[..len]
    }
    let expected: Vec<u64> = expected.iter().map(|&d| d as u64).collect();
    if trimmed(&info.shape) != trimmed(&expected) {
        return Err(ModelError::TensorShape {
            tensor: info.name.clone(),
            expected,
            found: info.shape.clone(),
        });
    }
    Ok(())
}
