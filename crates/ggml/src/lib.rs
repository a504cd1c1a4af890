//! ggml tensor types: block layouts, dequantization, reference quantization and dot products,
//! bit-exact with llama.cpp's ggml.
//!
//! Every type that GGUF files carry is dequantized exactly as ggml's `to_float` does it (same
//! f32 operations in the same order), so `dequantize_row` gives the very bits llama.cpp gets.
//! The reference quantizers (`quantize_row`) reproduce ggml's `quantize_row_*_ref` byte for
//! byte. `dot_row` is the plain scalar yardstick that faster kernels are checked against;
//! [`DotKernel`] holds those faster kernels (integer dot products against quantized
//! activations, per instruction set), and [`Isa`] the one detection of the instruction set that
//! every CPU kernel of plumb dispatches on.
//!
//! One module per family, each documenting its block layouts:
//! - `float`: F32, F16, BF16;
//! - `legacy`: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 (blocks of 32);
//! - `k_quants`: Q2_K .. Q6_K and Q8_K (super-blocks of 256), with `scale_search` holding the
//!   scale fits their quantizers share;
//! - `iq` (with the grids in `iq_tables`): IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS,
//!   IQ3_S, IQ4_NL, IQ4_XS;
//! - `ternary`: TQ1_0, TQ2_0;
//! - `mxfp4`: MXFP4.
//!
//! The integer types (I8, I16, I32, I64) and F64 are not dequantized: ggml has no `to_float`
//! for them, and they never hold weights. They give [`KernelError::UnsupportedType`].

mod dot;
mod error;
mod float;
mod fp;
mod iq;
mod iq_tables;
mod isa;
mod k_quants;
mod legacy;
mod mxfp4;
mod scale_search;
mod ternary;
mod vec_dot;

pub use dot::dot_row;
pub use error::KernelError;
pub use isa::Isa;
pub use plumb_gguf::{GgmlType, QK_K};
pub use vec_dot::{DotKernel, GemmKernel};

type Dequantizer = fn(&[u8], &mut [f32]);
type Quantizer = fn(&[f32], &mut [u8]);

/// The dequantizer of a type, if it has one. Each takes whole blocks: `src` and `dst` hold
/// the same number of blocks.
fn dequantizer(ty: GgmlType) -> Option<Dequantizer> {
    use GgmlType::*;
    Some(match ty {
        F32 => float::dequantize_f32,
        F16 => float::dequantize_f16,
        BF16 => float::dequantize_bf16,
        Q4_0 => legacy::dequantize_q4_0,
        Q4_1 => legacy::dequantize_q4_1,
        Q5_0 => legacy::dequantize_q5_0,
        Q5_1 => legacy::dequantize_q5_1,
        Q8_0 => legacy::dequantize_q8_0,
        Q8_1 => legacy::dequantize_q8_1,
        Q2_K => k_quants::dequantize_q2_k,
        Q3_K => k_quants::dequantize_q3_k,
        Q4_K => k_quants::dequantize_q4_k,
        Q5_K => k_quants::dequantize_q5_k,
        Q6_K => k_quants::dequantize_q6_k,
        Q8_K => k_quants::dequantize_q8_k,
        IQ2_XXS => iq::dequantize_iq2_xxs,
        IQ2_XS => iq::dequantize_iq2_xs,
        IQ2_S => iq::dequantize_iq2_s,
        IQ3_XXS => iq::dequantize_iq3_xxs,
        IQ3_S => iq::dequantize_iq3_s,
        IQ1_S => iq::dequantize_iq1_s,
        IQ1_M => iq::dequantize_iq1_m,
        IQ4_NL => iq::dequantize_iq4_nl,
        IQ4_XS => iq::dequantize_iq4_xs,
        TQ1_0 => ternary::dequantize_tq1_0,
        TQ2_0 => ternary::dequantize_tq2_0,
        MXFP4 => mxfp4::dequantize_mxfp4,
        _ => return None,
    })
}

/// The reference quantizer of a type, if it has one (ggml's `quantize_row_*_ref`).
fn quantizer(ty: GgmlType) -> Option<Quantizer> {
    use GgmlType::*;
    Some(match ty {
        F32 => float::quantize_f32,
        F16 => float::quantize_f16,
        BF16 => float::quantize_bf16,
        Q4_0 => legacy::quantize_q4_0,
        Q4_1 => legacy::quantize_q4_1,
        Q5_0 => legacy::quantize_q5_0,
        Q5_1 => legacy::quantize_q5_1,
        Q8_0 => legacy::quantize_q8_0,
        Q8_1 => legacy::quantize_q8_1,
        Q2_K => k_quants::quantize_q2_k,
        Q3_K => k_quants::quantize_q3_k,
        Q4_K => k_quants::quantize_q4_k,
        Q5_K => k_quants::quantize_q5_k,
        Q6_K => k_quants::quantize_q6_k,
        Q8_K => k_quants::quantize_q8_k,
        _ => return None,
    })
}

/// Whether `dequantize_row` and `dot_row` accept this type.
pub fn can_dequantize(ty: GgmlType) -> bool {
    dequantizer(ty).is_some()
}

/// Whether `quantize_row` accepts this type.
pub fn can_quantize(ty: GgmlType) -> bool {
    quantizer(ty).is_some()
}

/// Checks that `n_elements` values of `ty` are whole blocks stored in exactly `n_bytes`.
fn check_lengths(ty: GgmlType, n_elements: usize, n_bytes: usize) -> Result<(), KernelError> {
    let block_size = ty.block_size();
    let (n_blocks, leftover) = (n_elements / block_size, n_elements % block_size);
    if leftover != 0 {
        return Err(KernelError::PartialBlock {
            ty,
            n_elements,
            block_size,
        });
    }
    let expected = n_blocks * ty.block_bytes();
    if n_bytes != expected {
        return Err(KernelError::ByteLength {
            ty,
            n_elements,
            expected,
            actual: n_bytes,
        });
    }
    Ok(())
}

/// Dequantizes `dst.len()` values of type `ty` from `src`, which must hold exactly their
/// blocks. Bit-exact with ggml's `to_float`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), KernelError> {
    let kernel = dequantizer(ty).ok_or(KernelError::UnsupportedType {
        ty,
        operation: "dequantize",
    })?;
    check_lengths(ty, dst.len(), src.len())?;
    kernel(src, dst);
    Ok(())
}

/// Dequantizes all of `src` (whole blocks of `ty`) into a new vector.
pub fn dequantize_row_to_vec(ty: GgmlType, src: &[u8]) -> Result<Vec<f32>, KernelError> {
    let n_blocks = src.len() / ty.block_bytes();
    let mut dst = vec![0.0; n_blocks * ty.block_size()];
    dequantize_row(ty, src, &mut dst)?;
    Ok(dst)
}

/// Quantizes `src` to type `ty` into `dst`, which must be exactly the size of the result,
/// with ggml's reference quantizer (no importance matrix). Supported: F32, F16, BF16, Q4_0,
/// Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
pub fn quantize_row(ty: GgmlType, src: &[f32], dst: &mut [u8]) -> Result<(), KernelError> {
    let kernel = quantizer(ty).ok_or(KernelError::UnsupportedType {
        ty,
        operation: "reference quantize",
    })?;
    check_lengths(ty, src.len(), dst.len())?;
    kernel(src, dst);
    Ok(())
}

/// Quantizes `src` to type `ty` into a new vector.
pub fn quantize_row_to_vec(ty: GgmlType, src: &[f32]) -> Result<Vec<u8>, KernelError> {
    let block_size = ty.block_size();
    let mut dst = vec![0; src.len() / block_size * ty.block_bytes()];
    quantize_row(ty, src, &mut dst)?;
    Ok(dst)
}
