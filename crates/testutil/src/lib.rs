//! Test support shared by every crate's tests.
//!
//! The reference data that proves plumb correct (llama.cpp's golden outputs and ggml's
//! quantization vectors) is part of the repository, under `testdata/`: a test that needs it
//! fails when it is missing, because the checkout is then incomplete. Tests that need a model
//! skip themselves when it is not pulled, and say so on the real stderr, past the test
//! harness's capture, so that a skip is never silent in CI output.

pub mod golden;
mod rng;
pub mod synthetic;

pub use rng::Rng;

use std::io::Write;
use std::path::{Path, PathBuf};

/// Environment variable naming a directory that replaces `testdata/`, laid out as it is
/// (`golden/<model>/...`, `quant/quant-vectors.gguf`): to test against regenerated data.
const TESTDATA_ENV: &str = "PLUMB_SHARED";

/// The workspace root.
pub fn workspace_root() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // WASI has no canonicalize; the manifest's path is absolute there too.
    if cfg!(target_os = "wasi") {
        return root;
    }
    root.canonicalize().expect("workspace root exists")
}

/// The directory of pulled models: the hub's cache. WebAssembly tests cannot link the hub
/// (its TLS needs a C compiler for wasm), so there it is `$PLUMB_MODELS`, which
/// tools/test-wasm.sh sets to the hub's directory.
#[cfg(not(target_family = "wasm"))]
fn models_dir() -> PathBuf {
    plumb_hub::models_dir()
}

#[cfg(target_family = "wasm")]
fn models_dir() -> PathBuf {
    std::env::var_os("PLUMB_MODELS")
        .map(PathBuf::from)
        .unwrap_or_default()
}

/// `$PLUMB_SHARED` when it is set, else the repository's `testdata/`.
fn testdata_dir() -> PathBuf {
    std::env::var_os(TESTDATA_ENV)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("testdata"))
}

/// A file of the reference data, `testdata/<relative>`. Panics, naming the path, when it is
/// missing: the repository carries every such file, so a missing one is a broken checkout or
/// a `$PLUMB_SHARED` without testdata/'s layout, never a reason to skip.
pub fn testdata(relative: &str) -> PathBuf {
    let path = testdata_dir().join(relative);
    assert!(
        path.is_file(),
        "reference data {} is missing{}",
        path.display(),
        match std::env::var_os(TESTDATA_ENV) {
            Some(dir) if !dir.is_empty() => format!(
                " ({TESTDATA_ENV}={} must be laid out as testdata/ is)",
                dir.to_string_lossy()
            ),
            _ => " from the checkout (testdata/ is part of the repository)".to_string(),
        }
    );
    path
}

/// The path of a cached model (`<cache>/<name>.gguf`), or `None` after a loud skip notice.
pub fn model(test: &str, name: &str) -> Option<PathBuf> {
    let path = models_dir().join(format!("{name}.gguf"));
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

/// Instruction sets (comma-separated, as the kernels name them) that the test runner chose a
/// CPU without: tools/test-aarch64.sh runs the kernel tests on qemu's cortex-a53 with
/// `neon-dotprod,neon-i8mm`, to test the NEON kernels alone.
const CPU_LACKS_ENV: &str = "PLUMB_CPU_LACKS";

/// Whether the CPU has the instruction set `isa`, given what run-time detection found. An
/// absence that `$PLUMB_CPU_LACKS` declares is the expected result of that run and passes
/// quietly; any other absence is skipped loudly. A declared absence that detection contradicts
/// fails: the CPU is not the one the runner meant, or detection is wrong.
pub fn cpu_has(test: &str, isa: &str, detected: bool) -> bool {
    let declared_absent = std::env::var(CPU_LACKS_ENV)
        .is_ok_and(|names| names.split(',').any(|name| name.trim() == isa));
    assert!(
        !(declared_absent && detected),
        "{CPU_LACKS_ENV} says this CPU lacks {isa}, but run-time detection found it"
    );
    if !detected && !declared_absent {
        skip(test, &format!("this CPU lacks {isa}"));
    }
    detected
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
