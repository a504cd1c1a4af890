//! A `plumb serve` process for end-to-end tests: started on a free port, stopped when
//! dropped.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// How long loading the model and binding may take.
const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Server {
    child: Child,
    pub port: u16,
}

impl Server {
    /// Starts `plumb serve -m MODEL --port 0 ARGS…` and waits for its listening line.
    pub fn start(model: &Path, args: &[&str]) -> Server {
        let mut child = Command::new(env!("CARGO_BIN_EXE_plumb"))
            .args(["serve", "-m", model.to_str().unwrap(), "--port", "0"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("plumb serve starts");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        // Reads stderr to its end, so that the server never blocks on a full pipe; the
        // lines are echoed for the test's output.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("[serve] {line}");
                if let Some(addr) = line.strip_prefix("plumb serve: listening on http://") {
                    let port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
                    let _ = tx.send(port);
                }
            }
        });
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(Some(port)) => Server { child, port },
            other => {
                let _ = child.kill();
                panic!("plumb serve did not print its listening line: {other:?}");
            }
        }
    }

    /// The server is still running.
    pub fn assert_alive(&mut self) {
        assert!(
            self.child.try_wait().unwrap().is_none(),
            "plumb serve exited"
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
