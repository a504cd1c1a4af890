//! The elementwise and per-row ops: a kernel launch each, after the host-side checks.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, CudaView, LaunchConfig};
use plumb_model::{Activation, Activations, Result, Rope, RopeStyle};

use crate::activations_q8::QuantizedRows;
use crate::error::failed;
use crate::kernels::{grid_stride, Kernels};
use crate::pool::Pool;
use crate::tensor::CudaTensor;

pub(crate) struct Ops<'a> {
    pub stream: &'a Arc<CudaStream>,
    pub pool: &'a Arc<Pool>,
    pub kernels: &'a Kernels,
    /// The counters of the kernels that quantize by slices (`activations_q8::slice_counters`).
    pub slice_counters: &'a CudaSlice<u32>,
}

impl Ops<'_> {
    /// RMSNorm over groups of `weight.len()` values; the caller has checked that they divide
    /// the rows. With `q8`, rows that are one group each and few enough for the 8-bit products
    /// (decoding) get their 8-bit rows too (`rms_norm_q8`).
    pub fn rms_norm(
        &self,
        x: &CudaTensor,
        weight: &CudaSlice<f32>,
        eps: f32,
        q8: bool,
    ) -> Result<CudaTensor> {
        const OP: &str = "rms_norm";
        let group = weight.len();
        let (n, k) = (x.n_tokens(), x.width());
        if q8 && group == k && QuantizedRows::fit(n, k) {
            let mut out = CudaTensor::uninit(self.pool, OP, n, k)?;
            let mut q = QuantizedRows::new(self.pool, n, k)?;
            let ki = k as i32;
            let mut launch = self.kernels.launch(self.stream, &self.kernels.rms_norm_q8);
            launch
                .arg(x.data())
                .arg(weight)
                .arg(out.data_mut())
                .arg(&ki)
                .arg(&eps);
            q.push_args(&mut launch);
            // SAFETY: x and out hold n rows of k values, weight holds k; q n rows of k.
            unsafe { launch.run(QuantizedRows::grid(n, k)) }.map_err(failed(OP))?;
            return Ok(out.with_q8(q));
        }
        let out = CudaTensor::uninit(self.pool, OP, x.n_tokens(), x.width())?;
        let n_groups = x.len() / group;
        if n_groups == 0 {
            return Ok(out);
        }
        let mut out = out;
        let threads = norm_threads(group);
        let cfg = LaunchConfig {
            grid_dim: (n_groups as u32, 1, 1),
            block_dim: (threads, 1, 1),
            shared_mem_bytes: 0,
        };
        let group = group as u32;
        let mut launch = self.kernels.launch(self.stream, &self.kernels.rms_norm);
        launch
            .arg(x.data())
            .arg(weight)
            .arg(out.data_mut())
            .arg(&group)
            .arg(&eps);
        // SAFETY: x and out hold n_groups × group values, weight holds group.
        unsafe { launch.run(cfg) }.map_err(failed(OP))?;
        Ok(out)
    }

    pub fn add(&self, a: &CudaTensor, b: &CudaTensor) -> Result<CudaTensor> {
        const OP: &str = "add";
        let mut out = CudaTensor::uninit(self.pool, OP, a.n_tokens(), a.width())?;
        let n = a.len() as u64;
        if n > 0 {
            let mut launch = self.kernels.launch(self.stream, &self.kernels.add);
            launch
                .arg(a.data())
                .arg(b.data())
                .arg(out.data_mut())
                .arg(&n);
            // SAFETY: a, b and out hold n values.
            unsafe { launch.run(grid_stride(a.len())) }.map_err(failed(OP))?;
        }
        Ok(out)
    }

    pub fn add_bias(&self, mut x: CudaTensor, bias: &CudaSlice<f32>) -> Result<CudaTensor> {
        let (n, width) = (x.len() as u64, x.width() as u32);
        if n > 0 {
            let mut launch = self.kernels.launch(self.stream, &self.kernels.add_bias);
            launch.arg(x.data_mut()).arg(bias).arg(&width).arg(&n);
            // SAFETY: x holds n values in rows of width, bias holds width.
            unsafe { launch.run(grid_stride(n as usize)) }.map_err(failed("add_bias"))?;
        }
        Ok(x)
    }

    pub fn scale(&self, mut x: CudaTensor, factor: f32) -> Result<CudaTensor> {
        let n = x.len() as u64;
        if n > 0 {
            let mut launch = self.kernels.launch(self.stream, &self.kernels.scale);
            launch.arg(x.data_mut()).arg(&factor).arg(&n);
            // SAFETY: x holds n values.
            unsafe { launch.run(grid_stride(n as usize)) }.map_err(failed("scale"))?;
        }
        Ok(x)
    }

    pub fn gated_activation(
        &self,
        gate: &CudaTensor,
        up: &CudaTensor,
        act: Activation,
    ) -> Result<CudaTensor> {
        const OP: &str = "gated_activation";
        let mut out = CudaTensor::uninit(self.pool, OP, gate.n_tokens(), gate.width())?;
        let n = gate.len() as u64;
        if n > 0 {
            let kernel = match act {
                Activation::Silu => &self.kernels.gated_silu,
                Activation::GeluTanh => &self.kernels.gated_gelu_tanh,
            };
            let mut launch = self.kernels.launch(self.stream, kernel);
            launch
                .arg(gate.data())
                .arg(up.data())
                .arg(out.data_mut())
                .arg(&n);
            // SAFETY: gate, up and out hold n values.
            unsafe { launch.run(grid_stride(gate.len())) }.map_err(failed(OP))?;
        }
        Ok(out)
    }

    /// Rotates every head of row `t` by the angles of `positions[t]` (on the device).
    pub fn rope(
        &self,
        mut x: CudaTensor,
        head_dim: usize,
        positions: &CudaView<'_, u32>,
        rope: &Rope,
        inv_freq: &CudaSlice<f64>,
    ) -> Result<CudaTensor> {
        let pairs = x.n_tokens() * (x.width() / head_dim) * (rope.n_rot / 2);
        if pairs == 0 {
            return Ok(x);
        }
        let (n_tokens, n_heads) = (x.n_tokens() as u32, (x.width() / head_dim) as u32);
        let (head_dim, n_rot) = (head_dim as u32, rope.n_rot as u32);
        let neox = i32::from(rope.style == RopeStyle::Neox);
        let mut launch = self.kernels.launch(self.stream, &self.kernels.rope);
        launch
            .arg(x.data_mut())
            .arg(positions)
            .arg(inv_freq)
            .arg(&n_tokens)
            .arg(&n_heads)
            .arg(&head_dim)
            .arg(&n_rot)
            .arg(&neox);
        // SAFETY: x holds n_tokens rows of n_heads heads, positions n_tokens values and
        // inv_freq n_rot / 2.
        unsafe { launch.run(grid_stride(pairs)) }.map_err(failed("rope"))?;
        Ok(x)
    }

    pub fn select_rows(
        &self,
        x: &CudaTensor,
        rows: &CudaView<'_, u32>,
        n_rows: usize,
    ) -> Result<CudaTensor> {
        const OP: &str = "output_rows";
        let mut out = CudaTensor::uninit(self.pool, OP, n_rows, x.width())?;
        let (n, width) = (out.len() as u64, x.width() as u32);
        if n > 0 {
            let mut launch = self.kernels.launch(self.stream, &self.kernels.select_rows);
            launch
                .arg(x.data())
                .arg(rows)
                .arg(out.data_mut())
                .arg(&width)
                .arg(&n);
            // SAFETY: rows holds n_rows indices below x's row count; out n_rows rows.
            unsafe { launch.run(grid_stride(n as usize)) }.map_err(failed(OP))?;
        }
        Ok(out)
    }

    /// `(a + b, rms_norm(a + b))` in one launch; the caller has checked the shapes and that
    /// the weight's groups divide the rows. With `q8`, as `rms_norm`.
    pub fn add_rms_norm(
        &self,
        a: &CudaTensor,
        b: &CudaTensor,
        weight: &CudaSlice<f32>,
        eps: f32,
        q8: bool,
    ) -> Result<(CudaTensor, CudaTensor)> {
        const OP: &str = "add_rms_norm";
        let mut sum = CudaTensor::uninit(self.pool, OP, a.n_tokens(), a.width())?;
        let mut out = CudaTensor::uninit(self.pool, OP, a.n_tokens(), a.width())?;
        let group = weight.len();
        let (n, k) = (a.n_tokens(), a.width());
        if q8 && group == k && QuantizedRows::fit(n, k) {
            let mut q = QuantizedRows::new(self.pool, n, k)?;
            let ki = k as i32;
            let mut launch = self
                .kernels
                .launch(self.stream, &self.kernels.add_rms_norm_q8);
            launch
                .arg(a.data())
                .arg(b.data())
                .arg(weight)
                .arg(sum.data_mut())
                .arg(out.data_mut())
                .arg(&ki)
                .arg(&eps);
            q.push_args(&mut launch);
            // SAFETY: a, b, sum and out hold n rows of k values, weight holds k; q n rows of k.
            unsafe { launch.run(QuantizedRows::grid(n, k)) }.map_err(failed(OP))?;
            return Ok((sum, out.with_q8(q)));
        }
        let n_groups = a.len() / group;
        if n_groups > 0 {
            let cfg = LaunchConfig {
                grid_dim: (n_groups as u32, 1, 1),
                block_dim: (norm_threads(group), 1, 1),
                shared_mem_bytes: 0,
            };
            let group = group as u32;
            let mut launch = self.kernels.launch(self.stream, &self.kernels.add_rms_norm);
            launch
                .arg(a.data())
                .arg(b.data())
                .arg(weight)
                .arg(sum.data_mut())
                .arg(out.data_mut())
                .arg(&group)
                .arg(&eps);
            // SAFETY: a, b, sum and out hold n_groups × group values, weight holds group.
            unsafe { launch.run(cfg) }.map_err(failed(OP))?;
        }
        Ok((sum, out))
    }

    /// `act(gate + gate_bias) ⊙ (up + up_bias)`, the biases optional; the caller has checked
    /// the shapes. With `q8` (the product that reads it takes 8-bit rows), rows few enough for
    /// the 8-bit products (decoding) get their 8-bit rows too (`gated_activation_bias_q8`).
    pub fn gated_activation_bias(
        &self,
        gate: &CudaTensor,
        gate_bias: Option<&CudaSlice<f32>>,
        up: &CudaTensor,
        up_bias: Option<&CudaSlice<f32>>,
        act: Activation,
        q8: bool,
    ) -> Result<CudaTensor> {
        const OP: &str = "gated_ffn";
        let mut out = CudaTensor::uninit(self.pool, OP, gate.n_tokens(), gate.width())?;
        let n = gate.len() as u64;
        if n > 0 {
            let width = gate.width() as u32;
            let act = match act {
                Activation::Silu => 0i32,
                Activation::GeluTanh => 1,
            };
            // An absent bias is never read; the activations stand in for its pointer.
            let (gb, has_gb) = (
                gate_bias.unwrap_or(gate.data()),
                i32::from(gate_bias.is_some()),
            );
            let (ub, has_ub) = (up_bias.unwrap_or(up.data()), i32::from(up_bias.is_some()));
            let (rows, k) = (gate.n_tokens(), gate.width());
            let mut q = match q8 && QuantizedRows::fit(rows, k) {
                true => Some(QuantizedRows::new(self.pool, rows, k)?),
                false => None,
            };
            let kernel = match q {
                Some(_) => &self.kernels.gated_activation_bias_q8,
                None => &self.kernels.gated_activation_bias,
            };
            let ki = k as i32;
            let mut launch = self.kernels.launch(self.stream, kernel);
            launch
                .arg(gate.data())
                .arg(gb)
                .arg(&has_gb)
                .arg(up.data())
                .arg(ub)
                .arg(&has_ub)
                .arg(out.data_mut());
            // The slices' (sum, peak) pairs, taken before the launch that borrows them.
            let mut partials = q
                .as_ref()
                .map(|_| QuantizedRows::slice_partials(self.pool, rows, k))
                .transpose()?;
            match (&mut q, &mut partials) {
                (Some(q), Some(partials)) => {
                    launch.arg(&ki).arg(&act);
                    q.push_args(&mut launch);
                    // The kernel writes the counters, which this handle does not own: they
                    // are the backend's, on this stream, and left zero by every launch.
                    launch.arg(&mut **partials).arg(self.slice_counters);
                    // SAFETY: gate, up and out hold rows × k values; each bias that is read
                    // holds k; q rows of k; partials a pair per block; the counters at least
                    // `Q8_MAX_ROWS` ≥ rows words (`QuantizedRows::fit`).
                    unsafe { launch.run(QuantizedRows::grid(rows, k)) }.map_err(failed(OP))?;
                }
                _ => {
                    launch.arg(&width).arg(&act).arg(&n);
                    // SAFETY: gate, up and out hold n values in rows of width; each bias that
                    // is read holds width.
                    unsafe { launch.run(grid_stride(n as usize)) }.map_err(failed(OP))?;
                }
            }
            if let Some(q) = q {
                return Ok(out.with_q8(q));
            }
        }
        Ok(out)
    }

    /// The `k` largest values of each row with their ids, largest first (ties: the lower id
    /// first; NaN ranks as −∞), as `crate::batch::top_k` ranks them; `k` at most the width.
    pub fn top_k(&self, logits: &CudaTensor, k: usize) -> Result<Vec<Vec<(u32, f32)>>> {
        const OP: &str = "top_k";
        let rows = logits.n_tokens();
        if rows == 0 || k == 0 {
            return Ok(vec![Vec::new(); rows]);
        }
        // SAFETY: the kernel writes all k entries of every row.
        let mut ids = unsafe { self.stream.alloc::<u32>(rows * k) }.map_err(failed(OP))?;
        let mut values = unsafe { self.stream.alloc::<f32>(rows * k) }.map_err(failed(OP))?;
        let cfg = LaunchConfig {
            grid_dim: (rows as u32, 1, 1),
            block_dim: (TOP_K_THREADS, 1, 1),
            shared_mem_bytes: 0,
        };
        let (width, k32) = (logits.width() as u32, k as u32);
        let mut launch = self.kernels.launch(self.stream, &self.kernels.top_k);
        launch
            .arg(logits.data())
            .arg(&width)
            .arg(&k32)
            .arg(&mut ids)
            .arg(&mut values);
        // SAFETY: logits holds rows × width values, ids and values rows × k, k ≤ width.
        unsafe { launch.run(cfg) }.map_err(failed(OP))?;
        let ids = self.stream.clone_dtoh(&ids).map_err(failed(OP))?;
        let values = self.stream.clone_dtoh(&values).map_err(failed(OP))?;
        Ok(ids
            .chunks_exact(k)
            .zip(values.chunks_exact(k))
            .map(|(ids, values)| ids.iter().copied().zip(values.iter().copied()).collect())
            .collect())
    }
}

/// Threads per row of `top_k` (`THREADS` in top_k.cu).
const TOP_K_THREADS: u32 = 1024;

/// Threads of the block that normalizes one group of `group` values (rms_norm and
/// add_rms_norm, which must sum in the same order): as many as there are values, up to 1024.
/// A decoded token's row is one group, so one block does all of it, and its loads are in
/// flight together only if the block is wide: 256 threads spent 15 µs on a 4096-wide row.
fn norm_threads(group: usize) -> u32 {
    group.next_multiple_of(32).min(1024) as u32
}
