//! The HTTPS downloader against a local server: resume, restart, verification, errors.

mod common;

use std::path::Path;

use common::server::{test_config, Behavior, Breaks, TestServer};
use common::{sha256_hex, test_body};
use plumb_hub::{partial_path, Error, HttpClient, HttpConfig, Progress, Puller};

const BODY_LEN: usize = 700_000;
const BREAK_AT: usize = 300_000;

fn server(honors_range: bool, breaks: Breaks) -> (TestServer, Vec<u8>) {
    let body = test_body(BODY_LEN);
    let server = TestServer::start(
        body.clone(),
        Behavior {
            honors_range,
            breaks,
        },
    );
    (server, body)
}

/// Downloads the server's file to `dest`, expecting `body`'s sha256; returns the sha256.
fn download_verified(server: &TestServer, dest: &Path, body: &[u8]) -> String {
    server
        .client()
        .download(
            &server.file_url(),
            dest,
            Some(&sha256_hex(body)),
            &Progress::hidden(),
        )
        .unwrap()
}

fn assert_landed(dest: &Path, body: &[u8]) {
    assert!(
        std::fs::read(dest).unwrap() == body,
        "downloaded bytes differ"
    );
    assert!(!partial_path(dest).exists(), "partial file left behind");
}

#[test]
fn downloads_and_verifies() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    let sha = download_verified(&server, &dest, &body);
    assert_eq!(sha, sha256_hex(&body));
    assert_landed(&dest, &body);
    assert_eq!(server.ranges(), vec![None]);
}

#[test]
fn resumes_after_the_connection_breaks() {
    let (server, body) = server(true, Breaks::FirstAfter(BREAK_AT));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    download_verified(&server, &dest, &body);
    assert_landed(&dest, &body);
    assert_eq!(
        server.ranges(),
        vec![None, Some(format!("bytes={BREAK_AT}-"))]
    );
}

#[test]
fn starts_over_when_the_server_ignores_range() {
    let (server, body) = server(false, Breaks::FirstAfter(BREAK_AT));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    download_verified(&server, &dest, &body);
    assert_landed(&dest, &body);
    assert_eq!(
        server.ranges(),
        vec![None, Some(format!("bytes={BREAK_AT}-"))]
    );
}

#[test]
fn resumes_a_partial_file_from_an_earlier_run() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    std::fs::write(partial_path(&dest), &body[..123_456]).unwrap();
    download_verified(&server, &dest, &body);
    assert_landed(&dest, &body);
    assert_eq!(server.ranges(), vec![Some("bytes=123456-".to_string())]);
}

#[test]
fn stale_partial_is_replaced_when_range_is_ignored() {
    let (server, body) = server(false, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    std::fs::write(partial_path(&dest), vec![0xAA; 50_000]).unwrap();
    download_verified(&server, &dest, &body);
    assert_landed(&dest, &body);
}

#[test]
fn complete_partial_file_is_finished_on_416() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    std::fs::write(partial_path(&dest), &body).unwrap();
    download_verified(&server, &dest, &body);
    assert_landed(&dest, &body);
    assert_eq!(server.ranges(), vec![Some(format!("bytes={BODY_LEN}-"))]);
}

#[test]
fn sha256_mismatch_deletes_the_partial_and_names_both_hashes() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    let wrong = "0".repeat(64);
    let err = server
        .client()
        .download(&server.file_url(), &dest, Some(&wrong), &Progress::hidden())
        .unwrap_err();
    assert!(matches!(err, Error::Sha256Mismatch { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains(&server.file_url()), "{message}");
    assert!(message.contains(&wrong), "{message}");
    assert!(message.contains(&sha256_hex(&body)), "{message}");
    assert!(!dest.exists());
    assert!(!partial_path(&dest).exists());
}

#[test]
fn not_found_names_the_url() {
    let (server, _) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("missing.gguf");
    let url = format!("{}/files/missing.gguf", server.base);
    let err = server
        .client()
        .download(&url, &dest, None, &Progress::hidden())
        .unwrap_err();
    assert_eq!(err.to_string(), format!("GET {url}: HTTP 404 Not Found"));
    assert!(!dest.exists());
}

#[test]
fn gives_up_when_no_attempt_makes_progress() {
    let (server, _) = server(false, Breaks::AlwaysAfter(BREAK_AT));
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    let err = server
        .client()
        .download(&server.file_url(), &dest, None, &Progress::hidden())
        .unwrap_err();
    assert!(matches!(err, Error::GaveUp { attempts: 3, .. }), "{err}");
    assert!(err.to_string().contains(&server.file_url()), "{err}");
    assert_eq!(server.ranges().len(), 3);
    assert!(!dest.exists());
}

#[test]
fn untrusted_certificate_is_refused() {
    let (server, _) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("model.gguf");
    // Bundled roots only: the self-signed test certificate must not be accepted.
    let client = HttpClient::new(test_config()).unwrap();
    let err = client
        .download(&server.file_url(), &dest, None, &Progress::hidden())
        .unwrap_err();
    assert!(matches!(err, Error::Transfer { .. }), "not retried: {err}");
    let message = err.to_string();
    assert!(message.contains(&server.file_url()), "{message}");
    assert!(message.to_lowercase().contains("certificate"), "{message}");
    assert!(server.ranges().is_empty());
    assert!(!dest.exists());
}

#[test]
fn trusts_a_pem_file_like_ssl_cert_file() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("ca.pem");
    std::fs::write(&pem, &server.cert_pem).unwrap();
    let client = HttpClient::new(test_config().trust_pem_file(&pem).unwrap()).unwrap();
    let dest = dir.path().join("model.gguf");
    client
        .download(&server.file_url(), &dest, None, &Progress::hidden())
        .unwrap();
    assert_landed(&dest, &body);
}

#[test]
fn bad_certificate_files_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.pem");
    let err = HttpConfig::default().trust_pem_file(&missing).unwrap_err();
    assert!(err.to_string().contains("missing.pem"), "{err}");

    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "no certificates here\n").unwrap();
    let err = HttpClient::new(HttpConfig::default().trust_pem_file(&empty).unwrap()).unwrap_err();
    assert!(err.to_string().contains("empty.pem"), "{err}");
}

#[test]
fn pull_url_names_the_file_and_skips_a_verified_copy() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    let puller = Puller::new(dir.path())
        .with_progress(Progress::hidden())
        .with_http_client(server.client());
    let sha = sha256_hex(&body);
    let path = puller
        .pull_url(&server.file_url(), Some(&sha), None)
        .unwrap();
    assert_eq!(path, dir.path().join("model.gguf"));
    assert_landed(&path, &body);

    let again = puller
        .pull_url(&server.file_url(), Some(&sha.to_uppercase()), None)
        .unwrap();
    assert_eq!(again, path);
    assert_eq!(
        server.ranges().len(),
        1,
        "a verified copy must not be fetched again"
    );

    let renamed = puller
        .pull_url(&server.file_url(), Some(&sha), Some("renamed.gguf"))
        .unwrap();
    assert_eq!(renamed, dir.path().join("renamed.gguf"));
    assert_landed(&renamed, &body);
}

#[test]
fn pull_url_refetches_a_copy_with_the_wrong_hash() {
    let (server, body) = server(true, Breaks::Never);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("model.gguf"), b"stale").unwrap();
    let puller = Puller::new(dir.path())
        .with_progress(Progress::hidden())
        .with_http_client(server.client());
    let path = puller
        .pull_url(&server.file_url(), Some(&sha256_hex(&body)), None)
        .unwrap();
    assert_landed(&path, &body);
}

#[test]
fn pull_url_rejects_what_it_cannot_use() {
    let dir = tempfile::tempdir().unwrap();
    let puller = Puller::new(dir.path()).with_progress(Progress::hidden());
    let err = puller
        .pull_url("http://127.0.0.1:1/model.gguf", None, None)
        .unwrap_err();
    assert!(err.to_string().contains("only https://"), "{err}");
    let err = puller
        .pull_url("https://127.0.0.1:1/", None, None)
        .unwrap_err();
    assert!(err.to_string().contains("--name"), "{err}");
    let err = puller
        .pull_url("https://127.0.0.1:1/m.gguf", Some("abc"), None)
        .unwrap_err();
    assert!(matches!(err, Error::InvalidSha256 { .. }), "{err}");
    let err = puller
        .pull_url("https://127.0.0.1:1/m.gguf", None, Some("../m.gguf"))
        .unwrap_err();
    assert!(err.to_string().contains("not a plain file name"), "{err}");
}
