//! Test support shared by every crate's tests.
//!
//! Tests that need reference data (`shared/`) or a model skip themselves when it is missing,
//! and say so on the real stderr, past the test harness's capture, so that a skip is never
//! silent in CI output.

pub mod golden;

use std::io::Write;
use std::path::{Path, PathBuf};

/// Environment variable that points at the shared reference data.
pub const SHARED_ENV: &str = "PLUMB_SHARED";

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("workspace root exists")
}

/// `$PLUMB_SHARED`, else `shared/` beside the repository.
pub fn shared_dir() -> Option<PathBuf> {
    let dir = std::env::var_os(SHARED_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("../shared"));
    dir.is_dir().then_some(dir)
}

/// A file under the shared directory, or `None` (after a loud skip notice) when it is absent.
pub fn shared_file(test: &str, relative: &str) -> Option<PathBuf> {
    let path = shared_dir().map(|d| d.join(relative));
    match path {
        Some(p) if p.exists() => Some(p),
        _ => {
            skip(
                test,
                &format!("shared file {relative} not found (set {SHARED_ENV} or put shared/ beside the repository)"),
            );
            None
        }
    }
}

/// The path of a cached model (`<cache>/<name>.gguf`), or `None` after a loud skip notice.
pub fn model(test: &str, name: &str) -> Option<PathBuf> {
    let path = plumb_hub::models_dir().join(format!("{name}.gguf"));
    if path.is_file() {
        Some(path)
    } else {
        skip(
            test,
            &format!(
                "model {} not found; run `plumb pull {name}`",
                path.display()
            ),
        );
        None
    }
}

/// Prints a skip notice on the process's real stderr.
pub fn skip(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// `let path = require_model!("smollm2-135m");` returns from the test, loudly, when the model
/// is missing.
#[macro_export]
macro_rules! require_model {
    ($name:expr) => {
        match $crate::model(module_path!(), $name) {
            Some(p) => p,
            None => return,
        }
    };
}

/// `let path = require_shared!("testdata/quant-vectors.gguf");` returns from the test, loudly,
/// when the file is missing.
#[macro_export]
macro_rules! require_shared {
    ($relative:expr) => {
        match $crate::shared_file(module_path!(), $relative) {
            Some(p) => p,
            None => return,
        }
    };
}
