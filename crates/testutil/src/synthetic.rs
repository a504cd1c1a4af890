//! The synthetic architecture models (`plumb synth --arch`), written where a test needs them:
//! the same bytes llama.cpp ran to make `testdata/golden/synth-<name>/logits.gguf`.

use std::path::{Path, PathBuf};

use plumb_gguf::GgufFile;
use plumb_synth::{write_arch_model, ArchModel, FileType};
use sha2::Digest;

use crate::golden::GoldenLogits;
use crate::model;

/// The model whose tokenizer the synthetic models have (tools/reference/regenerate_synth.sh).
pub const TOKENIZER_MODEL: &str = "smollm2-135m";
/// The seed of their weights.
pub const SEED: u64 = 0;

/// A synthetic model file in a temporary folder that lives as long as this.
pub struct SyntheticModel {
    _dir: tempfile::TempDir,
    path: PathBuf,
}

impl SyntheticModel {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes synthetic model `name` with [`TOKENIZER_MODEL`]'s tokenizer and checks that it is
/// byte for byte the file llama.cpp ran for `golden`. A name may end in a file type,
/// `phi3-q8_0`: the model with its matrices of that type (`plumb synth --arch phi3 --type
/// q8_0`). `None`, after a loud skip, when the tokenizer's model is not pulled.
pub fn synthetic_model(test: &str, name: &str, golden: &GoldenLogits) -> Option<SyntheticModel> {
    let tokenizer = model(test, TOKENIZER_MODEL)?;
    let source = GgufFile::open(&tokenizer).expect("the tokenizer's model opens");
    let (arch, file_type) = match name.rsplit_once('-') {
        Some((arch, ty)) if FileType::named(ty).is_ok() => (arch, FileType::named(ty).ok()),
        _ => (name, None),
    };
    let arch_model = ArchModel::named(arch).expect("a synthetic model of that name");
    let dir = tempfile::tempdir().expect("a temporary folder");
    let path = dir.path().join(format!("synth-{name}.gguf"));
    write_arch_model(&arch_model, source.metadata(), &path, SEED, file_type)
        .expect("writing the model");
    // sha2 directly rather than plumb-hub's helper: the hub does not build for WebAssembly.
    let bytes = std::fs::read(&path).expect("reading the model back");
    let sha256: String = sha2::Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        sha256, golden.model_sha256,
        "synth-{name}: the file plumb writes is not the one llama.cpp ran; regenerate \
         testdata/golden/synth-{name} (tools/reference/regenerate_synth.sh)"
    );
    Some(SyntheticModel { _dir: dir, path })
}
