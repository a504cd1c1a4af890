//! Writing a GGUF file whose tensor data arrives piece by piece, so that a file larger than
//! memory can be written: the tensors are declared up front (the header holds their offsets),
//! then their bytes are appended in declaration order.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::writer::{alignment, check_tensor, encode_header, partial_path, TensorLayout};
use crate::{GgmlType, GgufError, Metadata, Result};

/// A tensor as declared before its data: name, type and shape (in ggml order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub ggml_type: GgmlType,
    pub shape: Vec<u64>,
}

/// Streams one GGUF file to disk. Like [`crate::GgufWriter::write_file`] it writes to a
/// temporary file beside the target and renames it only once [`finish`](Self::finish) has
/// checked that every tensor is complete; dropped unfinished, it removes the temporary file.
/// The bytes are the same as `GgufWriter` writes for the same metadata and tensors. Errors
/// name the target path, the one the caller knows.
pub struct GgufStreamWriter {
    path: PathBuf,
    tmp: PathBuf,
    out: BufWriter<File>,
    /// Each declared tensor's name and data size.
    tensors: Vec<(String, u64)>,
    alignment: u64,
    /// The tensor whose bytes come next, and how many of them were written.
    current: usize,
    filled: u64,
    renamed: bool,
}

impl GgufStreamWriter {
    /// Checks the tensors as `GgufWriter::add_tensor` does, creates the temporary file and
    /// writes the header.
    pub fn create(
        path: impl AsRef<Path>,
        metadata: &Metadata,
        tensors: &[TensorSpec],
    ) -> Result<Self> {
        let path = path.as_ref().to_owned();
        let alignment = alignment(metadata)?;
        let mut sized = Vec::with_capacity(tensors.len());
        for (i, t) in tensors.iter().enumerate() {
            let earlier = tensors[..i].iter().map(|e| e.name.as_str());
            let size = check_tensor(&t.name, t.ggml_type, &t.shape, earlier)?;
            sized.push((t.name.clone(), size));
        }
        let layouts = tensors
            .iter()
            .zip(&sized)
            .map(|(t, &(_, size))| TensorLayout {
                name: &t.name,
                shape: &t.shape,
                ggml_type: t.ggml_type,
                size,
            });
        let (header, _) = encode_header(metadata, layouts, alignment);

        // The temporary file of a directory's path would be its sibling, and the final rename
        // would fail only after all the data was written.
        if path.is_dir() {
            return Err(GgufError::Io {
                path,
                source: std::io::ErrorKind::IsADirectory.into(),
            });
        }
        let tmp = partial_path(&path);
        let file = File::create(&tmp).map_err(|source| GgufError::Io {
            path: path.clone(),
            source,
        })?;
        let mut writer = GgufStreamWriter {
            path,
            tmp,
            out: BufWriter::new(file),
            tensors: sized,
            alignment,
            current: 0,
            filled: 0,
            renamed: false,
        };
        writer.put(&header)?;
        writer.skip_complete()?;
        Ok(writer)
    }

    /// Appends the next bytes of tensor data; a call may end one tensor and go on into the
    /// next, the padding between them being written here.
    pub fn write_data(&mut self, mut bytes: &[u8]) -> Result<()> {
        while !bytes.is_empty() {
            let Some(&(_, size)) = self.tensors.get(self.current) else {
                return Err(GgufError::DataOverrun {
                    n_tensors: self.tensors.len(),
                });
            };
            let n = bytes.len().min((size - self.filled) as usize);
            self.put(&bytes[..n])?;
            self.filled += n as u64;
            bytes = &bytes[n..];
            self.skip_complete()?;
        }
        Ok(())
    }

    /// Checks that every tensor got all its bytes, syncs the file and gives it its name.
    pub fn finish(mut self) -> Result<()> {
        if let Some((name, size)) = self.tensors.get(self.current) {
            return Err(GgufError::DataIncomplete {
                tensor: name.clone(),
                written: self.filled,
                size: *size,
            });
        }
        let io = |source| GgufError::Io {
            path: self.path.clone(),
            source,
        };
        self.out.flush().map_err(io)?;
        self.out.get_ref().sync_all().map_err(io)?;
        std::fs::rename(&self.tmp, &self.path).map_err(io)?;
        self.renamed = true;
        Ok(())
    }

    /// Moves past every tensor that is complete (including empty ones), writing the padding
    /// that aligns the next one.
    fn skip_complete(&mut self) -> Result<()> {
        while let Some(&(_, size)) = self.tensors.get(self.current) {
            if self.filled < size {
                break;
            }
            self.current += 1;
            self.filled = 0;
            if self.current < self.tensors.len() {
                let padding = size.next_multiple_of(self.alignment) - size;
                self.put(&vec![0; padding as usize])?;
            }
        }
        Ok(())
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out.write_all(bytes).map_err(|source| GgufError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

impl Drop for GgufStreamWriter {
    fn drop(&mut self) {
        if !self.renamed {
            // Best effort: the error being reported is the one that stopped the write.
            let _ = std::fs::remove_file(&self.tmp);
        }
    }
}
