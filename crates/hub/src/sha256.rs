use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

const CHUNK: usize = 1 << 20;

/// Checks that `value` is a sha256 in hex and returns it in lowercase.
pub fn parse_sha256(value: &str) -> Result<String> {
    let value = value.trim();
    if value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(value.to_ascii_lowercase())
    } else {
        Err(Error::InvalidSha256 {
            value: value.to_string(),
        })
    }
}

/// The sha256 of a whole file, in lowercase hex (e.g. to record which model a trace came from).
pub fn sha256_file(path: &Path) -> Result<String> {
    hash_file(path, &ProgressBar::hidden())
}

/// The sha256 of a whole file, in lowercase hex, advancing `bar` by the bytes read.
pub(crate) fn hash_file(path: &Path, bar: &ProgressBar) -> Result<String> {
    let mut file = File::open(path).map_err(|e| Error::io(path, "opening", e))?;
    let mut hasher = Sha256::new();
    hash_reader(&mut file, &mut hasher, bar).map_err(|e| Error::io(path, "reading", e))?;
    Ok(to_hex(&hasher.finalize()))
}

/// A file being written from the start, whose sha256 is computed as the bytes go by, so a
/// finished download or assembly needs no second pass over the data.
pub(crate) struct HashingFile {
    path: PathBuf,
    file: File,
    hasher: Sha256,
    len: u64,
}

impl HashingFile {
    /// Creates (or empties) `path`.
    pub(crate) fn create(path: &Path) -> Result<Self> {
        let file = File::create(path).map_err(|e| Error::io(path, "creating", e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            hasher: Sha256::new(),
            len: 0,
        })
    }

    /// Opens `path` to append to what is already there (creating it if absent), hashing the
    /// existing bytes first.
    pub(crate) fn resume(path: &Path, bar: &ProgressBar) -> Result<Self> {
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, "opening", e))?;
        let mut hasher = Sha256::new();
        let len =
            hash_reader(&mut file, &mut hasher, bar).map_err(|e| Error::io(path, "reading", e))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            hasher,
            len,
        })
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Empties the file, to start over.
    pub(crate) fn restart(&mut self) -> Result<()> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)).map(drop))
            .map_err(|e| Error::io(&self.path, "truncating", e))?;
        self.hasher = Sha256::new();
        self.len = 0;
        Ok(())
    }

    pub(crate) fn write_all(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all(bytes)
            .map_err(|e| Error::io(&self.path, "writing", e))?;
        self.hasher.update(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// Flushes the data to disk and returns its sha256 in lowercase hex.
    pub(crate) fn finish(self) -> Result<String> {
        self.file
            .sync_all()
            .map_err(|e| Error::io(&self.path, "syncing", e))?;
        Ok(to_hex(&self.hasher.finalize()))
    }
}

/// Feeds the rest of `reader` to `hasher`; returns the number of bytes read.
fn hash_reader(
    reader: &mut impl Read,
    hasher: &mut Sha256,
    bar: &ProgressBar,
) -> std::io::Result<u64> {
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
        bar.inc(n as u64);
    }
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_hex_and_lowercases() {
        let upper = "B179C9523D0E6A0F98A330C7562B682750A6F8C8C15E5BC70EA373728110DB53";
        assert_eq!(parse_sha256(upper).unwrap(), upper.to_ascii_lowercase());
        assert!(parse_sha256("b179c9").is_err());
        assert!(parse_sha256(&"g".repeat(64)).is_err());
    }

    #[test]
    fn resume_hashes_existing_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"hello ").unwrap();
        let mut file = HashingFile::resume(&path, &ProgressBar::hidden()).unwrap();
        assert_eq!(file.len(), 6);
        file.write_all(b"world").unwrap();
        // sha256("hello world")
        assert_eq!(
            file.finish().unwrap(),
            "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
    }

    #[test]
    fn restart_forgets_previous_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"garbage").unwrap();
        let mut file = HashingFile::resume(&path, &ProgressBar::hidden()).unwrap();
        file.restart().unwrap();
        file.write_all(b"hello world").unwrap();
        assert_eq!(
            file.finish().unwrap(),
            hash_file(&path, &ProgressBar::hidden()).unwrap()
        );
        assert_eq!(std::fs::read(&path).unwrap(), b"hello world");
    }
}
