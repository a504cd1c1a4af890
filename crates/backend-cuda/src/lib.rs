//! The CUDA backend: weights, activations and the KV cache (in f16) live on one GPU.
//!
//! CUDA is loaded at run time (the driver, NVRTC, cuBLAS), so plumb builds and runs without
//! it; [`CudaBackend::available`] says whether this machine can use this backend. Kernels are
//! CUDA C compiled by NVRTC for the device at start-up and cached on disk (see `nvrtc`).

mod error;
mod nvrtc;
mod weight;

use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaStream};
use plumb_model::Result;

pub use nvrtc::KERNELS_ENV;

use error::{error, failed};

/// The CUDA backend, on one device.
pub struct CudaBackend {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
}

impl CudaBackend {
    /// Whether a CUDA driver and at least one device are present.
    pub fn available() -> bool {
        device_count().is_ok_and(|n| n > 0)
    }

    /// The number of CUDA devices, or why there are none to be had (no driver library, a
    /// driver that fails to start).
    pub fn device_count() -> Result<usize> {
        device_count()
    }

    /// A backend on device `ordinal`.
    pub fn new(ordinal: usize) -> Result<CudaBackend> {
        let n = device_count()?;
        if ordinal >= n {
            return Err(error(
                "new",
                format!("no CUDA device {ordinal}: this machine has {n}"),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(failed("new"))?;
        let stream = ctx.default_stream();
        let name = ctx.name().map_err(failed("new"))?;
        let (major, minor) = ctx.compute_capability().map_err(failed("new"))?;
        tracing::info!(device = ordinal, %name, arch = format!("{major}.{minor}"), "cuda backend");
        Ok(CudaBackend { ctx, stream })
    }
}

fn device_count() -> Result<usize> {
    // SAFETY: only tries to open the library; without this check the first driver call
    // would panic where there is none.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err(error(
            "new",
            "no CUDA driver: libcuda.so cannot be loaded (no NVIDIA driver installed, or its \
             directory is not on LD_LIBRARY_PATH)",
        ));
    }
    let n = CudaContext::device_count().map_err(failed("new"))?;
    Ok(usize::try_from(n).unwrap_or(0))
}
