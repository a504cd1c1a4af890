//! Kernel launches with programmatic dependent launch (PDL), unless `PLUMB_CUDA_PDL=0`: on
//! Hopper and later, a kernel launched with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION`
//! may start while the kernel before it in the stream is still running, as soon as every
//! block of that one has called `start_dependents()`; it then waits in `wait_for_producers()`
//! for it to finish (`kernels/pdl.cuh`). A decode step's small kernels (norms, the
//! activations' quantization, RoPE, the activation, the residual add) then need not cost a
//! whole launch each. Stream capture records the attribute as programmatic edges of the CUDA
//! graph, but only between two kernels (see `graphs::GraphShape`).
//!
//! With the activations' allocations and frees in a recorded step, only 145 of a 7B step's
//! 501 kernels got a programmatic edge, and PDL gave TinyLlama Q4_K_M +2.5% and Llama-2 7B
//! Q4_K_M −1.4% (docs/benchmarks.md, sixth CUDA round). With the activations taken from the
//! pool (`pool`), the step's edges are kernel to kernel, except those of the attention
//! kernels, and the mat-vecs load their first weights before they wait: then it is on
//! (docs/benchmarks.md, "CUDA backend: llama.cpp's CUDA backend in the same call, and
//! programmatic dependent launch with pooled activations").
//!
//! cudarc's launch builder cannot set launch attributes, hence this one. Every kernel it
//! launches with PDL must wait before it reads what an earlier kernel wrote and before it
//! writes anything (pdl.cuh says why); kernels from other sources (cuBLAS, the attention
//! kernels but `rope_store_kv`) are launched without the attribute and run after everything
//! before them, as always. (With every attention kernel under PDL, each letting the next one
//! in at its start, a decode step was slower; `rope_store_kv` alone, which the flash-decoding
//! kernel after it still waits for in full, gave 7B Q4_0 tg128 on an H200 513.2 – 514.9
//! tokens/s against 510.6 – 513.1, and Q8_0 the same, in three alternated rounds;
//! docs/benchmarks.md, 2026-11-29, sixth round.)

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::pool::Buffer;
use cudarc::driver::sys::{
    self, CUdeviceptr, CUlaunchAttribute, CUlaunchAttributeID, CUlaunchConfig,
};
use cudarc::driver::{
    CudaFunction, CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut,
    DriverError, LaunchConfig,
};

/// Set to `0` to launch the backend's kernels one after another, without programmatic
/// dependent launch.
pub const PDL_ENV: &str = "PLUMB_CUDA_PDL";

/// Whether kernels on a device of compute capability `major` are launched with PDL: from
/// Hopper (9.0) on, which has it, unless `PLUMB_CUDA_PDL=0`.
pub(crate) fn pdl_from_env(major: i32) -> bool {
    major >= 9 && std::env::var(PDL_ENV).map_or(true, |v| v != "0")
}

/// One argument as the driver takes it: the address of its value.
enum Arg {
    /// A value that the caller's reference keeps alive.
    Value(*const c_void),
    /// A buffer's device address, kept here.
    Address(CUdeviceptr),
}

/// A kernel launch: its arguments, in the kernel's order, then [`Launch::run`].
pub(crate) struct Launch<'a> {
    stream: &'a Arc<CudaStream>,
    function: &'a CudaFunction,
    pdl: bool,
    args: Vec<Arg>,
    /// The argument references, which must outlive the launch.
    marker: PhantomData<&'a ()>,
}

/// What a kernel argument can be: a plain value, or a device buffer (its address).
pub(crate) trait KernelArg<'a> {
    fn push(self, launch: &mut Launch<'a>);
}

macro_rules! value_args {
    ($($t:ty),*) => {$(
        impl<'a> KernelArg<'a> for &'a $t {
            fn push(self, launch: &mut Launch<'a>) {
                launch.args.push(Arg::Value((self as *const $t).cast()));
            }
        }
    )*};
}
value_args!(i32, u32, i64, u64, f32, crate::matmul::Products);

// The buffers' addresses are taken without the events that order other streams after them:
// the backend runs on one stream and turns event tracking off (see `CudaBackend::new`).
impl<'a, T> KernelArg<'a> for &'a CudaSlice<T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr(launch.stream);
        launch.args.push(Arg::Address(address));
    }
}

impl<'a, T> KernelArg<'a> for &'a mut CudaSlice<T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr_mut(launch.stream);
        launch.args.push(Arg::Address(address));
    }
}

impl<'a, T> KernelArg<'a> for &'a Buffer<T> {
    fn push(self, launch: &mut Launch<'a>) {
        (&**self).push(launch);
    }
}

impl<'a, T> KernelArg<'a> for &'a mut Buffer<T> {
    fn push(self, launch: &mut Launch<'a>) {
        (&mut **self).push(launch);
    }
}

impl<'a, T> KernelArg<'a> for &'a CudaView<'_, T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr(launch.stream);
        launch.args.push(Arg::Address(address));
    }
}

impl<'a, T> KernelArg<'a> for &'a mut CudaViewMut<'_, T> {
    fn push(self, launch: &mut Launch<'a>) {
        let (address, _) = self.device_ptr_mut(launch.stream);
        launch.args.push(Arg::Address(address));
    }
}

impl<'a> Launch<'a> {
    /// A launch of `function` on `stream`, with PDL where `pdl` is set.
    pub fn new(stream: &'a Arc<CudaStream>, function: &'a CudaFunction, pdl: bool) -> Self {
        Launch {
            stream,
            function,
            pdl,
            args: Vec::with_capacity(16),
            marker: PhantomData,
        }
    }

    /// Appends the next argument.
    pub fn arg(&mut self, arg: impl KernelArg<'a>) -> &mut Self {
        arg.push(self);
        self
    }

    /// Queues the kernel on the stream.
    ///
    /// # Safety
    /// The arguments must be those of the kernel, in its order and with its types, and the
    /// kernel must stay within the buffers it is given. With PDL, the kernel must follow
    /// pdl.cuh's rules.
    pub unsafe fn run(&mut self, config: LaunchConfig) -> Result<(), DriverError> {
        self.stream.context().bind_to_thread()?;
        let mut params: Vec<*mut c_void> = self
            .args
            .iter_mut()
            .map(|arg| match arg {
                Arg::Value(p) => p.cast_mut(),
                Arg::Address(address) => (address as *mut CUdeviceptr).cast(),
            })
            .collect();
        // SAFETY: an all-zero attribute is a valid value of the C struct and union.
        let mut attribute: CUlaunchAttribute = unsafe { std::mem::zeroed() };
        attribute.id = CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value.programmaticStreamSerializationAllowed = 1;
        let (grid, block) = (config.grid_dim, config.block_dim);
        let driver_config = CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: config.shared_mem_bytes,
            hStream: self.stream.cu_stream(),
            attrs: &mut attribute,
            numAttrs: u32::from(self.pdl),
        };
        // SAFETY: the parameters point at the argument values, which outlive the call (the
        // driver copies them); the caller vouches for the kernel and its arguments.
        unsafe {
            sys::cuLaunchKernelEx(
                &driver_config,
                self.function.cu_function(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
        .result()
    }
}
