//! Every failure of the CUDA backend becomes a [`ModelError::Backend`] naming the op.

use std::fmt::Display;

use plumb_model::ModelError;

pub(crate) const NAME: &str = "cuda";

/// An error of op `op`.
pub(crate) fn error(op: &'static str, message: impl Into<String>) -> ModelError {
    ModelError::Backend {
        backend: NAME,
        op,
        message: message.into(),
    }
}

/// Maps a driver, NVRTC or cuBLAS error of op `op`, for `map_err`.
pub(crate) fn failed<E: Display>(op: &'static str) -> impl Fn(E) -> ModelError {
    move |e| error(op, e.to_string())
}
