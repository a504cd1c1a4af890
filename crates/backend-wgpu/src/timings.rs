//! Per-kernel GPU times from timestamp queries, to find where a step's time goes: with
//! `PLUMB_WGPU_TIMINGS=1`, on an adapter that writes timestamps inside compute passes (NVIDIA's
//! and Mesa's Vulkan drivers do), every dispatch is bracketed by two timestamps, each command
//! buffer is waited for as soon as it is submitted, and the backend prints one table per
//! kernel to stderr when it is dropped: launches, total and per-launch time, and for the
//! matrix products the weight bytes read per second. The waits serialize the host and the
//! GPU, which a normal run does not: it submits a pass in parts as it records it, and waits
//! only for the logits. With the timings a pass is one command buffer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::gpu::Gpu;
use crate::kernels::Kernel;
use crate::wait::map_read;

/// The variable that turns the timings on.
pub(crate) const ENV: &str = "PLUMB_WGPU_TIMINGS";

/// Dispatches timed per command buffer: two queries each, within wgpu's largest query set.
const MAX_TIMED: u32 = wgpu::QUERY_SET_MAX_QUERIES / 2;

/// Whether the environment asks for timings.
pub(crate) fn requested() -> bool {
    std::env::var_os(ENV).is_some_and(|v| !v.is_empty() && v != "0")
}

/// The features the timings need of the device.
pub(crate) const FEATURES: wgpu::Features =
    wgpu::Features::TIMESTAMP_QUERY.union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

pub(crate) struct Timings {
    queries: wgpu::QuerySet,
    resolved: wgpu::Buffer,
    readback: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period_ns: f64,
    /// The pending command buffer's timed dispatches, in order, with the weight bytes each
    /// reads.
    pending: Vec<(Kernel, u64)>,
    /// When the first dispatch of the pending command buffer was recorded.
    pending_since: Option<Instant>,
    /// Dispatches past MAX_TIMED in one command buffer, which were not timed.
    untimed: u64,
    by_kernel: HashMap<Kernel, Totals>,
    /// Per command buffer: from its first recorded dispatch until its results were in.
    wall: Duration,
    /// Per command buffer: from its first timestamp to its last.
    gpu_span_ns: f64,
    command_buffers: u64,
}

#[derive(Default)]
struct Totals {
    launches: u64,
    ns: f64,
    weight_bytes: u64,
}

impl Timings {
    /// Timings on `gpu`, if it was opened with [`FEATURES`].
    pub fn new(gpu: &Gpu) -> Option<Timings> {
        if !gpu.device.features().contains(FEATURES) {
            return None;
        }
        let count = 2 * MAX_TIMED;
        let bytes = u64::from(count) * 8;
        Some(Timings {
            queries: gpu.device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("kernel timings"),
                ty: wgpu::QueryType::Timestamp,
                count,
            }),
            resolved: gpu.buffer(
                "kernel timings",
                bytes,
                wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            ),
            readback: gpu.buffer(
                "kernel timings readback",
                bytes,
                wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            ),
            period_ns: f64::from(gpu.queue.get_timestamp_period()),
            pending: Vec::new(),
            pending_since: None,
            untimed: 0,
            by_kernel: HashMap::new(),
            wall: Duration::ZERO,
            gpu_span_ns: 0.0,
            command_buffers: 0,
        })
    }

    /// Records `dispatch` (the pass's commands of one dispatch) between two timestamps.
    pub fn timed(
        &mut self,
        pass: &mut wgpu::ComputePass<'static>,
        kernel: Kernel,
        weight_bytes: u64,
        dispatch: impl FnOnce(&mut wgpu::ComputePass<'static>),
    ) {
        self.pending_since.get_or_insert_with(Instant::now);
        let index = self.pending.len() as u32;
        if index >= MAX_TIMED {
            self.untimed += 1;
            dispatch(pass);
            return;
        }
        pass.write_timestamp(&self.queries, 2 * index);
        dispatch(pass);
        pass.write_timestamp(&self.queries, 2 * index + 1);
        self.pending.push((kernel, weight_bytes));
    }

    /// Copies the pending command buffer's timestamps to the readback buffer, at its end.
    pub fn resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let count = 2 * self.pending.len() as u32;
        if count == 0 {
            return;
        }
        encoder.resolve_query_set(&self.queries, 0..count, &self.resolved, 0);
        encoder.copy_buffer_to_buffer(&self.resolved, 0, &self.readback, 0, u64::from(count) * 8);
    }

    /// After the submission of the command buffer `resolve` ended: waits for it and adds its
    /// times to the totals.
    pub fn collect(&mut self, gpu: &Gpu) -> Result<(), String> {
        let timed = std::mem::take(&mut self.pending);
        let Some(since) = self.pending_since.take() else {
            return Ok(());
        };
        if timed.is_empty() {
            return Ok(());
        }
        let bytes = timed.len() as u64 * 16;
        map_read(&gpu.device, &self.readback).map_err(|e| format!("the kernel timings: {e}"))?;
        self.wall += since.elapsed();
        {
            let view = self
                .readback
                .get_mapped_range(..bytes)
                .map_err(|e| format!("reading the timings back: {e}"))?;
            let ticks: &[u64] = bytemuck::cast_slice(&view);
            for ((kernel, weight_bytes), pair) in timed.iter().zip(ticks.chunks_exact(2)) {
                let totals = self.by_kernel.entry(*kernel).or_default();
                totals.launches += 1;
                totals.ns += pair[1].saturating_sub(pair[0]) as f64 * self.period_ns;
                totals.weight_bytes += weight_bytes;
            }
            let first = ticks.first().copied().unwrap_or(0);
            let last = ticks.last().copied().unwrap_or(0);
            self.gpu_span_ns += last.saturating_sub(first) as f64 * self.period_ns;
        }
        self.readback.unmap();
        self.command_buffers += 1;
        Ok(())
    }

    /// The table: one line per kernel, the most time first, and the totals it leaves out.
    pub fn report(&self) -> String {
        let mut rows: Vec<_> = self.by_kernel.iter().collect();
        rows.sort_by(|a, b| b.1.ns.total_cmp(&a.1.ns));
        let in_kernels: f64 = rows.iter().map(|(_, t)| t.ns).sum();
        let mut out = format!(
            "wgpu kernel timings ({ENV}): {} command buffers; {:.1} ms from each one's first \
             dispatch recorded to its results in, {:.1} ms from its first timestamp to its \
             last, {:.1} ms in kernels; {} dispatches past {MAX_TIMED} in one command buffer \
             untimed\n",
            self.command_buffers,
            self.wall.as_secs_f64() * 1e3,
            self.gpu_span_ns / 1e6,
            in_kernels / 1e6,
            self.untimed,
        );
        let _ = writeln!(
            out,
            "{:<34} {:>9} {:>12} {:>9} {:>7} {:>8}",
            "kernel", "launches", "total µs", "µs/launch", "share", "GB/s"
        );
        for (kernel, t) in rows {
            let gbs = if t.weight_bytes > 0 && t.ns > 0.0 {
                format!("{:.1}", t.weight_bytes as f64 / t.ns)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "{:<34} {:>9} {:>12.1} {:>9.2} {:>6.1}% {:>8}",
                kernel.label(),
                t.launches,
                t.ns / 1e3,
                t.ns / 1e3 / t.launches as f64,
                100.0 * t.ns / in_kernels.max(f64::MIN_POSITIVE),
                gbs,
            );
        }
        out
    }
}
