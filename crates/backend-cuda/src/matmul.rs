//! Products with the stored weights, `y = x · Wᵀ`, and embedding lookups, straight from the
//! GGUF blocks (Q6_K's as `q6_k_layout` repacks them).
//!
//! - A few rows (decoding, n ≤ 8; Q4_K and Q6_K n ≤ 3): matrix-vector kernels that stream the
//!   weight once for all n rows. The types of the shipped models (Q4_0, Q4_1, Q5_0, Q8_0, Q4_K,
//!   Q5_K, Q6_K) take 8-bit activations and dp4a integer products (`kernels/matvec_q8.cu`),
//!   after a kernel that quantizes each activation row once for all the products that share
//!   it, splitting off its outliers as the cpu backend does (`activations_q8.rs`), or from the
//!   8-bit rows that the norm or gated activation which wrote the activations made of them. The
//!   other types dequantize in registers and multiply with the f32 activations
//!   (`kernels/matmul.cu`).
//! - Batched decoding (4 to 64 rows) with Q4_K and Q6_K weights: tensor-core products with the
//!   same 8-bit activation rows, the rows in shared memory and each weight byte read once for
//!   all of them, the super-blocks split into slices where a weight has too few blocks of rows
//!   for the SMs. Up to 16 rows int8 products of the weights' quants (`kernels/mmq_tc.cu`), each
//!   32-value step's sum scaled in f32; on an H200 (7B Q4_K_M, tokens/s of 4 / 16 / 64
//!   sequences): 1,084 / 2,982 / 4,520 against 981 / 1,505 / 4,228 with the mat-vecs and cuBLAS
//!   (docs/benchmarks.md, 2026-11-29). At 64 rows that scaling bounds them, so from 17 rows
//!   the weights are dequantized to f16 in registers instead and meet the 8-bit rows written as
//!   f16 (`kernels/mmq_f16.cu`; `tensor_core_kernel`).
//! - Batched decoding (9 to 16 rows) with the other five types: the 8-bit kernels on groups of
//!   8 rows, with 4 weight rows a warp so that each load of activations serves more products,
//!   which stream the weight once per group. From 32 rows on, the dequantize + cuBLAS path below
//!   was faster (7B Q4_K_M, 64 sequences: 2,970 against 1,725 tokens/s): these kernels reload
//!   every activation chunk from L1 for each 4 weight rows.
//! - More rows (prefill): the weight is dequantized to f16, tile by tile, and multiplied by
//!   cuBLAS (f16 inputs, f32 accumulation) with the activations in f16, each row scaled by a
//!   power of two so that f16's range fits it (`kernels/dequant.cu`). F32 and BF16 weights,
//!   whose range f16 lacks, go through cuBLAS in f32 with TF32 products instead.
//! - Embedding lookups dequantize whole rows to f32, bit-exact with `plumb_ggml`.

use std::sync::{Arc, Mutex};

use cudarc::cublas::{result as blas, sys as blas_sys, CudaBlas};
use cudarc::driver::sys::{CUdeviceptr, CUfunction_attribute};
use cudarc::driver::{
    CudaContext, CudaFunction, CudaModule, CudaSlice, CudaStream, CudaView, DevicePtr,
    DevicePtrMut, DeviceRepr, LaunchConfig, SyncOnDrop,
};
use plumb_gguf::GgmlType;
use plumb_model::Result;

use crate::activations_q8::QuantizedRows;
use crate::error::{error, failed};
use crate::graphs::Scratch;
use crate::kernels::PDL;
use crate::launch::Launch;
use crate::nvrtc::load_module;
use crate::q6_k_layout;
use crate::weight::DeviceWeight;

/// Bytes of padding that every weight buffer needs past its data: the kernels read 2-byte
/// aligned blocks as aligned 4-byte words, which may reach past the last block.
pub(crate) const WEIGHT_PADDING: usize = 16;

/// Up to this many rows of x take the matrix-vector kernels (one is compiled for each count).
const MATVEC_MAX_ROWS: usize = 8;
/// Up to this many rows take the 8-bit kernels, in groups of `MATVEC_MAX_ROWS`, for the types
/// without tensor-core kernels; more take cuBLAS. 7B Q4_K_M, tokens/s of 16 / 32 sequences:
/// 1,293 / 1,533 here, 956 / 1,726 with cuBLAS.
const MATVEC_Q8_MAX_ROWS: usize = 16;
/// Up to this many rows take the tensor-core kernels (`mmq_tc_*`), for the types that have them
/// (`has_tensor_core`), from `TENSOR_CORE_MIN_ROWS` rows on; more take cuBLAS.
const TENSOR_CORE_MAX_ROWS: usize = 64;
/// From this many rows on, the tensor-core kernels multiply instead of the 8-bit mat-vecs. On an
/// H200, 7B Q4_K_M, 4 sequences: 1,083.8 tokens/s against 981.7 (TinyLlama 2,884.2 – 2,906.7
/// against 2,623.4 – 2,639.4); TinyLlama, 2 sequences: 1,498.9 against 1,622.3 (3 not measured).
const TENSOR_CORE_MIN_ROWS: usize = 4;
/// The most rows that any product takes as 8-bit rows, which the kernels that write
/// activations then quantize as they go (`QuantizedRows::fit`).
pub(crate) const Q8_MAX_ROWS: usize = TENSOR_CORE_MAX_ROWS;
/// Weight rows per block (`TC_ROWS`), threads per block (32 `TC_WARPS`) and values per stage
/// (`TC_K`) of the tensor-core kernels.
const TC_ROWS: usize = 64;
const TC_THREADS: u32 = 128;
const TC_K: usize = 256;
/// The counts of 8-row tiles that the int8 tensor-core kernels are compiled for (`MMQ_TC_ALL`).
const TC_TILES: [usize; 2] = [1, 2];
/// The blocks per SM that the int8 tensor-core kernels' slices aim at, by kernel (`TC_TILES`): a
/// 4096-row weight has 64 blocks of 64 rows, too few to keep every SM's loads in flight, and
/// splits its super-blocks into slices until the grid has about this many blocks per SM. With
/// one tile a block's registers leave room for 4 blocks an SM, whose loads in flight the
/// products need: an H200, 7B (8 layers) Q4_K_M, 4 sequences, 3,853 / 3,866 tokens/s with 2,
/// 4,066 / 4,103 with 4, 4,072 / 4,008 with 8 (and 16 slices at most); TinyLlama 2,922 / 2,934,
/// 3,012 / 3,033 and 2,911 / 2,848; the full 7B 1,147 / 1,155 against 1,050 / 1,061. With 2
/// tiles 4 was slower on TinyLlama's 16 sequences (8,845 / 8,934 against 9,296 / 9,178;
/// docs/benchmarks.md, 2026-11-29, fifth round).
const TC_BLOCKS_PER_SM: [usize; 2] = [4, 2];
/// The most slices of one product (each adds a partial sum that the last one reads).
const TC_MAX_SLICES: usize = 8;
/// The counts of 8-row tiles that the kernels with the weights dequantized to f16 are compiled
/// for (`mmq_f16_*` in mmq_f16.cu): 17 – 64 rows, above the int8 kernels' `TC_TILES`. They need
/// the rows in f16 (`q8_to_f16`, a launch of its own) but
/// scale a step's sums with the weights, once for all tiles of rows. On an H200
/// (docs/benchmarks.md, 2026-11-30), 7B Q4_K_M, tokens/s of 32 / 64 sequences: 4,318 – 4,338 /
/// 5,557 – 5,604 on the int8 kernels, 5,095 – 5,158 / 6,000 – 6,111 with these; TinyLlama 12,617
/// – 13,405 / 16,043 – 16,920 against 13,244 – 13,652 / 16,645 – 17,259; ncu of a 7B step of 64
/// (8 layers): 275 µs a layer in the int8 products, 222 in these and 15 in `q8_to_f16`.
const TC_F16_TILES: [usize; 2] = [4, 8];
/// The blocks per SM that their slices aim at, by kernel (`TC_F16_TILES`), as measured above
/// (their registers allow 3; not swept).
const TC_F16_BLOCKS_PER_SM: [usize; 2] = [2, 2];

/// A tensor-core kernel for a product's rows: an int8 one (`mmq_tc_*`) or one with the weights in
/// f16 (`mmq_f16_*`), by its index in `TC_TILES` or `TC_F16_TILES`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum TensorCoreKernel {
    Int8(usize),
    F16(usize),
}

/// The tensor-core kernel for n rows and its tiles of 8 rows (n rounded up to whole tiles, their
/// count to a power of two), or none above `TENSOR_CORE_MAX_ROWS`.
fn tensor_core_kernel(n: usize) -> Option<(TensorCoreKernel, usize)> {
    let tiles = n.div_ceil(MATVEC_MAX_ROWS).next_power_of_two();
    let int8 = TC_TILES.iter().position(|&t| t == tiles);
    let f16 = TC_F16_TILES.iter().position(|&t| t == tiles);
    match (int8, f16) {
        (Some(i), _) => Some((TensorCoreKernel::Int8(i), tiles)),
        (None, Some(i)) => Some((TensorCoreKernel::F16(i), tiles)),
        (None, None) => None,
    }
}
/// Threads a block of `q8_to_f16`, 8 values each (`Q8_TO_F16_THREADS` in mmq_f16.cu).
const Q8_TO_F16_THREADS: u32 = 256;
/// The f16 kernels' shared memory: a ring of `F16_STAGES` stages of half a super-block (`F16_K`
/// values) of each of 8 rows a tile, `F16_STRIDE` f16 values a row (mmq_f16.cu).
const F16_STAGES: usize = 3;
const F16_STRIDE: usize = 128 + 32;
fn f16_shared_bytes(tiles: usize) -> usize {
    F16_STAGES * 8 * tiles * F16_STRIDE * size_of::<u16>()
}
/// Warps per block and weight rows per warp of the matrix-vector kernels (`WARPS`, `ROWS` in
/// matmul.cu).
const MATVEC_WARPS: usize = 4;
const MATVEC_ROWS_PER_WARP: usize = 2;
/// Threads of `x_to_f16`, one block a row (`X_TO_F16_THREADS` in dequant.cu). ncu of a 7B
/// decode step of 64 rows: 8.4 µs a launch with 256 threads.
const X_TO_F16_THREADS: u32 = 1024;
/// Elements of the largest weight tile dequantized at once for cuBLAS (64 MiB in f16).
const TILE_ELEMENTS: usize = 1 << 25;

const F16_HELPERS: &str = include_str!("kernels/f16.cuh");
const WEIGHT_ROW: &str = include_str!("kernels/weight_row.cuh");
const BLOCKS: &str = include_str!("kernels/blocks.cuh");

/// The kernel sources of this module, by module name, as NVRTC compiles them.
pub(crate) fn sources() -> [(&'static str, String); 2] {
    [
        (
            "matmul",
            format!(
                "{PDL}{F16_HELPERS}{WEIGHT_ROW}{BLOCKS}{}{}{}{}{}{}{}",
                include_str!("kernels/matmul.cu"),
                include_str!("kernels/quantize_q8.cuh"),
                include_str!("kernels/matvec_q8.cu"),
                include_str!("kernels/copy_async.cuh"),
                include_str!("kernels/tensor_core.cuh"),
                include_str!("kernels/mmq_tc.cu"),
                include_str!("kernels/mmq_f16.cu")
            ),
        ),
        (
            "dequant",
            format!(
                "{PDL}{F16_HELPERS}{WEIGHT_ROW}{BLOCKS}{}",
                include_str!("kernels/dequant.cu")
            ),
        ),
    ]
}

/// The kernels' name for each supported type.
fn kernel_name(ty: GgmlType) -> Option<&'static str> {
    use GgmlType::*;
    Some(match ty {
        Q4_0 => "q4_0",
        Q4_1 => "q4_1",
        Q5_0 => "q5_0",
        Q5_1 => "q5_1",
        Q8_0 => "q8_0",
        Q2_K => "q2_k",
        Q3_K => "q3_k",
        Q4_K => "q4_k",
        Q5_K => "q5_k",
        Q6_K => "q6_k",
        F16 => "f16",
        BF16 => "bf16",
        F32 => "f32",
        _ => return None,
    })
}

/// Whether weights of type `ty` take 8-bit activations in matrix-vector products (`mvq_*` in
/// matvec_q8.cu), so that a kernel writing the activations they multiply may quantize them as
/// it goes.
pub(crate) fn has_matvec_q8(ty: GgmlType) -> bool {
    use GgmlType::*;
    matches!(ty, Q4_0 | Q4_1 | Q5_0 | Q8_0 | Q4_K | Q5_K | Q6_K)
}

/// Whether weights of type `ty` have tensor-core kernels for batched decoding (`mmq_tc_*` in
/// mmq_tc.cu).
fn has_tensor_core(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K)
}

const TYPES: [GgmlType; 13] = {
    use GgmlType::*;
    [
        Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, F16, BF16, F32,
    ]
};

/// How the GEMM path feeds cuBLAS a weight of each type.
#[derive(Clone, Copy, PartialEq)]
enum GemmInput {
    /// Dequantized to f16 tile by tile; activations in scaled f16.
    DequantF16,
    /// The stored f16 itself; activations in scaled f16.
    StoredF16,
    /// Dequantized to f32 tile by tile; TF32 products with the f32 activations.
    DequantF32,
    /// The stored f32 itself; TF32 products.
    StoredF32,
}

fn gemm_input(ty: GgmlType) -> GemmInput {
    match ty {
        GgmlType::F16 => GemmInput::StoredF16,
        GgmlType::BF16 => GemmInput::DequantF32,
        GgmlType::F32 => GemmInput::StoredF32,
        _ => GemmInput::DequantF16,
    }
}

/// Elements each thread of the dequantizing kernels makes: a piece of a block, or one value
/// of the float types (whose rows may have any length).
fn piece(ty: GgmlType) -> usize {
    if ty.block_size() == 1 {
        1
    } else {
        8
    }
}

/// Elements per 16-byte load of the float types' matrix-vector kernels, whose rows must hold
/// a whole number of them; the quantized types' rows are whole blocks, which always fit.
fn matvec_fits(ty: GgmlType, k: usize) -> bool {
    match ty {
        GgmlType::F16 | GgmlType::BF16 => k.is_multiple_of(8),
        GgmlType::F32 => k.is_multiple_of(4),
        _ => true,
    }
}

/// The 8-bit kernels of one type.
struct Q8Kernels {
    /// `matvec[n - 1]` multiplies n rows.
    matvec: Vec<CudaFunction>,
    /// A single row over a launch of at least `WIDE_ROWS` weight rows (`mvq_*_1_wide`), for
    /// the types that have it.
    single_wide: Option<CudaFunction>,
    /// Groups of 8 rows (`mmq_*`), `BATCH_ROWS_PER_WARP` weight rows a warp.
    batched: CudaFunction,
    /// `tensor_core[i]` multiplies up to 8 · `TC_TILES[i]` rows on the tensor cores
    /// (`mmq_tc_*`); empty for the types without them.
    tensor_core: Vec<CudaFunction>,
    /// `tensor_core_f16[i]` multiplies up to 8 · `TC_F16_TILES[i]` rows with the weights in f16
    /// (`mmq_f16_*`); empty likewise.
    tensor_core_f16: Vec<CudaFunction>,
}

impl Q8Kernels {
    /// The kernel for a single activation row over a launch of `rows` weight rows, and its
    /// weight rows a warp.
    fn single_row(&self, rows: usize) -> (&CudaFunction, usize) {
        match &self.single_wide {
            Some(wide) if rows >= WIDE_ROWS => (wide, WIDE_ROWS_PER_WARP),
            _ => (&self.matvec[0], SINGLE_ROWS_PER_WARP),
        }
    }

    /// The most rows these kernels take.
    fn max_rows(&self) -> usize {
        match self.tensor_core.is_empty() {
            true => MATVEC_Q8_MAX_ROWS,
            false => TENSOR_CORE_MAX_ROWS,
        }
    }
}

/// Weight rows per warp of the 8-bit kernels for a single activation row: one in `mvq_*_1` (R1 of
/// `MVQ_ALL` in matvec_q8.cu), `WIDE_ROWS_PER_WARP` in `mvq_*_1_wide` (W of `MVQ_WIDE`).
const SINGLE_ROWS_PER_WARP: usize = 1;
const WIDE_ROWS_PER_WARP: usize = 2;

/// The launch's weight rows (all its products') from which a single activation row takes the
/// wide kernel, where its type has one (see `MVQ_WIDE` in matvec_q8.cu for the sweep).
const WIDE_ROWS: usize = 4096;

/// Whether type `ty` has a wide single-row kernel (`mvq_*_1_wide`).
fn has_wide_single_row(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_0 | GgmlType::Q8_0)
}

/// Weight rows per warp of the batched 8-bit kernels (`BATCH_ROWS` in matvec_q8.cu).
const BATCH_ROWS_PER_WARP: usize = 4;

struct TypeKernels {
    ty: GgmlType,
    /// `matvec[n - 1]` multiplies n rows.
    matvec: Vec<CudaFunction>,
    /// The same with 8-bit activations, for the types that have them.
    matvec_q8: Option<Q8Kernels>,
    get_rows: CudaFunction,
    /// To f16 (f32 for BF16); none for F16 and F32, which cuBLAS reads as stored.
    dequant: Option<CudaFunction>,
}

/// cuBLAS and the scratch buffers of the GEMM path, made at its first use.
struct Gemm {
    blas: CudaBlas,
    /// The stream `blas` queues on.
    stream: Arc<CudaStream>,
    /// A dequantized weight tile (f16 or f32).
    tile: Option<CudaSlice<u8>>,
    /// The activations in f16.
    x16: Option<CudaSlice<u16>>,
    /// Per row of x, the factor that undoes its scaling.
    scales: Option<CudaSlice<f32>>,
}

/// The scratch buffers of the tensor-core kernels' slices: each slice's partial sums, and per
/// block of weight rows the count of its slices done (zero between launches: the last slice
/// resets it).
struct SliceScratch {
    partial: CudaSlice<f32>,
    counters: CudaSlice<u32>,
}

/// The 8-bit rows of a product on the f16 tensor-core kernels, as those take them: the values in
/// f16, each row scaled by a power of two, and per row the factor that undoes it.
struct HalfRows {
    values: Option<CudaSlice<u16>>,
    factors: Option<CudaSlice<f32>>,
}

/// The matrix kernels of one device.
pub(crate) struct Matmul {
    types: Vec<TypeKernels>,
    x_to_f16: CudaFunction,
    scale_rows: CudaFunction,
    quantize_q8: CudaFunction,
    q8_to_f16: CudaFunction,
    gemm: Mutex<Option<Gemm>>,
    /// The buffers of the last activations quantized to 8 bits.
    quantized: Mutex<Option<QuantizedRows>>,
    /// The 8-bit rows of the last product on the f16 tensor-core kernels, as f16 (`q8_to_f16`).
    halves: Mutex<HalfRows>,
    slices: Mutex<Option<SliceScratch>>,
    /// The device's multiprocessors, which the tensor-core kernels' grids are sized for.
    n_sm: usize,
    /// Whether the kernels are launched with programmatic dependent launch (see `launch`).
    pdl: bool,
}

impl Matmul {
    /// Compiles (or takes from the disk cache) the kernels for `ctx`'s device, to be launched
    /// with programmatic dependent launch where `pdl` is set.
    pub fn new(ctx: &Arc<CudaContext>, pdl: bool, n_sm: usize) -> Result<Matmul> {
        const OP: &str = "load_module";
        let [matvec, dequant] = sources().map(|(name, source)| load_module(ctx, name, &source));
        let (matvec, dequant) = (matvec?, dequant?);
        let f = |module: &Arc<CudaModule>, name: &str| {
            module
                .load_function(name)
                .map_err(|e| error(OP, format!("kernel {name}: {e}")))
        };
        let mut types = Vec::with_capacity(TYPES.len());
        for ty in TYPES {
            let name = kernel_name(ty).expect("TYPES are supported");
            types.push(TypeKernels {
                ty,
                matvec: (1..=MATVEC_MAX_ROWS)
                    .map(|n| f(&matvec, &format!("mv_{name}_{n}")))
                    .collect::<Result<_>>()?,
                matvec_q8: match has_matvec_q8(ty) {
                    true => Some(Q8Kernels {
                        matvec: (1..=MATVEC_MAX_ROWS)
                            .map(|n| f(&matvec, &format!("mvq_{name}_{n}")))
                            .collect::<Result<_>>()?,
                        single_wide: match has_wide_single_row(ty) {
                            true => Some(f(&matvec, &format!("mvq_{name}_1_wide"))?),
                            false => None,
                        },
                        batched: f(&matvec, &format!("mmq_{name}"))?,
                        tensor_core: match has_tensor_core(ty) {
                            true => TC_TILES
                                .iter()
                                .map(|t| f(&matvec, &format!("mmq_tc_{name}_{t}")))
                                .collect::<Result<_>>()?,
                            false => Vec::new(),
                        },
                        tensor_core_f16: match has_tensor_core(ty) {
                            true => TC_F16_TILES
                                .iter()
                                .map(|&t| {
                                    let kernel = f(&matvec, &format!("mmq_f16_{name}_{t}"))?;
                                    kernel
                                        .set_attribute(
                                            CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                            f16_shared_bytes(t) as i32,
                                        )
                                        .map_err(|e| error(OP, format!("mmq_f16_{name}_{t}: {e}")))?;
                                    Ok(kernel)
                                })
                                .collect::<Result<_>>()?,
                            false => Vec::new(),
                        },
                    }),
                    false => None,
                },
                get_rows: f(&dequant, &format!("get_rows_{name}"))?,
                dequant: match gemm_input(ty) {
                    GemmInput::DequantF16 | GemmInput::DequantF32 => {
                        Some(f(&dequant, &format!("dequant_{name}"))?)
                    }
                    GemmInput::StoredF16 | GemmInput::StoredF32 => None,
                },
            });
        }
        Ok(Matmul {
            types,
            x_to_f16: f(&dequant, "x_to_f16")?,
            scale_rows: f(&dequant, "scale_rows")?,
            quantize_q8: f(&matvec, "quantize_q8")?,
            q8_to_f16: f(&matvec, "q8_to_f16")?,
            gemm: Mutex::new(None),
            quantized: Mutex::new(None),
            halves: Mutex::new(HalfRows {
                values: None,
                factors: None,
            }),
            slices: Mutex::new(None),
            n_sm,
            pdl,
        })
    }

    /// Launches the kernels with programmatic dependent launch or not.
    pub fn set_pdl(&mut self, pdl: bool) {
        self.pdl = pdl;
    }

    /// The address and length of each scratch buffer the products use, which a CUDA graph
    /// of them reads (see `graphs`).
    pub fn scratch(&self, stream: &CudaStream) -> Scratch {
        fn id<T>(s: &CudaSlice<T>, stream: &CudaStream) -> (CUdeviceptr, usize) {
            (s.device_ptr(stream).0, s.len())
        }
        let mut ids = Vec::with_capacity(8);
        if let Ok(q) = self.quantized.lock() {
            if let Some(q) = q.as_ref() {
                ids.extend([
                    id(&q.qs, stream),
                    id(&q.ds, stream),
                    id(&q.outliers, stream),
                ]);
            }
        }
        if let Ok(h) = self.halves.lock() {
            ids.extend(h.values.as_ref().map(|s| id(s, stream)));
            ids.extend(h.factors.as_ref().map(|s| id(s, stream)));
        }
        if let Ok(s) = self.slices.lock() {
            if let Some(s) = s.as_ref() {
                ids.extend([id(&s.partial, stream), id(&s.counters, stream)]);
            }
        }
        if let Ok(g) = self.gemm.lock() {
            if let Some(g) = g.as_ref() {
                ids.extend(g.tile.as_ref().map(|s| id(s, stream)));
                ids.extend(g.x16.as_ref().map(|s| id(s, stream)));
                ids.extend(g.scales.as_ref().map(|s| id(s, stream)));
            }
        }
        ids
    }

    /// Whether weights of type `ty` have kernels here.
    pub fn supports(ty: GgmlType) -> bool {
        kernel_name(ty).is_some()
    }

    fn kernels(&self, op: &'static str, ty: GgmlType) -> Result<&TypeKernels> {
        self.types
            .iter()
            .find(|t| t.ty == ty)
            .ok_or_else(|| error(op, format!("no kernel for {ty} weights")))
    }

    /// y[n × m] = x[n × k] · Wᵀ for each (W, y) of `products`, row-major f32 on the device.
    /// Weights that multiply the same activations (Q, K and V; gate and up) go together, so
    /// that x is quantized to 8 bits once for all of them, and consecutive ones of one type
    /// share one launch of the 8-bit kernels. `xq`, where given, holds x so quantized already
    /// (by the kernel that wrote x), and no product then quantizes x of its k again.
    pub fn run(
        &self,
        stream: &Arc<CudaStream>,
        x: &CudaSlice<f32>,
        xq: Option<&QuantizedRows>,
        n: usize,
        products: &mut [(&DeviceWeight, &mut CudaSlice<f32>)],
    ) -> Result<()> {
        const OP: &str = "matmul";
        for (w, y) in products.iter() {
            self.kernels(OP, w.ty)?;
            check_weight(OP, w)?;
            if x.len() < n * w.k || y.len() < n * w.m {
                return Err(error(
                    OP,
                    format!(
                        "{n} rows need {} inputs and {} outputs; the buffers hold {} and {}",
                        n * w.k,
                        n * w.m,
                        x.len(),
                        y.len()
                    ),
                ));
            }
        }
        if n == 0 {
            return Ok(());
        }
        let mut quantized = self
            .quantized
            .lock()
            .map_err(|_| error(OP, "a previous product panicked"))?;
        // The k for which `quantized` holds x, once quantized here; likewise `halves` (x's
        // 8-bit rows as f16, for the f16 tensor-core kernels) and the GEMM path's f16 copy of x.
        let mut quantized_k = None;
        let mut halves_k = None;
        let mut x16_k = None;
        let mut i = 0;
        while i < products.len() {
            let w = products[i].0;
            let kernels = self.kernels(OP, w.ty)?;
            let row_bytes = check_weight(OP, w)?;
            if let Some(matvec_q8) = kernels.matvec_q8.as_ref().filter(|q| n <= q.max_rows()) {
                // x's own 8-bit rows, where the kernel that wrote x made them.
                let q = match xq.filter(|q| q.k == w.k) {
                    Some(q) => q,
                    None => {
                        if quantized_k != Some(w.k) {
                            QuantizedRows::quantize(
                                &mut quantized,
                                &self.quantize_q8,
                                self.pdl,
                                stream,
                                x,
                                n,
                                w.k,
                            )?;
                            quantized_k = Some(w.k);
                        }
                        quantized.as_ref().expect("quantized above")
                    }
                };
                let len = products[i..]
                    .iter()
                    .take(MAX_PRODUCTS)
                    .take_while(|(v, _)| v.ty == w.ty && v.k == w.k)
                    .count();
                let group = &mut products[i..i + len];
                if n >= TENSOR_CORE_MIN_ROWS && !matvec_q8.tensor_core.is_empty() {
                    self.tensor_core_launch(
                        stream,
                        matvec_q8,
                        group,
                        row_bytes,
                        q,
                        n,
                        &mut halves_k,
                    )?;
                } else {
                    matvec_q8_launches(stream, matvec_q8, self.pdl, group, row_bytes, q, n)?;
                }
                i += len;
                continue;
            }
            let y = &mut *products[i].1;
            i += 1;
            if n > MATVEC_MAX_ROWS || !matvec_fits(w.ty, w.k) {
                self.gemm(stream, kernels, w, row_bytes, x, n, y, &mut x16_k)?;
                continue;
            }
            let (k, m) = (w.k as i32, w.m as i32);
            let mut launch = Launch::new(stream, &kernels.matvec[n - 1], self.pdl);
            launch
                .arg(&w.bytes)
                .arg(x)
                .arg(y)
                .arg(&k)
                .arg(&m)
                .arg(&row_bytes);
            // SAFETY: the argument list matches `mv_*` in matmul.cu; the buffers were checked
            // to hold m rows of weights (with their padding), n × k inputs and n × m outputs.
            unsafe { launch.run(matvec_config(w.m, matvec_rows_per_warp(w.ty, n))) }
                .map_err(failed(OP))?;
        }
        Ok(())
    }

    /// y[n × m] = x̃ · Wᵀ on the tensor cores for each (W, y) of `products` (at most
    /// `MAX_PRODUCTS`, all of one type and k, so one `row_bytes`), x̃ the n ≤
    /// `TENSOR_CORE_MAX_ROWS` quantized rows in `q`, in one launch: blocks of `TC_ROWS` weight
    /// rows, product after product along x, times slices of the super-blocks along y. Where
    /// `tensor_core_kernel` takes the kernels with f16 weights, x̃'s values are written as f16
    /// first unless `halves_k` says that this `run` did so for k.
    #[allow(clippy::too_many_arguments)]
    fn tensor_core_launch(
        &self,
        stream: &Arc<CudaStream>,
        kernels: &Q8Kernels,
        products: &mut [(&DeviceWeight, &mut CudaSlice<f32>)],
        row_bytes: i64,
        q: &QuantizedRows,
        n: usize,
        halves_k: &mut Option<usize>,
    ) -> Result<()> {
        const OP: &str = "matmul";
        debug_assert!((1..=MAX_PRODUCTS).contains(&products.len()));
        debug_assert!((1..=TENSOR_CORE_MAX_ROWS).contains(&n));
        let k = products[0].0.k;
        let (kernel, tiles) = tensor_core_kernel(n)
            .ok_or_else(|| error(OP, format!("no tensor-core kernel for {n} rows")))?;
        let mut halves = self
            .halves
            .lock()
            .map_err(|_| error(OP, "a previous product panicked"))?;
        if matches!(kernel, TensorCoreKernel::F16(_)) && *halves_k != Some(k) {
            let halves = &mut *halves;
            let values = grow(stream, &mut halves.values, n * k)?;
            let factors = grow(stream, &mut halves.factors, n)?;
            let ki = k as i32;
            let mut launch = Launch::new(stream, &self.q8_to_f16, self.pdl);
            launch
                .arg(&q.qs)
                .arg(&q.ds)
                .arg(values)
                .arg(factors)
                .arg(&ki);
            let config = LaunchConfig {
                grid_dim: (
                    n as u32,
                    (k / 8).div_ceil(Q8_TO_F16_THREADS as usize) as u32,
                    1,
                ),
                block_dim: (Q8_TO_F16_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: matches `q8_to_f16`; q holds n rows of k int8 values (k a multiple of 256)
            // and their block scales, the buffers room for as many f16 and n factors.
            unsafe { launch.run(config) }.map_err(failed(OP))?;
            *halves_k = Some(k);
        }
        let (guards, bases) = product_addresses(stream, products);
        let (ps, blocks) = launch_products(&bases, TC_ROWS, 0);
        let blocks_per_sm = match kernel {
            TensorCoreKernel::Int8(i) => TC_BLOCKS_PER_SM[i],
            TensorCoreKernel::F16(i) => TC_F16_BLOCKS_PER_SM[i],
        };
        let slices = (self.n_sm * blocks_per_sm)
            .div_ceil(blocks)
            .clamp(1, (k / TC_K).min(TC_MAX_SLICES));
        // Each slice's block keeps 4 sums per thread and tile of 8 rows.
        let partial_len = blocks * slices * tiles * TC_THREADS as usize * 4;
        let mut scratch = self
            .slices
            .lock()
            .map_err(|_| error(OP, "a previous product panicked"))?;
        let have = scratch
            .as_ref()
            .map_or((0, 0), |s| (s.partial.len(), s.counters.len()));
        if let Some((partial_len, counters_len)) = grown_scratch(have, (partial_len, blocks)) {
            *scratch = None;
            *scratch = Some(SliceScratch {
                // SAFETY: each slice writes the sums that the last one reads.
                partial: unsafe { stream.alloc::<f32>(partial_len) }.map_err(failed(OP))?,
                counters: stream
                    .alloc_zeros::<u32>(counters_len)
                    .map_err(failed(OP))?,
            });
        }
        let scratch = scratch.as_mut().expect("allocated above");
        let (ki, ni) = (k as i32, n as i32);
        let (mut launch, shared_mem_bytes) = match kernel {
            TensorCoreKernel::F16(i) => {
                let mut launch = Launch::new(stream, &kernels.tensor_core_f16[i], self.pdl);
                launch
                    .arg(&ps)
                    .arg(halves.values.as_ref().expect("written above"))
                    .arg(halves.factors.as_ref().expect("written above"));
                (launch, f16_shared_bytes(tiles))
            }
            TensorCoreKernel::Int8(i) => {
                let mut launch = Launch::new(stream, &kernels.tensor_core[i], self.pdl);
                launch.arg(&ps).arg(&q.qs).arg(&q.ds);
                (launch, 0)
            }
        };
        launch
            .arg(&q.outliers)
            .arg(&q.cap)
            .arg(&ki)
            .arg(&row_bytes)
            .arg(&ni)
            .arg(&mut scratch.partial)
            .arg(&mut scratch.counters);
        let config = LaunchConfig {
            grid_dim: (blocks as u32, slices as u32, 1),
            block_dim: (TC_THREADS, 1, 1),
            shared_mem_bytes: shared_mem_bytes as u32,
        };
        // SAFETY: the argument list matches `mmq_tc_*` in mmq_tc.cu (`mmq_f16_*` in mmq_f16.cu,
        // with x̃ as f16 and its rows' factors in `halves`, and the shared memory its stages
        // need, which `new` allowed it); each weight buffer was
        // checked to hold its m rows (with their padding), q holds x's n rows of k quantized
        // values (k whole super-blocks) and their outliers, each y n × m outputs; product p's
        // blocks cover its m rows, the slices at most one super-block each; the scratch holds
        // every block's and slice's sums and a counter per block, zero between launches.
        unsafe { launch.run(config) }.map_err(failed(OP))?;
        drop(guards);
        Ok(())
    }

    /// The GEMM path of `run`. `x16_k` is the k for which the scratch buffers hold x in f16
    /// (from an earlier product of the same `run`), which is then not converted again.
    #[allow(clippy::too_many_arguments)]
    fn gemm(
        &self,
        stream: &Arc<CudaStream>,
        kernels: &TypeKernels,
        w: &DeviceWeight,
        row_bytes: i64,
        x: &CudaSlice<f32>,
        n: usize,
        y: &mut CudaSlice<f32>,
        x16_k: &mut Option<usize>,
    ) -> Result<()> {
        const OP: &str = "matmul";
        let mut guard = self
            .gemm
            .lock()
            .map_err(|_| error(OP, "a previous product panicked"))?;
        let gemm = match &mut *guard {
            Some(gemm) => {
                if !Arc::ptr_eq(&gemm.stream, stream) {
                    // SAFETY: the scratch buffers are only used on the handle's stream, which
                    // this makes the caller's; the caller orders its streams.
                    unsafe { gemm.blas.set_stream(Arc::clone(stream)) }.map_err(failed(OP))?;
                    gemm.stream = Arc::clone(stream);
                }
                gemm
            }
            slot => slot.insert(Gemm::new(stream)?),
        };
        let input = gemm_input(w.ty);
        let (k, m) = (w.k, w.m);
        let (ki, ni, mi) = (k as i32, n as i32, m as i32);

        let f16_activations = matches!(input, GemmInput::DequantF16 | GemmInput::StoredF16);
        if f16_activations && *x16_k != Some(k) {
            let x16 = grow(stream, &mut gemm.x16, n * k)?;
            let scales = grow(stream, &mut gemm.scales, n)?;
            let mut launch = Launch::new(stream, &self.x_to_f16, self.pdl);
            launch.arg(x).arg(x16).arg(scales).arg(&ki);
            let config = LaunchConfig {
                grid_dim: (n as u32, 1, 1),
                block_dim: (X_TO_F16_THREADS, 1, 1),
                shared_mem_bytes: 0,
            };
            *x16_k = Some(k);
            // SAFETY: matches `x_to_f16`; x holds n × k values, x16 n × k, scales n.
            unsafe { launch.run(config) }.map_err(failed(OP))?;
        }

        let tile_rows = match input {
            GemmInput::StoredF16 | GemmInput::StoredF32 => m,
            GemmInput::DequantF16 | GemmInput::DequantF32 => (TILE_ELEMENTS / k).clamp(1, m),
        };
        let elem_bytes = if input == GemmInput::DequantF32 { 4 } else { 2 };
        if kernels.dequant.is_some() {
            grow(stream, &mut gemm.tile, tile_rows * k * elem_bytes)?;
        }
        let gemm = &mut *gemm;
        for row0 in (0..m).step_by(tile_rows) {
            let rows = tile_rows.min(m - row0);
            if let (Some(dequant), Some(tile)) = (&kernels.dequant, gemm.tile.as_mut()) {
                let threads = rows * k / piece(w.ty);
                let config = LaunchConfig {
                    grid_dim: (threads.div_ceil(256) as u32, 1, 1),
                    block_dim: (256, 1, 1),
                    shared_mem_bytes: 0,
                };
                let (r0, nr) = (row0 as i64, rows as i64);
                let mut launch = Launch::new(stream, dequant, self.pdl);
                launch
                    .arg(&w.bytes)
                    .arg(&row_bytes)
                    .arg(&mi)
                    .arg(tile)
                    .arg(&ki)
                    .arg(&r0)
                    .arg(&nr);
                // SAFETY: matches `dequant_*`; the tile holds rows × k elements of its type and
                // rows row0 .. row0 + rows exist.
                unsafe { launch.run(config) }.map_err(failed(OP))?;
            }
            // Column-major, cuBLAS sees W's rows as columns of a k × m matrix and y as m × n:
            // y_tile (rows × n, leading dimension m) = op(W_tile)ᵀ · x (k × n).
            let (a_type, b_type, compute) = if f16_activations {
                (
                    blas_sys::cudaDataType::CUDA_R_16F,
                    blas_sys::cudaDataType::CUDA_R_16F,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                )
            } else {
                (
                    blas_sys::cudaDataType::CUDA_R_32F,
                    blas_sys::cudaDataType::CUDA_R_32F,
                    blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
                )
            };
            // A stored weight is one tile (row0 = 0).
            let (a_ptr, _a_sync) = match &gemm.tile {
                Some(tile) if kernels.dequant.is_some() => tile.device_ptr(stream),
                _ => w.bytes.device_ptr(stream),
            };
            let (b_ptr, _b_sync) = match (&gemm.x16, f16_activations) {
                (Some(x16), true) => x16.device_ptr(stream),
                _ => x.device_ptr(stream),
            };
            let (c_ptr, _c_sync) = y.device_ptr_mut(stream);
            let (alpha, beta) = (1.0f32, 0.0f32);
            // SAFETY: A holds `rows` rows of k elements of a_type, B holds
            // n rows of k elements of b_type, C has room for n rows of m f32 from row0 on;
            // alpha and beta are f32 as the compute type requires.
            unsafe {
                blas::gemm_ex(
                    *gemm.blas.handle(),
                    blas_sys::cublasOperation_t::CUBLAS_OP_T,
                    blas_sys::cublasOperation_t::CUBLAS_OP_N,
                    rows as i32,
                    ni,
                    ki,
                    (&alpha as *const f32).cast(),
                    a_ptr as *const _,
                    a_type,
                    ki,
                    b_ptr as *const _,
                    b_type,
                    ki,
                    (&beta as *const f32).cast(),
                    (c_ptr + (row0 * 4) as u64) as *mut _,
                    blas_sys::cudaDataType::CUDA_R_32F,
                    mi,
                    compute,
                    blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                )
            }
            .map_err(failed(OP))?;
        }

        if let (true, Some(scales)) = (f16_activations, &gemm.scales) {
            let total = (n * m) as i64;
            let config = LaunchConfig {
                grid_dim: ((n * m).div_ceil(256) as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = Launch::new(stream, &self.scale_rows, self.pdl);
            launch.arg(y).arg(scales).arg(&mi).arg(&total);
            // SAFETY: matches `scale_rows`; y holds n × m values, scales n.
            unsafe { launch.run(config) }.map_err(failed(OP))?;
        }
        Ok(())
    }

    /// out[i] = dequantized row rows[i] of w (embedding lookup), f32, bit-exact with
    /// `plumb_ggml::dequantize_row`. The row indices must be below `w.m`.
    pub fn get_rows(
        &self,
        stream: &Arc<CudaStream>,
        w: &DeviceWeight,
        rows: &CudaView<'_, u32>,
        out: &mut CudaSlice<f32>,
    ) -> Result<()> {
        const OP: &str = "embed";
        let kernels = self.kernels(OP, w.ty)?;
        let row_bytes = check_weight(OP, w)?;
        if out.len() < rows.len() * w.k {
            return Err(error(
                OP,
                format!(
                    "{} rows of {} need {} outputs; the buffer holds {}",
                    rows.len(),
                    w.k,
                    rows.len() * w.k,
                    out.len()
                ),
            ));
        }
        let (k, m) = (w.k as i32, w.m as i32);
        let pieces = w.k / piece(w.ty);
        // The grid's y dimension (one output row each) stops at 65535.
        const MAX_ROWS: usize = 65535;
        for start in (0..rows.len()).step_by(MAX_ROWS) {
            let count = MAX_ROWS.min(rows.len() - start);
            let ids = rows.slice(start..start + count);
            let mut dst = out.slice_mut(start * w.k..(start + count) * w.k);
            let config = LaunchConfig {
                grid_dim: (pieces.div_ceil(256) as u32, count as u32, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = Launch::new(stream, &kernels.get_rows, self.pdl);
            launch
                .arg(&w.bytes)
                .arg(&row_bytes)
                .arg(&m)
                .arg(&ids)
                .arg(&mut dst)
                .arg(&k);
            // SAFETY: matches `get_rows_*`; dst holds count × k values, and the caller keeps
            // the ids below m.
            unsafe { launch.run(config) }.map_err(failed(OP))?;
        }
        Ok(())
    }
}

impl Gemm {
    fn new(stream: &Arc<CudaStream>) -> Result<Gemm> {
        const OP: &str = "matmul";
        // SAFETY: only tries to open the library; without this the first call would panic.
        if !unsafe { blas_sys::is_culib_present() } {
            return Err(error(
                OP,
                "products of more than 8 rows (16 or 64 with 8-bit activations) need cuBLAS, and \
                 libcublas.so cannot be loaded: \
                 install CUDA's cuBLAS and put its directory on LD_LIBRARY_PATH",
            ));
        }
        Ok(Gemm {
            blas: CudaBlas::new(Arc::clone(stream)).map_err(failed(OP))?,
            stream: Arc::clone(stream),
            tile: None,
            x16: None,
            scales: None,
        })
    }
}

/// Weight rows per warp of the matrix-vector kernel `mv_*_{n}` for weights of type `ty` (R1 and
/// R of `MV_ALL` in matmul.cu): one for a single f16 or bf16 activation row, which then has
/// twice the warps, and loads in flight, of two rows. 7B F16 tg128 on an H200, tokens/s in one
/// call: 221.5 / 221.6 with two rows a warp and 2 chunks ahead, 236.4 / 236.8 with one and 2,
/// 230.7 / 232.0 one and 4, 218.4 / 218.6 one and 8, 211.6 / 213.5 two and 4
/// (docs/benchmarks.md, 2026-11-29, sixth round). BF16 has F16's loads and was not measured.
fn matvec_rows_per_warp(ty: GgmlType, n: usize) -> usize {
    match (ty, n) {
        (GgmlType::F16 | GgmlType::BF16, 1) => 1,
        _ => MATVEC_ROWS_PER_WARP,
    }
}

/// The launch of a matrix-vector kernel (`mv_*`) over m weight rows, `rows_per_warp` a warp.
fn matvec_config(m: usize, rows_per_warp: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (m.div_ceil(MATVEC_WARPS * rows_per_warp) as u32, 1, 1),
        block_dim: (32 * MATVEC_WARPS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// The most products of one launch of the 8-bit kernels (`MAX_PRODUCTS` in matvec_q8.cu).
const MAX_PRODUCTS: usize = 3;

/// The products of one launch of the 8-bit kernels, laid out as `Products` in matvec_q8.cu:
/// product p's weight, its output (at the launch's first activation row), its rows, and its
/// first block; past the products in use, `first_block` holds the grid's block count.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct Products {
    w: [CUdeviceptr; MAX_PRODUCTS],
    y: [CUdeviceptr; MAX_PRODUCTS],
    m: [i32; MAX_PRODUCTS],
    first_block: [i32; MAX_PRODUCTS],
}

// SAFETY: plain integers with the C layout of the kernels' struct.
unsafe impl DeviceRepr for Products {}

// The kernels read the parameter with the size of their struct: 3 × 8 + 3 × 8 + 3 × 4 + 3 × 4.
const _: () = assert!(size_of::<Products>() == 72);

/// y[n × m] = x̃ · Wᵀ with the 8-bit kernels for each (W, y) of `products` (at most
/// `MAX_PRODUCTS`, all of one type and k, so one `row_bytes`), x̃ the n quantized rows in `q`:
/// n ≤ 8 rows in one matrix-vector launch; more as n / 8 groups of 8 in one batched launch, and
/// the n % 8 rows left, if any, in a matrix-vector launch of their own.
fn matvec_q8_launches(
    stream: &Arc<CudaStream>,
    kernels: &Q8Kernels,
    pdl: bool,
    products: &mut [(&DeviceWeight, &mut CudaSlice<f32>)],
    row_bytes: i64,
    q: &QuantizedRows,
    n: usize,
) -> Result<()> {
    const OP: &str = "matmul";
    debug_assert!((1..=MAX_PRODUCTS).contains(&products.len()));
    let k = products[0].0.k;
    let (groups, rest) = match n {
        ..=MATVEC_MAX_ROWS => (0, n),
        _ => (n / MATVEC_MAX_ROWS, n % MATVEC_MAX_ROWS),
    };
    let (rest_kernel, rest_rows_per_warp) = match rest {
        1 => kernels.single_row(products.iter().map(|(w, _)| w.m).sum()),
        _ => (&kernels.matvec[rest.max(1) - 1], MATVEC_ROWS_PER_WARP),
    };
    // (first row, kernel, weight rows a warp, groups) of each launch.
    let launches = [
        (0, &kernels.batched, BATCH_ROWS_PER_WARP, groups),
        (
            groups * MATVEC_MAX_ROWS,
            rest_kernel,
            rest_rows_per_warp,
            usize::from(rest > 0),
        ),
    ];
    let record = 1 + 2 * q.cap as usize;
    let (guards, bases) = product_addresses(stream, products);
    for (first, kernel, rows_per_warp, groups) in launches.into_iter().filter(|l| l.3 > 0) {
        let (ps, blocks) = launch_products(&bases, MATVEC_WARPS * rows_per_warp, first);
        let qs = q.qs.slice(first * k..);
        let ds = q.ds.slice(first * 2 * (k / 32)..);
        let outliers = q.outliers.slice(first * record..);
        let ki = k as i32;
        let mut launch = Launch::new(stream, kernel, pdl);
        launch
            .arg(&ps)
            .arg(&qs)
            .arg(&ds)
            .arg(&outliers)
            .arg(&q.cap)
            .arg(&ki)
            .arg(&row_bytes);
        let config = LaunchConfig {
            grid_dim: (blocks as u32, groups as u32, 1),
            block_dim: (32 * MATVEC_WARPS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        // SAFETY: the argument list matches `mvq_*` and `mmq_*` in matvec_q8.cu; each weight
        // buffer was checked to hold its m rows (with their padding), q holds x's n rows of k
        // quantized values and their outliers, each y n × m outputs; the launch covers rows
        // first .. first + 8 · groups (or + n % 8) ≤ n, and product p's blocks cover its m rows.
        unsafe { launch.run(config) }.map_err(failed(OP))?;
    }
    drop(guards);
    Ok(())
}

/// The device addresses of `products`' weights and outputs with their row counts, and the
/// guards that order the buffers' other streams after the launches that read them, as long as
/// those are queued.
#[allow(clippy::type_complexity)]
fn product_addresses<'a>(
    stream: &'a CudaStream,
    products: &'a mut [(&DeviceWeight, &mut CudaSlice<f32>)],
) -> (Vec<SyncOnDrop<'a>>, Vec<(CUdeviceptr, CUdeviceptr, usize)>) {
    let mut guards = Vec::with_capacity(2 * products.len());
    let mut bases = Vec::with_capacity(products.len());
    for (w, y) in products.iter_mut() {
        let (wp, w_sync) = w.bytes.device_ptr(stream);
        let (yp, y_sync) = y.device_ptr_mut(stream);
        guards.extend([w_sync, y_sync]);
        bases.push((wp, yp, w.m));
    }
    (guards, bases)
}

/// The kernels' `Products` for the products at `bases` (weight, output, rows), each taking
/// blocks of `rows_per_block` weight rows one after another along the grid's x dimension, their
/// outputs from activation row `first` on; and the grid's block count.
fn launch_products(
    bases: &[(CUdeviceptr, CUdeviceptr, usize)],
    rows_per_block: usize,
    first: usize,
) -> (Products, usize) {
    let mut ps = Products {
        w: [0; MAX_PRODUCTS],
        y: [0; MAX_PRODUCTS],
        m: [0; MAX_PRODUCTS],
        first_block: [0; MAX_PRODUCTS],
    };
    let mut blocks = 0;
    for (p, &(wp, yp, m)) in bases.iter().enumerate() {
        ps.w[p] = wp;
        ps.y[p] = yp + (first * m * size_of::<f32>()) as CUdeviceptr;
        ps.m[p] = m as i32;
        ps.first_block[p] = blocks as i32;
        blocks += m.div_ceil(rows_per_block);
    }
    ps.first_block[bases.len()..].fill(blocks as i32);
    (ps, blocks)
}

/// The bytes from one row of `w` to the next, after checking that its buffer holds all rows
/// and the padding and that its sizes fit the kernels' 32-bit arguments. A Q6_K row holds its
/// blocks without their scales, which follow the last row (`q6_k_layout`).
fn check_weight(op: &'static str, w: &DeviceWeight) -> Result<i64> {
    let (block, block_bytes) = (w.ty.block_size(), w.ty.block_bytes());
    if !w.k.is_multiple_of(block) {
        return Err(error(
            op,
            format!("rows of {} are not whole {} blocks of {block}", w.k, w.ty),
        ));
    }
    let blocks = w.k / block;
    let row_bytes = match w.ty {
        GgmlType::Q6_K => blocks * q6_k_layout::QUANT_BYTES,
        _ => blocks * block_bytes,
    };
    let needed = w.m * blocks * block_bytes + WEIGHT_PADDING;
    if w.bytes.len() < needed {
        return Err(error(
            op,
            format!(
                "a {} × {} {} weight needs {needed} bytes with its padding; the buffer holds {}",
                w.m,
                w.k,
                w.ty,
                w.bytes.len()
            ),
        ));
    }
    if w.k > i32::MAX as usize || w.m > i32::MAX as usize {
        return Err(error(
            op,
            format!("a {} × {} weight is too large", w.m, w.k),
        ));
    }
    Ok(row_bytes as i64)
}

/// The lengths to which the slices' scratch (partial sums, counters) of lengths `have` must
/// grow for a product that needs `need`, or `None` where it holds them: each the larger of the
/// two, so that no product shrinks what another of the same pass needs. A step's first pass
/// sizes the scratch for its recording (`graphs`), which fails if it is replaced; sized to the
/// last product alone, a product that needed more partial sums but fewer counters than the one
/// after it replaced it in every pass (an experiment with 3 blocks an SM at 64 rows failed
/// every 7B step of 64 sequences so: the Q and K product before the output head's).
fn grown_scratch(have: (usize, usize), need: (usize, usize)) -> Option<(usize, usize)> {
    (have.0 < need.0 || have.1 < need.1).then(|| (have.0.max(need.0), have.1.max(need.1)))
}

/// `slot`'s buffer, reallocated first if it holds fewer than `len` elements.
fn grow<'a, T: DeviceRepr>(
    stream: &Arc<CudaStream>,
    slot: &'a mut Option<CudaSlice<T>>,
    len: usize,
) -> Result<&'a mut CudaSlice<T>> {
    if slot.as_ref().is_none_or(|s| s.len() < len) {
        *slot = None;
        // SAFETY: every use writes the elements it reads first.
        *slot = Some(unsafe { stream.alloc::<T>(len) }.map_err(failed("matmul"))?);
    }
    Ok(slot.as_mut().expect("allocated above"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The GPU test `launches_of_many_rows_take_two_rows_a_warp` (tests/matmul.rs) covers both
    /// single-row grids only while its shapes lie on both sides of `WIDE_ROWS`: weights of 4095
    /// and 4097 rows, and Q, K and V of 4000, 50 and 47 rows in one launch, of Q4_0 and Q8_0.
    #[test]
    fn the_wide_kernels_test_shapes_straddle_wide_rows() {
        const { assert!(4095 < WIDE_ROWS && WIDE_ROWS <= 4097) };
        const { assert!(4000 + 50 + 47 >= WIDE_ROWS) };
        assert!([GgmlType::Q4_0, GgmlType::Q8_0]
            .into_iter()
            .all(has_wide_single_row));
    }

    /// Up to 16 rows take the int8 kernels, 17 – 64 those with f16 weights: the GPU test
    /// `f16_tensor_core_products_match_the_int8_ones` (tests/matmul.rs) compares 64 rows with
    /// launches of 16, which only tests something while they take different kernels.
    #[test]
    fn rows_take_int8_kernels_up_to_16_and_f16_ones_up_to_64() {
        use TensorCoreKernel::*;
        for n in 1..=80 {
            let want = match n {
                1..=8 => Some((Int8(0), 1)),
                9..=16 => Some((Int8(1), 2)),
                17..=32 => Some((F16(0), 4)),
                33..=64 => Some((F16(1), 8)),
                _ => None,
            };
            assert_eq!(tensor_core_kernel(n), want, "{n} rows");
        }
        assert_eq!(TENSOR_CORE_MAX_ROWS, 64);
    }

    #[test]
    fn the_slices_scratch_only_grows() {
        assert_eq!(grown_scratch((0, 0), (100, 8)), Some((100, 8)));
        assert_eq!(grown_scratch((100, 8), (100, 8)), None);
        assert_eq!(grown_scratch((100, 8), (50, 4)), None);
        // More counters, fewer sums: the sums keep their length, so that the product that
        // needed them fits again in the next pass.
        assert_eq!(grown_scratch((100, 8), (50, 16)), Some((100, 16)));
        assert_eq!(grown_scratch((100, 16), (100, 8)), None);
        assert_eq!(grown_scratch((100, 16), (200, 8)), Some((200, 16)));
    }
}
