//! Recording: every op appends its dispatch to a pending command encoder, which is submitted
//! when something is read back, and also every SUBMIT_EVERY dispatches, so that the GPU
//! starts on the first layers of a pass while the host still records the rest. The logits
//! (or the top-k ids) are a pass's only readback, the one wait for the GPU. Consecutive
//! dispatches share one compute pass (wgpu orders them as it orders passes): a decode step of
//! a 7B model has hundreds, and a pass for each costs host time in every step.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::bind_groups::{BindGroups, Bound};
use crate::gpu::Gpu;
use crate::kernels::Kernel;
use crate::params::Params;
use crate::timings::Timings;
use crate::wait::map_read;

/// The command encoder of the work recorded since the last readback.
pub(crate) struct Recorder {
    state: Mutex<State>,
    /// Readbacks so far: the waits for the GPU.
    readbacks: AtomicU64,
}

/// Dispatches after which the pending command buffer is submitted even though nothing is
/// read back yet.
const SUBMIT_EVERY: usize = 48;

struct State {
    pending: Option<Pending>,
    /// Dispatches in the pending command buffer.
    pending_dispatches: usize,
    /// The parameters of the pending dispatches.
    params: Params,
    bind_groups: BindGroups,
    /// Per-kernel GPU times, where asked for (`timings.rs`).
    timings: Option<Timings>,
}

/// Work recorded and not yet submitted: the encoder, and the compute pass dispatches are
/// appended to while no other command came between them.
struct Pending {
    /// Declared first: the pass is dropped, so ended, before its encoder.
    pass: Option<wgpu::ComputePass<'static>>,
    encoder: wgpu::CommandEncoder,
}

impl Pending {
    fn new(gpu: &Gpu) -> Pending {
        Pending {
            pass: None,
            encoder: gpu
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("plumb pass"),
                }),
        }
    }

    /// The encoder, with the compute pass ended: it takes no other command while one is open.
    fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.encoder
    }

    /// The open compute pass, begun now unless one is open.
    fn compute_pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor::default())
                .forget_lifetime()
        })
    }

    fn finish(mut self) -> wgpu::CommandBuffer {
        self.pass = None;
        self.encoder.finish()
    }
}

impl Recorder {
    /// A recorder for `gpu`, which times every dispatch if the device was opened for it.
    pub fn new(gpu: &Gpu) -> Recorder {
        Recorder {
            state: Mutex::new(State {
                pending: None,
                pending_dispatches: 0,
                params: Params::default(),
                bind_groups: BindGroups::default(),
                timings: Timings::new(gpu),
            }),
            readbacks: AtomicU64::new(0),
        }
    }

    /// The per-kernel table of the dispatches timed so far, if they are timed.
    pub fn timings_report(&self) -> Option<String> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.timings.as_ref().map(Timings::report)
    }

    /// Runs `record` on the pending encoder (a command other than a dispatch), starting one
    /// if there is none.
    pub fn record<T>(&self, gpu: &Gpu, record: impl FnOnce(&mut wgpu::CommandEncoder) -> T) -> T {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        record(
            state
                .pending
                .get_or_insert_with(|| Pending::new(gpu))
                .encoder(),
        )
    }

    /// Records one dispatch of `pipeline` over `workgroups` workgroups (laid out in x and y,
    /// as a dimension holds at most `max_compute_workgroups_per_dimension`) times `z`, with
    /// `params` in a uniform buffer at binding 0 and `bindings` at bindings 1, 2, …
    /// `kernel` and the `weight_bytes` it reads are for the timings.
    #[allow(clippy::too_many_arguments)]
    pub fn dispatch(
        &self,
        gpu: &Gpu,
        (kernel, weight_bytes): (Kernel, u64),
        pipeline: &wgpu::ComputePipeline,
        params: &[u32],
        bindings: &[wgpu::BufferBinding<'_>],
        workgroups: usize,
        z: usize,
    ) -> Result<(), String> {
        if workgroups == 0 || z == 0 {
            return Ok(());
        }
        let max = gpu.limits.max_compute_workgroups_per_dimension as usize;
        let x = workgroups.min(max);
        let y = workgroups.div_ceil(x);
        if y > max || z > max {
            return Err(format!(
                "{workgroups} × {z} workgroups exceed the adapter's {max} per dimension"
            ));
        }
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let state = &mut *guard;
        let bound = std::iter::once(state.params.stage(gpu, params))
            .chain(bindings.iter().map(Bound::of))
            .collect();
        let bind_group = state.bind_groups.get(gpu, pipeline, bound);
        let pass = state
            .pending
            .get_or_insert_with(|| Pending::new(gpu))
            .compute_pass();
        let dispatch = |pass: &mut wgpu::ComputePass<'static>| {
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(x as u32, y as u32, z as u32);
        };
        state.pending_dispatches += 1;
        match &mut state.timings {
            Some(timings) => timings.timed(pass, kernel, weight_bytes, dispatch),
            None => dispatch(pass),
        }
        // Not with the timings: they wait for each command buffer they time, and their
        // table is of whole passes.
        if state.timings.is_none() && state.pending_dispatches >= SUBMIT_EVERY {
            self.submit_pending(gpu, state, false)?;
        }
        Ok(())
    }

    /// Submits the pending work with a copy of `source`'s first `bytes` behind it, waits,
    /// and returns the copy.
    pub fn read(&self, gpu: &Gpu, source: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>, String> {
        let size = bytes.next_multiple_of(4).max(4);
        let staging = gpu.buffer(
            "readback",
            size,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        );
        self.record(gpu, |encoder| {
            encoder.copy_buffer_to_buffer(source, 0, &staging, 0, size);
        });
        self.submit(gpu)?;
        self.readbacks.fetch_add(1, Ordering::Relaxed);
        map_read(&gpu.device, &staging)?;
        let data = staging
            .get_mapped_range(..)
            .map_err(|e| format!("reading back: {e}"))?[..bytes as usize]
            .to_vec();
        staging.unmap();
        match gpu.take_error() {
            Some(error) => Err(error),
            None => Ok(data),
        }
    }

    /// Readbacks so far: the times the host waited for the GPU.
    pub fn readbacks(&self) -> u64 {
        self.readbacks.load(Ordering::Relaxed)
    }

    /// Submits the pending work, if any, at the end of a pass or before a readback.
    pub fn submit(&self, gpu: &Gpu) -> Result<(), String> {
        let mut guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        self.submit_pending(gpu, &mut guard, true)
    }

    /// Submits the pending work, if any. At the end of a pass (`pass_end`) the parameters
    /// start again at the first block and the bind groups the pass did not use are dropped;
    /// a submission within a pass keeps both, for the dispatches still to come.
    fn submit_pending(&self, gpu: &Gpu, state: &mut State, pass_end: bool) -> Result<(), String> {
        if let Some(mut pending) = state.pending.take() {
            state.params.write(gpu);
            if let Some(timings) = &state.timings {
                timings.resolve(pending.encoder());
            }
            gpu.queue.submit([pending.finish()]);
            state.pending_dispatches = 0;
            if let Some(timings) = &mut state.timings {
                timings.collect(gpu)?;
            }
        }
        if pass_end {
            state.params.restart();
            state.bind_groups.pass_ended();
        }
        match gpu.take_error() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }
}
