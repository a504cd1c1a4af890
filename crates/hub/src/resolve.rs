use std::path::{Path, PathBuf};

use crate::cache::models_dir;
use crate::catalog::{self, known_names};
use crate::error::{Error, Result};
use crate::pull::Puller;

/// Turns what a user typed for a model into a file path.
///
/// A path to an existing file is returned as is. A catalog name gives its file in
/// [`models_dir`], pulled first (with progress on stderr) when absent; a file already there
/// is trusted, as pulls only ever leave verified files in place. Anything else is an error
/// listing the catalog names.
pub fn resolve_model(spec: &str) -> Result<PathBuf> {
    let path = Path::new(spec);
    if path.is_file() {
        return Ok(path.to_path_buf());
    }
    let Ok(entry) = catalog::find(spec) else {
        return Err(Error::UnknownModel {
            spec: spec.to_string(),
            known: known_names(),
        });
    };
    let dir = models_dir();
    let cached = dir.join(entry.file_name());
    if cached.is_file() {
        return Ok(cached);
    }
    Puller::new(dir).pull_catalog(entry)
}
