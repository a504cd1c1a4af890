//! Where models live and how they get there: the cache directory, the built-in catalog, and
//! `plumb pull`.

mod cache;

pub use cache::{models_dir, MODELS_ENV};
