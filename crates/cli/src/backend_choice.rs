//! The backend flags (`--backend`, `--threads`), and running generic code on the backend they
//! choose.

use plumb_backend_ref::RefBackend;
use plumb_model::Backend;

/// A backend plumb can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The f32 reference: plain, obviously correct, the yardstick for every other backend
    Ref,
}

impl BackendChoice {
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Ref => "ref",
        }
    }
}

/// The flags every command that runs a model shares.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArgs {
    /// The backend that runs the model
    #[arg(long, value_enum, default_value_t = BackendChoice::Ref)]
    pub backend: BackendChoice,
    /// Threads for the CPU backends [default: all cores]
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
}

/// Code that runs with whichever backend the flags chose: the command's body, generic over
/// the backend.
pub trait WithBackend {
    type Output;
    fn run<B: Backend>(self, backend: B) -> anyhow::Result<Self::Output>;
}

impl BackendArgs {
    /// Threads to use: `--threads`, or every core.
    pub fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    /// Builds the chosen backend and runs `body` on it.
    pub fn dispatch<W: WithBackend>(&self, body: W) -> anyhow::Result<W::Output> {
        if self.threads == Some(0) {
            anyhow::bail!("--threads must be at least 1");
        }
        match self.backend {
            BackendChoice::Ref => body.run(RefBackend::new()),
        }
    }
}
