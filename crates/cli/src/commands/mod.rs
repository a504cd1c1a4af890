//! One module per subcommand: its arguments and its `run`.

pub mod bench;
pub mod chat;
pub mod diff;
pub mod inspect;
pub mod perplexity;
pub mod pull;
pub mod run;
pub mod serve;
pub mod synth;
pub mod tokenize;
pub mod trace;
pub mod verify;
