//! Generated tokens per second over the last few seconds, for the `tokens/s` gauge: recent
//! enough to show the current load, long enough not to jump with every step.

use std::collections::VecDeque;
use std::time::Duration;
use web_time::Instant;

/// How far back the rate looks.
const WINDOW: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub(crate) struct TokenRate {
    /// When each recent step started, and the tokens it generated.
    steps: VecDeque<(Instant, usize)>,
    tokens: usize,
}

impl TokenRate {
    /// Records a step that started at `start` and generated `tokens`, and returns the rate
    /// from the oldest step in the window until now.
    pub fn record(&mut self, start: Instant, tokens: usize) -> f64 {
        let now = Instant::now();
        self.steps.push_back((start, tokens));
        self.tokens += tokens;
        while let Some(&(at, n)) = self.steps.front() {
            if now.duration_since(at) <= WINDOW {
                break;
            }
            self.steps.pop_front();
            self.tokens -= n;
        }
        let since = self.steps.front().map_or(now, |&(at, _)| at);
        self.tokens as f64 / now.duration_since(since).as_secs_f64().max(1e-6)
    }

    /// Forgets everything: generation paused.
    pub fn reset(&mut self) {
        self.steps.clear();
        self.tokens = 0;
    }
}
