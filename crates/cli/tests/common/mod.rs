//! What every end-to-end test of the `plumb` binary needs.

use std::process::{Command, Output};

/// Runs the `plumb` binary built for this test run.
pub fn plumb(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_plumb"))
        .args(args)
        .output()
        .expect("plumb runs")
}
