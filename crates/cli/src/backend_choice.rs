//! The backend flags (`--backend`, `--threads`, `--cache-type`), and running generic code on
//! the backend they choose.

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_backend_cuda::CudaBackend;
use plumb_backend_ref::RefBackend;
use plumb_backend_wgpu::WgpuBackend;
use plumb_model::Backend;

/// A backend plumb can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// The CUDA backend: weights, activations and the f16 KV cache on the first GPU
    Cuda,
    /// The fast CPU backend: integer SIMD kernels on the quantized weights, all cores
    Cpu,
    /// The f32 reference: plain, obviously correct, the yardstick for every other backend
    Ref,
    /// The GPU through wgpu (Vulkan, Metal): WGSL kernels, f16 KV cache
    Wgpu,
}

impl BackendChoice {
    pub fn name(self) -> &'static str {
        match self {
            BackendChoice::Cuda => "cuda",
            BackendChoice::Cpu => "cpu",
            BackendChoice::Ref => "ref",
            BackendChoice::Wgpu => "wgpu",
        }
    }

    /// The backend that runs when none is asked for: cuda where this machine has a CUDA
    /// device, else cpu.
    pub fn default_here() -> BackendChoice {
        if CudaBackend::available() {
            BackendChoice::Cuda
        } else {
            BackendChoice::Cpu
        }
    }

    /// `choice`, or the default of this machine.
    pub fn or_default(choice: Option<BackendChoice>) -> BackendChoice {
        choice.unwrap_or_else(BackendChoice::default_here)
    }
}

/// The flags every command that runs a model shares.
#[derive(clap::Args, Debug, Clone)]
pub struct BackendArgs {
    /// The backend that runs the model [default: cuda where a CUDA device is present, else
    /// cpu]
    #[arg(long, value_enum)]
    pub backend: Option<BackendChoice>,
    /// Threads for the CPU backend [default: all cores]
    #[arg(short = 't', long)]
    pub threads: Option<usize>,
    /// How the cpu backend stores the KV cache: f32, f16 or q8_0 [default: f16; the ref
    /// backend always uses f32, the cuda and wgpu backends f16]
    #[arg(long, value_name = "TYPE")]
    pub cache_type: Option<KvCacheType>,
}

/// Code that runs with whichever backend the flags chose: the command's body, generic over
/// the backend (which is `'static`, so that it can move to the engine's thread).
pub trait WithBackend {
    type Output;
    fn run<B: Backend + 'static>(self, backend: B) -> anyhow::Result<Self::Output>;
}

impl BackendArgs {
    /// The flags for `backend` with every other setting at its default.
    pub fn with_backend(backend: BackendChoice) -> Self {
        BackendArgs {
            backend: Some(backend),
            threads: None,
            cache_type: None,
        }
    }

    /// The cpu backend's KV cache type: `--cache-type`, else f16.
    fn cache_type(&self) -> KvCacheType {
        self.cache_type.unwrap_or(KvCacheType::F16)
    }

    /// The backend the flags chose, or this machine's default.
    pub fn choice(&self) -> BackendChoice {
        BackendChoice::or_default(self.backend)
    }

    /// Bytes of one key or value element in the chosen backend's KV cache.
    pub fn kv_element_bytes(&self) -> f64 {
        match self.choice() {
            BackendChoice::Cuda => 2.0,
            BackendChoice::Cpu => self.cache_type().bytes(32) as f64 / 32.0,
            BackendChoice::Ref => 4.0,
            BackendChoice::Wgpu => 2.0,
        }
    }

    /// Threads to use: `--threads`, or every core.
    pub fn threads(&self) -> usize {
        self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
        })
    }

    /// Builds the chosen backend and runs `body` on it.
    pub fn dispatch<W: WithBackend>(&self, body: W) -> anyhow::Result<W::Output> {
        self.dispatch_with(body, false)
    }

    /// [`BackendArgs::dispatch`] for a server, whose batched decoding of many sequences
    /// gains from the cpu backend's weights packed for its GEMM once, at load.
    pub fn dispatch_batched<W: WithBackend>(&self, body: W) -> anyhow::Result<W::Output> {
        self.dispatch_with(body, true)
    }

    fn dispatch_with<W: WithBackend>(&self, body: W, batched: bool) -> anyhow::Result<W::Output> {
        if self.threads == Some(0) {
            anyhow::bail!("--threads must be at least 1");
        }
        match self.choice() {
            BackendChoice::Cuda => {
                if let Some(ty) = self.cache_type.filter(|&t| t != KvCacheType::F16) {
                    anyhow::bail!(
                        "--cache-type {}: the cuda backend keeps its KV cache in f16",
                        ty.name()
                    );
                }
                let backend = CudaBackend::new(0).map_err(|e| {
                    anyhow::anyhow!("--backend cuda: {e} (--backend cpu runs without a GPU)")
                })?;
                body.run(backend)
            }
            BackendChoice::Cpu => {
                let backend = CpuBackend::new(self.threads(), self.cache_type())?;
                body.run(if batched {
                    backend.with_packed_weights()
                } else {
                    backend
                })
            }
            BackendChoice::Ref => {
                if let Some(ty) = self.cache_type.filter(|&t| t != KvCacheType::F32) {
                    anyhow::bail!(
                        "--cache-type {}: the ref backend keeps its KV cache in f32",
                        ty.name()
                    );
                }
                body.run(RefBackend::new())
            }
            BackendChoice::Wgpu => {
                if let Some(ty) = self.cache_type.filter(|&t| t != KvCacheType::F16) {
                    anyhow::bail!(
                        "--cache-type {}: the wgpu backend keeps its KV cache in f16",
                        ty.name()
                    );
                }
                body.run(WgpuBackend::new()?)
            }
        }
    }
}
