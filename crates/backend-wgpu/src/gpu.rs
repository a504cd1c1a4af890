//! The device: adapter choice, the limits requested from it, buffers, and errors.

use std::sync::{Arc, Mutex};

use wgpu::util::DeviceExt;

use crate::timings;
use crate::wait::block_on;

/// One wgpu device and its queue, with the limits it was opened with.
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: wgpu::AdapterInfo,
    pub limits: wgpu::Limits,
    /// The largest subgroup the device runs, when it has subgroup operations that the
    /// matrix kernels can use (subgroups of 4 to 64); else they reduce through workgroup
    /// memory.
    pub max_subgroup: Option<u32>,
    /// Whether the adapter has `shader-f16`. No kernel needs it: f16 values are packed and
    /// unpacked with WGSL's core `pack2x16float`.
    pub shader_f16: bool,
    /// The first error wgpu reported outside an error scope (a failed dispatch, an
    /// allocation that ran out of memory), until it is taken.
    errors: Arc<Mutex<Option<String>>>,
}

/// The adapter `WGPU_ADAPTER_NAME` names, if it is set (never in the browser).
#[cfg(not(target_arch = "wasm32"))]
fn named_adapter(instance: &wgpu::Instance) -> Option<wgpu::Adapter> {
    block_on(wgpu::util::initialize_adapter_from_env(instance, None))
        .ok()?
        .ok()
}

#[cfg(target_arch = "wasm32")]
fn named_adapter(_instance: &wgpu::Instance) -> Option<wgpu::Adapter> {
    None
}

/// Buffer usages of activations: computed into, read back, and copied.
pub(crate) const TENSOR_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

impl Gpu {
    /// Opens the best adapter wgpu finds (Vulkan or Metal; `WGPU_BACKEND`, `WGPU_ADAPTER_NAME`
    /// and `WGPU_POWER_PREF` choose another, as everywhere in wgpu; in the browser, the page's
    /// WebGPU adapter), with every limit the adapter has: weights need the largest bindings it
    /// allows.
    pub fn open() -> Result<Gpu, String> {
        let instance =
            wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapter = match named_adapter(&instance) {
            Some(named) => named,
            None => block_on(
                instance.request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::from_env()
                        .unwrap_or(wgpu::PowerPreference::HighPerformance),
                    ..Default::default()
                }),
            )?
            .map_err(|e| format!("no GPU adapter: {e}"))?,
        };
        let limits = adapter.limits();
        let info = adapter.get_info();
        let max_subgroup = (adapter.features().contains(wgpu::Features::SUBGROUP)
            && (4..=64).contains(&info.subgroup_min_size)
            && (4..=64).contains(&info.subgroup_max_size))
        .then_some(info.subgroup_max_size);
        let mut required_features = match max_subgroup {
            Some(_) => wgpu::Features::SUBGROUP,
            None => wgpu::Features::empty(),
        };
        if timings::requested() {
            if adapter.features().contains(timings::FEATURES) {
                required_features |= timings::FEATURES;
            } else {
                tracing::warn!(
                    "{}: {} has no timestamps inside compute passes; no kernel timings",
                    timings::ENV,
                    info.name
                );
            }
        }
        let (device, queue) = block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            label: Some("plumb"),
            required_features,
            required_limits: limits.clone(),
            ..Default::default()
        }))?
        .map_err(|e| format!("cannot open {}: {e}", info.name))?;
        let errors = Arc::new(Mutex::new(None));
        let sink = Arc::clone(&errors);
        device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
            let mut first = sink.lock().unwrap_or_else(|p| p.into_inner());
            first.get_or_insert_with(|| e.to_string());
        }));
        Ok(Gpu {
            device,
            queue,
            adapter: info,
            limits,
            max_subgroup,
            shader_f16: adapter.features().contains(wgpu::Features::SHADER_F16),
            errors,
        })
    }

    /// The first error wgpu reported since the last call, if any.
    pub fn take_error(&self) -> Option<String> {
        self.errors.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The largest buffer one binding may cover, within what a shader indexes with u32
    /// byte offsets.
    pub fn max_binding_bytes(&self) -> u64 {
        self.limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size)
            .min(u64::from(u32::MAX))
            & !3
    }

    /// An uninitialized (zeroed) buffer of at least `bytes`, rounded up to whole words: a
    /// binding is never empty.
    pub fn buffer(&self, label: &str, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4).next_multiple_of(4),
            usage,
            mapped_at_creation: false,
        })
    }

    /// A storage buffer holding `words`.
    pub fn storage_init(&self, label: &str, words: &[u32]) -> wgpu::Buffer {
        let contents: &[u8] = if words.is_empty() {
            &[0; 4]
        } else {
            bytemuck::cast_slice(words)
        };
        self.device
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents,
                usage: TENSOR_USAGE,
            })
    }

    /// Writes `bytes` to the start of `buffer`, a partial last word zero-padded. The write
    /// happens before the next submission.
    pub fn write(&self, buffer: &wgpu::Buffer, bytes: &[u8]) {
        let whole = bytes.len() & !3;
        if whole > 0 {
            self.queue.write_buffer(buffer, 0, &bytes[..whole]);
        }
        if whole < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - whole].copy_from_slice(&bytes[whole..]);
            self.queue.write_buffer(buffer, whole as u64, &tail);
        }
    }
}
