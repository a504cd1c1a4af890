use std::io::Read;
use std::path::{Path, PathBuf};

use indicatif::ProgressBar;
use ureq::http::{header, Response, StatusCode};

use crate::error::{Error, Result};
use crate::http_client::HttpClient;
use crate::progress::Progress;
use crate::sha256::HashingFile;

const READ_CHUNK: usize = 256 * 1024;

/// The file a download of `dest` is written to until it is complete and verified: it stays
/// behind when a download is interrupted, and the next download of `dest` resumes from it.
pub fn partial_path(dest: &Path) -> PathBuf {
    let mut name = dest.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    dest.with_file_name(name)
}

/// How one request of a download ended, when it did not fail for good.
enum Attempt {
    /// The partial file holds the whole resource.
    Complete,
    /// The transfer stopped early; `progressed` says whether this request added bytes to a
    /// resumed transfer (starting over is not progress).
    Interrupted { reason: String, progressed: bool },
}

impl HttpClient {
    /// Downloads `url` to `dest` and returns the file's sha256 (lowercase hex).
    ///
    /// Bytes go to `dest`'s [`partial_path`] first, resuming what a previous attempt left
    /// there with a `Range` request (a server that ignores the range is answered by starting
    /// over). A broken transfer is resumed, up to the configured number of attempts in a row
    /// that bring no new bytes. When `expected_sha256` is given and differs, the partial
    /// file is deleted and the error shows both hashes; otherwise the file is renamed to
    /// `dest`, so `dest` only ever holds a complete file.
    pub fn download(
        &self,
        url: &str,
        dest: &Path,
        expected_sha256: Option<&str>,
        progress: &Progress,
    ) -> Result<String> {
        let partial = partial_path(dest);
        let label = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| url.to_string());
        let bar = progress.bytes_bar(&label, None);
        let mut file = HashingFile::resume(&partial, &bar)?;
        if file.len() > 0 {
            tracing::info!(url, bytes = file.len(), "resuming download");
        }
        let mut failures = 0;
        loop {
            match self.attempt(url, &mut file, &bar)? {
                Attempt::Complete => break,
                Attempt::Interrupted { reason, progressed } => {
                    failures = if progressed { 1 } else { failures + 1 };
                    if failures >= self.max_attempts {
                        bar.abandon();
                        return Err(Error::GaveUp {
                            url: url.to_string(),
                            attempts: failures,
                            received: file.len(),
                            last: reason,
                        });
                    }
                    tracing::warn!(url, %reason, "download interrupted, retrying");
                    std::thread::sleep(self.retry_delay);
                }
            }
        }
        bar.finish_and_clear();
        let actual = file.finish()?;
        if let Some(expected) = expected_sha256 {
            if actual != expected {
                std::fs::remove_file(&partial).map_err(|e| Error::io(&partial, "removing", e))?;
                return Err(Error::Sha256Mismatch {
                    what: url.to_string(),
                    expected: expected.to_string(),
                    actual,
                });
            }
        }
        std::fs::rename(&partial, dest).map_err(|e| Error::io(dest, "renaming into place", e))?;
        Ok(actual)
    }

    /// One request, continuing from what `file` holds.
    fn attempt(&self, url: &str, file: &mut HashingFile, bar: &ProgressBar) -> Result<Attempt> {
        let offset = file.len();
        let mut request = self.agent.get(url);
        if offset > 0 {
            request = request.header(header::RANGE, format!("bytes={offset}-"));
        }
        let response = match request.call() {
            Ok(response) => response,
            Err(e) if is_transient(&e) => {
                return Ok(Attempt::Interrupted {
                    reason: e.to_string(),
                    progressed: false,
                })
            }
            Err(e) => {
                return Err(Error::Transfer {
                    url: url.to_string(),
                    source: e,
                })
            }
        };
        let status = response.status();
        let total = match status {
            StatusCode::OK => {
                if offset > 0 {
                    tracing::info!(url, "server ignored the range request; starting over");
                    file.restart()?;
                }
                response.body().content_length()
            }
            StatusCode::PARTIAL_CONTENT => match content_range(&response) {
                Some(range) if range.start == Some(offset) => range
                    .total
                    .or_else(|| response.body().content_length().map(|len| offset + len)),
                _ => {
                    file.restart()?;
                    bar.set_position(0);
                    return Ok(Attempt::Interrupted {
                        reason: "server answered with another byte range; starting over".into(),
                        progressed: false,
                    });
                }
            },
            StatusCode::RANGE_NOT_SATISFIABLE if offset > 0 => {
                // The partial file may already hold the whole resource.
                if content_range(&response).and_then(|range| range.total) == Some(offset) {
                    return Ok(Attempt::Complete);
                }
                file.restart()?;
                bar.set_position(0);
                return Ok(Attempt::Interrupted {
                    reason: format!("server cannot send bytes from {offset} on; starting over"),
                    progressed: false,
                });
            }
            _ => {
                return Err(Error::HttpStatus {
                    url: url.to_string(),
                    status: format!(
                        "{} {}",
                        status.as_u16(),
                        status.canonical_reason().unwrap_or("")
                    )
                    .trim_end()
                    .to_string(),
                })
            }
        };
        if let Some(total) = total {
            bar.set_length(total);
        }
        bar.set_position(file.len());
        let resumed_from = (status == StatusCode::PARTIAL_CONTENT).then_some(offset);
        let mut body = response.into_body().into_reader();
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            let n = match body.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Ok(Attempt::Interrupted {
                        reason: format!("transfer broke after {} bytes: {e}", file.len()),
                        progressed: resumed_from.is_some_and(|from| file.len() > from),
                    })
                }
            };
            file.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
        match total {
            Some(total) if file.len() < total => Ok(Attempt::Interrupted {
                reason: format!("connection closed after {} of {total} bytes", file.len()),
                progressed: resumed_from.is_some_and(|from| file.len() > from),
            }),
            Some(total) if file.len() > total => {
                file.restart()?;
                bar.set_position(0);
                Ok(Attempt::Interrupted {
                    reason: format!(
                        "received more than the announced {total} bytes; starting over"
                    ),
                    progressed: false,
                })
            }
            _ => Ok(Attempt::Complete),
        }
    }
}

/// Failures worth retrying: the network, not the request. TLS failures (an untrusted
/// certificate, say) reach here as I/O errors of kind `InvalidData` and are not retried.
fn is_transient(error: &ureq::Error) -> bool {
    match error {
        ureq::Error::Io(e) => e.kind() != std::io::ErrorKind::InvalidData,
        _ => matches!(
            error,
            ureq::Error::Timeout(_)
                | ureq::Error::ConnectionFailed
                | ureq::Error::Protocol(_)
                | ureq::Error::BodyStalled
        ),
    }
}

/// A `Content-Range: bytes START-END/TOTAL` header (`START-END` is `*` in a 416 answer,
/// `TOTAL` is `*` when unknown).
struct ContentRange {
    start: Option<u64>,
    total: Option<u64>,
}

fn content_range<B>(response: &Response<B>) -> Option<ContentRange> {
    let value = response
        .headers()
        .get(header::CONTENT_RANGE)?
        .to_str()
        .ok()?;
    parse_content_range(value)
}

fn parse_content_range(value: &str) -> Option<ContentRange> {
    let (range, total) = value.trim().strip_prefix("bytes ")?.split_once('/')?;
    let start = match range.trim() {
        "*" => None,
        range => Some(range.split_once('-')?.0.trim().parse().ok()?),
    };
    let total = match total.trim() {
        "*" => None,
        total => Some(total.parse().ok()?),
    };
    Some(ContentRange { start, total })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_range_forms() {
        let r = parse_content_range("bytes 100-199/1000").unwrap();
        assert_eq!((r.start, r.total), (Some(100), Some(1000)));
        let r = parse_content_range("bytes 5-9/*").unwrap();
        assert_eq!((r.start, r.total), (Some(5), None));
        let r = parse_content_range("bytes */1000").unwrap();
        assert_eq!((r.start, r.total), (None, Some(1000)));
        assert!(parse_content_range("items 1-2/3").is_none());
        assert!(parse_content_range("bytes x-2/3").is_none());
    }

    #[test]
    fn partial_path_appends_suffix() {
        assert_eq!(
            partial_path(Path::new("/m/model.gguf")),
            Path::new("/m/model.gguf.partial")
        );
    }
}
