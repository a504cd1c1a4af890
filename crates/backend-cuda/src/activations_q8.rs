//! Activation rows quantized to 8 bits on the device, for the dp4a matrix-vector kernels
//! (`kernels/matvec_q8.cu`) and the tensor-core kernels (`kernels/mmq_tc.cu`,
//! `kernels/mmq_f16.cu`): blocks of 32 int8 values with a scale and a sum each, and each row's
//! outliers split off first, as the cpu backend does (`crates/backend-cpu/src/outliers.rs`), so that a value in the thousands
//! does not round its neighbours to zero.
//!
//! `quantize_q8` makes them for a product; in a decode step the norms and the gated
//! activation make them as they write their output (`kernels/quantize_q8.cuh` holds the
//! steps both take), and the products read those instead.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, CudaStream, LaunchConfig};
use plumb_model::Result;

use crate::error::{error, failed};
use crate::launch::Launch;
use crate::matmul::Q8_MAX_ROWS;
use crate::pool::{Buffer, Pool};

const OP: &str = "matmul";

/// A value is an outlier when its magnitude exceeds this multiple of its row's mean magnitude:
/// the cpu backend's `OUTLIER_FACTOR`, so that both backends split the same values off.
const OUTLIER_FACTOR: f32 = 128.0;

/// Threads per block of `quantize_q8` and of the kernels that quantize the rows they write, and
/// the values each block quantizes (`QUANTIZE_THREADS`, `QUANTIZE_VALUES` in quantize_q8.cuh).
const THREADS: u32 = 512;
const VALUES_PER_BLOCK: usize = 512;

/// A counter a row for the kernels that quantize by slices (`q8_finish_slices` in
/// quantize_q8.cuh), zero between launches: each launch's last block of a row resets it.
pub(crate) fn slice_counters(stream: &Arc<CudaStream>) -> Result<CudaSlice<u32>> {
    stream.alloc_zeros(Q8_MAX_ROWS).map_err(failed(OP))
}

/// The quantized rows of one activation tensor, in buffers reused from product to product on
/// one stream.
pub(crate) struct QuantizedRows {
    stream: Arc<CudaStream>,
    /// n × k int8 values.
    pub qs: Buffer<i8>,
    /// Per block of 32 values: its scale and the sum of the values it stands for (f32 pairs).
    pub ds: Buffer<f32>,
    /// Per row: the count, then (column, value bits) pairs, `1 + 2 · cap` words.
    pub outliers: Buffer<u32>,
    /// The most outliers a row can have.
    pub cap: i32,
    /// The values a row holds (the width of the rows they quantize).
    pub k: usize,
}

impl QuantizedRows {
    /// The most outliers a row of k values can have: each exceeds `OUTLIER_FACTOR` times the
    /// mean magnitude, so together they exceed `count · OUTLIER_FACTOR / k` times the row's
    /// magnitude sum, which they are part of.
    fn cap(k: usize) -> usize {
        k / OUTLIER_FACTOR as usize + 1
    }

    /// Whether a kernel that writes n rows of k values should quantize them as it goes: where
    /// the products take 8-bit rows (decoding) and k is whole blocks of 32.
    pub fn fit(n: usize, k: usize) -> bool {
        (1..=Q8_MAX_ROWS).contains(&n) && k.is_multiple_of(32) && k <= i32::MAX as usize
    }

    /// The lengths of n rows' values, block scales and outlier lists, and the outlier cap.
    fn lens(n: usize, k: usize) -> ([usize; 3], usize) {
        let cap = Self::cap(k);
        ([n * k, 2 * n * (k / 32), n * (1 + 2 * cap)], cap)
    }

    /// Buffers for n rows of k values (k a multiple of 32), for a kernel to fill, from `pool`
    /// where the pass takes its buffers there.
    pub fn new(pool: &Arc<Pool>, n: usize, k: usize) -> Result<QuantizedRows> {
        let ([qs, ds, outliers], cap) = Self::lens(n, k);
        // SAFETY (the three): the kernel that fills them writes every element that the
        // products read.
        Ok(QuantizedRows {
            stream: Arc::clone(pool.stream()),
            qs: unsafe { pool.take(OP, qs) }?,
            ds: unsafe { pool.take(OP, ds) }?,
            outliers: unsafe { pool.take(OP, outliers) }?,
            cap: cap as i32,
            k,
        })
    }

    /// Buffers of their own (not the pool's), for a slot that keeps them from pass to pass.
    fn owned(stream: &Arc<CudaStream>, n: usize, k: usize) -> Result<QuantizedRows> {
        let ([qs, ds, outliers], cap) = Self::lens(n, k);
        // SAFETY (the three): as in `new`.
        Ok(QuantizedRows {
            stream: Arc::clone(stream),
            qs: Buffer::own(unsafe { stream.alloc(qs.max(1)) }.map_err(failed(OP))?),
            ds: Buffer::own(unsafe { stream.alloc(ds.max(1)) }.map_err(failed(OP))?),
            outliers: Buffer::own(unsafe { stream.alloc(outliers.max(1)) }.map_err(failed(OP))?),
            cap: cap as i32,
            k,
        })
    }

    /// The (sum, peak) pairs of a kernel that quantizes n rows of k values by slices
    /// (`q8_finish_slices` in quantize_q8.cuh): one a block, as f32 pairs.
    pub fn slice_partials(pool: &Arc<Pool>, n: usize, k: usize) -> Result<Buffer<f32>> {
        // SAFETY: every block writes its pair before the row's last block reads them all.
        unsafe { pool.take(OP, 2 * n * k.div_ceil(VALUES_PER_BLOCK)) }
    }

    /// The grid of a kernel that quantizes n rows of k values: blocks of `THREADS` threads,
    /// `VALUES_PER_BLOCK` values each, across each row.
    pub fn grid(n: usize, k: usize) -> LaunchConfig {
        LaunchConfig {
            grid_dim: (k.div_ceil(VALUES_PER_BLOCK) as u32, n as u32, 1),
            block_dim: (THREADS, 1, 1),
            shared_mem_bytes: 0,
        }
    }

    /// Pushes the outlier factor and these rows' buffers: the last arguments of every kernel
    /// that writes 8-bit rows (`quantize_q8` and the fused producers).
    pub fn push_args<'a>(&'a mut self, launch: &mut Launch<'a>) {
        launch
            .arg(&OUTLIER_FACTOR)
            .arg(&mut *self.qs)
            .arg(&mut *self.ds)
            .arg(&mut *self.outliers)
            .arg(&self.cap);
    }

    /// Quantizes the n rows of k values of x (k a multiple of 32) into `slot`'s buffers,
    /// allocating them where they are missing, too small, or belong to another stream;
    /// `quantize_q8` is launched with programmatic dependent launch where `pdl` is set.
    pub fn quantize<'a>(
        slot: &'a mut Option<QuantizedRows>,
        quantize_q8: &CudaFunction,
        pdl: bool,
        stream: &Arc<CudaStream>,
        x: &CudaSlice<f32>,
        n: usize,
        k: usize,
    ) -> Result<&'a QuantizedRows> {
        if !k.is_multiple_of(32) || k > i32::MAX as usize || x.len() < n * k {
            return Err(error(
                OP,
                format!("cannot quantize {n} rows of {k} activations (k must be a multiple of 32)"),
            ));
        }
        let cap = Self::cap(k);
        let fits = slot.as_ref().is_some_and(|q| {
            Arc::ptr_eq(&q.stream, stream)
                && q.qs.len() >= n * k
                && q.ds.len() >= 2 * n * (k / 32)
                && q.outliers.len() >= n * (1 + 2 * cap)
        });
        if !fits {
            *slot = None;
            *slot = Some(QuantizedRows::owned(stream, n, k)?);
        }
        let q = slot.as_mut().expect("allocated above");
        (q.cap, q.k) = (cap as i32, k);
        let ki = k as i32;
        let mut launch = Launch::new(stream, quantize_q8, pdl);
        launch.arg(x).arg(&ki);
        q.push_args(&mut launch);
        let config = Self::grid(n, k);
        // SAFETY: matches `quantize_q8`; x holds n × k values, qs n × k, ds n × k / 32 pairs,
        // outliers n × (1 + 2 cap) words.
        unsafe { launch.run(config) }.map_err(failed(OP))?;
        Ok(q)
    }
}
