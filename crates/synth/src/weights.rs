//! Deterministic random weights. Every row has its own generator, seeded from the seed, the
//! tensor's name and the row's index, so rows can be made in any order on any number of
//! threads, and layer N of a file cut to fewer layers equals layer N of the whole model.
//!
//! Matrix values are near-normal with standard deviation 0.02 (the usual initialization of
//! llama-style models), which keeps every matmul's output of order one at these widths; norm
//! weights are 1.

use plumb_gguf::GgmlType;

use crate::{Role, SynthError};

const MATRIX_STD: f32 = 0.02;

/// Fills `bytes` with rows `first_row..` of a tensor (as many whole rows as it holds), each
/// `row_len` values made for `role` and quantized to `ggml_type`.
pub(crate) fn make_rows(
    seed: u64,
    tensor_name: &str,
    role: Role,
    ggml_type: GgmlType,
    row_len: usize,
    first_row: usize,
    bytes: &mut [u8],
) -> Result<(), SynthError> {
    let name_hash = fnv1a(tensor_name.as_bytes());
    let bytes_per_row = ggml_type.block_bytes() * row_len / ggml_type.block_size();
    let mut values = vec![0.0f32; row_len];
    for (i, out) in bytes.chunks_exact_mut(bytes_per_row).enumerate() {
        fill_row(seed, name_hash, (first_row + i) as u64, role, &mut values);
        plumb_ggml::quantize_row(ggml_type, &values, out)?;
    }
    Ok(())
}

fn fill_row(seed: u64, name_hash: u64, row: u64, role: Role, values: &mut [f32]) {
    if role == Role::Norm {
        values.fill(1.0);
        return;
    }
    normal_row(seed, name_hash, row, MATRIX_STD, values);
}

/// Fills row `row` of the tensor whose name hashes to `name_hash` with near-normal values of
/// mean 0 and standard deviation `std`, from a generator of its own.
pub(crate) fn normal_row(seed: u64, name_hash: u64, row: u64, std: f32, values: &mut [f32]) {
    let mut state = seed;
    state = splitmix64(&mut state) ^ name_hash;
    state = splitmix64(&mut state) ^ row;
    state = splitmix64(&mut state);
    // Irwin–Hall: the sum of four uniforms, one from each 16-bit quarter of a draw, is close
    // to normal with variance 4/12, at the cost of one draw per value.
    let scale = std / (4.0f32 / 12.0).sqrt();
    for v in values {
        let r = splitmix64(&mut state);
        let sum: u32 = (0..4).map(|k| ((r >> (16 * k)) & 0xFFFF) as u32).sum();
        *v = (sum as f32 / 65536.0 - 2.0) * scale;
    }
}

/// SplitMix64: fast, and every seed gives a good stream.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// 64-bit FNV-1a, to turn a tensor's name into part of its seed.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}
