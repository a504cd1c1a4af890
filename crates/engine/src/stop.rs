//! Stop strings in streamed text. Generated text arrives piece by piece, and a stop string
//! may span several pieces: text that could still be the start of a stop string is held back
//! until it either completes one (then it is dropped, never shown) or no longer can.

/// What to do with the text after a piece arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopScan {
    /// Show `emit`; generation goes on.
    Continue { emit: String },
    /// Show `emit`, the text before the stop string, and stop generating.
    Stop { emit: String, stop: String },
}

/// Finds the first occurrence of any of several stop strings in a stream of text.
#[derive(Debug, Clone, Default)]
pub struct StopMatcher {
    stops: Vec<String>,
    held: String,
}

impl StopMatcher {
    /// A matcher for `stops`; empty strings are ignored.
    pub fn new<S: Into<String>>(stops: impl IntoIterator<Item = S>) -> Self {
        StopMatcher {
            stops: stops
                .into_iter()
                .map(Into::into)
                .filter(|s: &String| !s.is_empty())
                .collect(),
            held: String::new(),
        }
    }

    /// Takes the next piece of text.
    pub fn push(&mut self, piece: &str) -> StopScan {
        self.held.push_str(piece);
        let first = self
            .stops
            .iter()
            .filter_map(|stop| self.held.find(stop.as_str()).map(|at| (at, stop)))
            .min_by_key(|&(at, stop)| (at, std::cmp::Reverse(stop.len())));
        if let Some((at, stop)) = first {
            let stop = stop.clone();
            let mut emit = std::mem::take(&mut self.held);
            emit.truncate(at);
            return StopScan::Stop { emit, stop };
        }
        let keep = self.partial_match_len();
        let emit = self.held[..self.held.len() - keep].to_owned();
        self.held.drain(..self.held.len() - keep);
        StopScan::Continue { emit }
    }

    /// Ends the stream: text held back as a possible stop string was just text.
    pub fn finish(&mut self) -> String {
        std::mem::take(&mut self.held)
    }

    /// The length of the longest end of the held text that begins some stop string.
    fn partial_match_len(&self) -> usize {
        let held = self.held.as_str();
        let longest = self.stops.iter().map(String::len).max().unwrap_or(0);
        (1..longest.min(held.len() + 1))
            .rev()
            .find(|&n| {
                let start = held.len() - n;
                held.is_char_boundary(start)
                    && self
                        .stops
                        .iter()
                        .any(|stop| stop.starts_with(&held[start..]))
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `pieces` and returns the text shown and the stop string hit.
    fn run(stops: &[&str], pieces: &[&str]) -> (String, Option<String>) {
        let mut matcher = StopMatcher::new(stops.iter().copied());
        let mut shown = String::new();
        for piece in pieces {
            match matcher.push(piece) {
                StopScan::Continue { emit } => shown.push_str(&emit),
                StopScan::Stop { emit, stop } => {
                    shown.push_str(&emit);
                    return (shown, Some(stop));
                }
            }
        }
        shown.push_str(&matcher.finish());
        (shown, None)
    }

    #[test]
    fn a_stop_string_across_pieces_is_found_and_not_shown() {
        assert_eq!(
            run(&["User:"], &["Hello", " there.\nUs", "er", ": next"]),
            ("Hello there.\n".to_owned(), Some("User:".to_owned()))
        );
        assert_eq!(
            run(&["</s>"], &["a<", "/", "s>b"]),
            ("a".to_owned(), Some("</s>".to_owned()))
        );
    }

    #[test]
    fn a_possible_start_is_held_back_until_it_cannot_match() {
        let mut matcher = StopMatcher::new(["STOP"]);
        assert_eq!(
            matcher.push("go ST"),
            StopScan::Continue {
                emit: "go ".to_owned()
            }
        );
        assert_eq!(
            matcher.push("O"),
            StopScan::Continue {
                emit: String::new()
            }
        );
        assert_eq!(
            matcher.push("RM"),
            StopScan::Continue {
                emit: "STORM".to_owned()
            }
        );
    }

    #[test]
    fn a_partial_match_at_the_end_is_text() {
        assert_eq!(
            run(&["STOP"], &["and ", "STO"]),
            ("and STO".to_owned(), None)
        );
    }

    #[test]
    fn the_earliest_of_several_stops_wins() {
        assert_eq!(
            run(&["b", "abc"], &["xab", "c"]),
            ("xa".to_owned(), Some("b".to_owned()))
        );
        assert_eq!(
            run(&["bc", "abcd"], &["xabcd"]),
            ("x".to_owned(), Some("abcd".to_owned()))
        );
    }

    #[test]
    fn multi_byte_text_is_never_split() {
        // "é" shares its first byte with nothing in the stop string, "ü" (0xC3 0xBC) would
        // share its first byte with "üx": holding back must stay on character boundaries.
        assert_eq!(run(&["üx"], &["café ü", "y"]), ("café üy".to_owned(), None));
        assert_eq!(
            run(&["üx"], &["café ü", "x"]),
            ("café ".to_owned(), Some("üx".to_owned()))
        );
    }

    #[test]
    fn without_stop_strings_everything_passes() {
        assert_eq!(run(&[], &["a", "b"]), ("ab".to_owned(), None));
        assert_eq!(run(&[""], &["a", "b"]), ("ab".to_owned(), None));
    }
}
