//! The `--backend` flag: which implementation of the backend ops runs the model.

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
