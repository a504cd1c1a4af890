//! The plain float types: F32, F16 and BF16, one little-endian value per "block".

use crate::fp::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

pub(crate) fn dequantize_f32(src: &[u8], dst: &mut [f32]) {
    for (v, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
        *v = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub(crate) fn quantize_f32(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(4)) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

pub(crate) fn dequantize_f16(src: &[u8], dst: &mut [f32]) {
    for (v, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *v = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn quantize_f16(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_f16(*v).to_le_bytes());
    }
}

pub(crate) fn dequantize_bf16(src: &[u8], dst: &mut [f32]) {
    for (v, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
        *v = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub(crate) fn quantize_bf16(src: &[f32], dst: &mut [u8]) {
    for (v, b) in src.iter().zip(dst.chunks_exact_mut(2)) {
        b.copy_from_slice(&f32_to_bf16(*v).to_le_bytes());
    }
}
