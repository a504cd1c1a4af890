use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How a pull reports to the person running it: status lines and progress bars, both on
/// stderr, so that stdout carries only results (the paths).
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    bars: bool,
    messages: bool,
}

impl Progress {
    /// Status lines on stderr; progress bars only when stderr is a terminal.
    pub fn stderr() -> Self {
        Self {
            bars: std::io::stderr().is_terminal(),
            messages: true,
        }
    }

    /// Reports nothing.
    pub fn hidden() -> Self {
        Self {
            bars: false,
            messages: false,
        }
    }

    /// Prints one status line, `what: message`.
    pub fn status(&self, what: &str, message: &str) {
        if self.messages {
            eprintln!("{what}: {message}");
        }
    }

    /// A byte-counting bar, with `total` bytes when known.
    pub fn bytes_bar(&self, label: &str, total: Option<u64>) -> ProgressBar {
        if !self.bars {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
        let template = if total.is_some() {
            "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}"
        } else {
            "{msg} {spinner} {bytes} {binary_bytes_per_sec} {elapsed}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(label.to_string());
        bar
    }
}
