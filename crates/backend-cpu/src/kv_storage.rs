//! The KV cache's storage: per layer, one K row and one V row (all KV heads of a position) per
//! slot, in the cache type the user chose. Which slot holds which position is the block
//! tables' business (`plumb_model::BlockTables`).

use half::f16;
use half::slice::HalfFloatSliceExt;
use plumb_ggml::GgmlType;
use plumb_model::{BlockCopy, KvLayout, LayerKv};

use crate::kv_rotation::KvRotation;

/// How keys and values are stored (`--cache-type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvCacheType {
    F32,
    /// The default, as in llama.cpp: half the memory of f32, error far below the weights'.
    F16,
    /// 8-bit blocks of 32 with an f16 scale; heads must be whole blocks.
    Q8_0,
}

impl KvCacheType {
    pub fn name(self) -> &'static str {
        match self {
            KvCacheType::F32 => "f32",
            KvCacheType::F16 => "f16",
            KvCacheType::Q8_0 => "q8_0",
        }
    }

    pub(crate) fn ggml_type(self) -> GgmlType {
        match self {
            KvCacheType::F32 => GgmlType::F32,
            KvCacheType::F16 => GgmlType::F16,
            KvCacheType::Q8_0 => GgmlType::Q8_0,
        }
    }

    /// Bytes of `n` values (a multiple of the type's block size).
    pub fn bytes(self, n: usize) -> usize {
        let ty = self.ggml_type();
        n / ty.block_size() * ty.block_bytes()
    }
}

pub struct CpuKvStorage {
    pub(crate) cache_type: KvCacheType,
    pub(crate) layers: Vec<LayerStore>,
    /// How keys, queries, values and outputs are rotated around this cache.
    pub(crate) rotation: KvRotation,
}

pub(crate) struct LayerStore {
    pub shape: LayerKv,
    /// Bytes, held in `u32`s so that f16 and f32 rows are aligned for their type.
    k: Vec<u32>,
    v: Vec<u32>,
    k_row_bytes: usize,
    v_row_bytes: usize,
}

impl std::str::FromStr for KvCacheType {
    type Err = String;

    /// llama.cpp's names for `--cache-type-k`/`-v`: `f32`, `f16`, `q8_0`.
    fn from_str(name: &str) -> Result<Self, String> {
        Ok(match name {
            "f32" => KvCacheType::F32,
            "f16" => KvCacheType::F16,
            "q8_0" => KvCacheType::Q8_0,
            _ => return Err(format!("unknown cache type {name:?}; use f32, f16 or q8_0")),
        })
    }
}

impl CpuKvStorage {
    pub fn new(layout: &KvLayout, cache_type: KvCacheType) -> CpuKvStorage {
        let layers = layout
            .layers
            .iter()
            .map(|shape| {
                let slots = shape.n_slots;
                let k_row_bytes = cache_type.bytes(shape.k_width());
                let v_row_bytes = cache_type.bytes(shape.v_width());
                LayerStore {
                    shape: *shape,
                    k: touched_zeros((slots * k_row_bytes).div_ceil(4)),
                    v: touched_zeros((slots * v_row_bytes).div_ceil(4)),
                    k_row_bytes,
                    v_row_bytes,
                }
            })
            .collect();
        CpuKvStorage {
            cache_type,
            layers,
            rotation: KvRotation::for_cache(cache_type, &layout.layers),
        }
    }

    /// Every layer's shape, in order: what the checks take.
    pub fn layer_shapes(&self) -> Vec<&LayerKv> {
        self.layers.iter().map(|l| &l.shape).collect()
    }

    /// Makes checked block copies, in order.
    pub fn copy_blocks(&mut self, copies: &[BlockCopy]) {
        for c in copies {
            for layer in self.layers.iter_mut().filter(|l| l.shape.group == c.group) {
                for (data, row) in [
                    (&mut layer.k, layer.k_row_bytes),
                    (&mut layer.v, layer.v_row_bytes),
                ] {
                    let bytes: &mut [u8] = bytemuck::cast_slice_mut(data);
                    bytes.copy_within(c.src * row..(c.src + c.len) * row, c.dst * row);
                }
            }
        }
    }
}

impl LayerStore {
    pub fn k_row(&self, slot: usize) -> &[u8] {
        &bytemuck::cast_slice(&self.k)[slot * self.k_row_bytes..(slot + 1) * self.k_row_bytes]
    }

    pub fn v_row(&self, slot: usize) -> &[u8] {
        &bytemuck::cast_slice(&self.v)[slot * self.v_row_bytes..(slot + 1) * self.v_row_bytes]
    }

    pub fn store(&mut self, cache_type: KvCacheType, i: usize, k: &[f32], v: &[f32]) {
        let (kb, vb) = (self.k_row_bytes, self.v_row_bytes);
        let k_bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.k);
        encode(cache_type, k, &mut k_bytes[i * kb..(i + 1) * kb]);
        let v_bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.v);
        encode(cache_type, v, &mut v_bytes[i * vb..(i + 1) * vb]);
    }
}

/// `n` zeros written one by one rather than taken as fresh zero pages (`vec![0; n]`), so that
/// the pool is resident from the start and a server's memory stays flat under load instead
/// of growing as the allocator reaches blocks it has not used yet (smollm2-135m, 32 streams:
/// 645, 822 and 914 MiB after three runs of load with untouched pages; 937 MiB after each
/// with this). Clippy's suggestion, `vec![0; n]`, is exactly the lazy allocation avoided here.
#[allow(clippy::slow_vector_initialization)]
fn touched_zeros(n: usize) -> Vec<u32> {
    let mut v = Vec::with_capacity(n);
    v.resize(n, 0);
    v
}

fn encode(cache_type: KvCacheType, values: &[f32], out: &mut [u8]) {
    match cache_type {
        KvCacheType::F32 => bytemuck::cast_slice_mut::<u8, f32>(out).copy_from_slice(values),
        KvCacheType::F16 => {
            bytemuck::cast_slice_mut::<u8, f16>(out).convert_from_f32_slice(values);
        }
        KvCacheType::Q8_0 => plumb_ggml::quantize_row(GgmlType::Q8_0, values, out)
            .expect("a q8_0 cache is only made for whole blocks"),
    }
}

/// Decodes `out.len()` values starting at element `start` of a stored row.
pub(crate) fn decode(cache_type: KvCacheType, row: &[u8], start: usize, out: &mut [f32]) {
    match cache_type {
        KvCacheType::F32 => {
            let values: &[f32] = bytemuck::cast_slice(row);
            out.copy_from_slice(&values[start..start + out.len()]);
        }
        KvCacheType::F16 => {
            let values: &[f16] = bytemuck::cast_slice(row);
            values[start..start + out.len()].convert_to_f32_slice(out);
        }
        KvCacheType::Q8_0 => {
            let ty = GgmlType::Q8_0;
            let first = start / ty.block_size() * ty.block_bytes();
            let len = out.len() / ty.block_size() * ty.block_bytes();
            plumb_ggml::dequantize_row(ty, &row[first..first + len], out)
                .expect("heads of a q8_0 cache are whole blocks");
        }
    }
}
