//! `$SSL_CERT_FILE` replaces the bundled roots. Alone in its test binary, since it sets an
//! environment variable for the whole process.

mod common;

use common::server::{Behavior, Breaks, TestServer};
use common::test_body;
use plumb_hub::{HttpClient, Progress, CERT_FILE_ENV};

#[test]
fn ssl_cert_file_is_trusted() {
    let body = test_body(10_000);
    let server = TestServer::start(
        body.clone(),
        Behavior {
            honors_range: true,
            breaks: Breaks::Never,
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let pem = dir.path().join("proxy-ca.pem");
    std::fs::write(&pem, &server.cert_pem).unwrap();
    std::env::set_var(CERT_FILE_ENV, &pem);
    let client = HttpClient::from_env().unwrap();
    let dest = dir.path().join("model.gguf");
    client
        .download(&server.file_url(), &dest, None, &Progress::hidden())
        .unwrap();
    assert_eq!(std::fs::read(&dest).unwrap(), body);
}
