use std::path::PathBuf;

/// Environment variable that overrides the model cache directory.
pub const MODELS_ENV: &str = "PLUMB_MODELS";

/// The model cache directory: `$PLUMB_MODELS`, else `plumb/models` under the platform cache
/// directory (`~/.cache/plumb/models` on Linux), else `.plumb/models` in the working directory.
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(MODELS_ENV).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    dirs::cache_dir()
        .map(|d| d.join("plumb").join("models"))
        .unwrap_or_else(|| PathBuf::from(".plumb").join("models"))
}
