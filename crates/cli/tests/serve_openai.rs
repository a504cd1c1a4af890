//! `plumb serve` through the official `openai` Python client (tests/openai/compat.py): every
//! endpoint, streamed and not, n = 2, logprobs and the API key; at temperature 0 a chat
//! completion equals `plumb run --chat`. The client is pip-installed into a venv under the
//! target directory, once per pinned version. Without PyPI the test fails: it never skips.

mod common;
mod serve_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::plumb;
use plumb_testutil::require_model;
use serve_common::Server;

const OPENAI_VERSION: &str = "1.109.1";
const KEY: &str = "sk-plumb-test";
const SYSTEM: &str = "Answer in one short sentence.";
const USER: &str = "What is the capital of France?";
const MAX_TOKENS: &str = "48";

/// The venv's python, with `openai==OPENAI_VERSION` installed.
fn python_with_openai() -> PathBuf {
    // target/<profile>/plumb → target/
    let target = Path::new(env!("CARGO_BIN_EXE_plumb"))
        .ancestors()
        .nth(2)
        .expect("the binary is under target/");
    let venv = target.join(format!("openai-venv-{OPENAI_VERSION}"));
    let python = venv.join("bin/python");
    let check = format!("import openai, sys; sys.exit(openai.__version__ != {OPENAI_VERSION:?})");
    let ready = |python: &Path| {
        Command::new(python)
            .args(["-c", &check])
            .status()
            .is_ok_and(|s| s.success())
    };
    if ready(&python) {
        return python;
    }
    let status = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "python3 -m venv {} failed",
        venv.display()
    );
    let status = Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .arg(format!("openai=={OPENAI_VERSION}"))
        .status()
        .expect("pip runs");
    assert!(
        status.success() && ready(&python),
        "pip could not install openai=={OPENAI_VERSION} (is PyPI reachable?)"
    );
    python
}

#[test]
fn the_openai_client_works_against_plumb_serve() {
    let model = require_model!("smollm2-135m");
    let python = python_with_openai();
    let model_arg = model.to_str().unwrap();

    let run = plumb(&[
        "run", "-m", model_arg, "--chat", "--system", SYSTEM, "-p", USER, "--temp", "0", "-n",
        MAX_TOKENS, "-c", "2048",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let expected = String::from_utf8(run.stdout).unwrap();
    let expected = expected.strip_suffix('\n').unwrap_or(&expected);

    let mut server = Server::start(
        &model,
        &[
            "-c",
            "2048",
            "-np",
            "2",
            "--api-key",
            KEY,
            "--alias",
            "smollm2",
            "-b",
            "256",
        ],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai/compat.py");
    let output = Command::new(&python)
        .arg(&script)
        .env(
            "PLUMB_BASE_URL",
            format!("http://127.0.0.1:{}", server.port),
        )
        .env("PLUMB_API_KEY", KEY)
        .env("PLUMB_MODEL", "smollm2")
        .env("PLUMB_SYSTEM", SYSTEM)
        .env("PLUMB_USER", USER)
        .env("PLUMB_EXPECTED_CHAT", expected)
        .env("PLUMB_MAX_TOKENS", MAX_TOKENS)
        .output()
        .expect("the script runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the openai suite failed:\n{stdout}\n{stderr}"
    );
    assert!(stdout.contains("openai compatibility:"), "{stdout}");
    server.assert_alive();
}
