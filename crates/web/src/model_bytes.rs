//! A model file streamed into wasm memory: one buffer, allocated once from the file's length,
//! that the chunks are copied into as they arrive and that becomes the GGUF file's storage.

use plumb_gguf::GgufFile;

use crate::WebError;

/// The largest model file the page loads: the largest single allocation of 32-bit
/// WebAssembly (Rust allows at most `isize::MAX` bytes there), 2 GiB less one byte. The rest
/// of the 4 GiB address space holds the KV cache, the activations and the tokenizer.
pub const MAX_MODEL_BYTES: u64 = i32::MAX as u64;

/// The bytes of a model file as they arrive.
pub struct ModelBytes {
    bytes: Vec<u8>,
    expected: u64,
}

impl ModelBytes {
    /// A buffer for a file of `len` bytes; a file over [`MAX_MODEL_BYTES`] is refused before
    /// anything is allocated.
    pub fn new(len: u64) -> Result<ModelBytes, WebError> {
        if len == 0 {
            return Err(WebError::Empty);
        }
        if len > MAX_MODEL_BYTES {
            return Err(WebError::TooLarge { len });
        }
        let mut bytes = Vec::new();
        bytes
            .try_reserve_exact(len as usize)
            .map_err(|_| WebError::OutOfMemory { len })?;
        Ok(ModelBytes {
            bytes,
            expected: len,
        })
    }

    /// Appends the next chunk of the file. The buffer never grows (so never moves or copies
    /// what it holds): more bytes than announced are an error.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), WebError> {
        let received = self.received() + chunk.len() as u64;
        if received > self.expected {
            return Err(WebError::TooManyBytes {
                expected: self.expected,
                received,
            });
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// Bytes received so far.
    pub fn received(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// The file's announced length.
    pub fn expected(&self) -> u64 {
        self.expected
    }

    /// The complete file, its header validated by the GGUF reader, which keeps the buffer as
    /// the file's storage.
    pub fn into_gguf(self) -> Result<GgufFile, WebError> {
        if self.received() < self.expected {
            return Err(WebError::TooFewBytes {
                expected: self.expected,
                received: self.received(),
            });
        }
        Ok(GgufFile::from_bytes(self.bytes)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_over_the_limit_is_refused_with_its_size() {
        let err = ModelBytes::new(5_000_000_000).err().unwrap();
        let message = err.to_string();
        assert!(message.contains("5000000000 bytes (4.66 GiB)"), "{message}");
        assert!(message.contains("2147483647"), "{message}");
        assert!(ModelBytes::new(0).is_err());
    }

    #[test]
    fn chunks_fill_the_buffer_without_moving_it() {
        let mut bytes = ModelBytes::new(10).unwrap();
        let start = bytes.bytes.as_ptr();
        bytes.push(&[1; 4]).unwrap();
        bytes.push(&[2; 6]).unwrap();
        assert_eq!(bytes.bytes.as_ptr(), start);
        assert_eq!(bytes.received(), 10);
        let err = bytes.push(&[3]).err().unwrap();
        assert!(matches!(
            err,
            WebError::TooManyBytes {
                expected: 10,
                received: 11
            }
        ));
    }

    #[test]
    fn bytes_that_are_not_gguf_or_too_few_say_so() {
        let mut bytes = ModelBytes::new(8).unwrap();
        bytes.push(b"<html>").unwrap();
        let err = bytes.into_gguf().err().unwrap();
        assert_eq!(
            err.to_string(),
            "the model file was announced as 8 bytes, and only 6 arrived"
        );
        let mut bytes = ModelBytes::new(8).unwrap();
        bytes.push(b"<html>\n\n").unwrap();
        let message = bytes.into_gguf().err().unwrap().to_string();
        assert!(message.contains("not a GGUF file"), "{message}");
        assert!(message.contains("magic"), "{message}");
    }
}
