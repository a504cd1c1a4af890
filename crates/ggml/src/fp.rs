//! Scalar conversions between f32 and the small float formats, written as ggml writes them
//! (`ggml-impl.h`), so that rounding and NaN handling match bit for bit.

use half::f16;

/// IEEE half to f32. Every half is exactly representable, so any correct conversion is
/// bit-exact with ggml's.
pub(crate) fn f16_to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}

/// f32 to IEEE half, rounding to nearest even, as ggml's `ggml_compute_fp32_to_fp16`.
///
/// Finite values and infinities round exactly as `half` would; ggml differs in NaNs, which all
/// become the quiet NaN `0x7E00` (with the input's sign), so that is what this does too.
pub(crate) fn f32_to_f16(value: f32) -> u16 {
    let w = value.to_bits();
    let sign = ((w & 0x8000_0000) >> 16) as u16;
    if (w << 1) > 0xFF00_0000 {
        return sign | 0x7E00;
    }
    sign | f16::from_f32(value.abs()).to_bits()
}

/// bfloat16 to f32: the high half of an f32.
pub(crate) fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// f32 to bfloat16 as ggml's `ggml_compute_fp32_to_bf16`: round to nearest even, NaNs made
/// quiet, subnormals kept.
pub(crate) fn f32_to_bf16(value: f32) -> u16 {
    let u = value.to_bits();
    if (u & 0x7fff_ffff) > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    (u.wrapping_add(0x7fff + ((u >> 16) & 1)) >> 16) as u16
}

/// Half the value of an E8M0 scale, 2^(e-128), as ggml's `ggml_e8m0_to_fp32_half` (MXFP4
/// stores its values doubled, so this is the scale they are multiplied by).
pub(crate) fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 {
        0x0020_0000u32 << e
    } else {
        u32::from(e - 1) << 23
    };
    f32::from_bits(bits)
}

/// Little-endian half at `offset`, as f32.
pub(crate) fn read_f16(bytes: &[u8], offset: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[offset], bytes[offset + 1]]))
}

/// Writes `value` as a little-endian half at `offset`.
pub(crate) fn write_f16(bytes: &mut [u8], offset: usize, value: f32) {
    bytes[offset..offset + 2].copy_from_slice(&f32_to_f16(value).to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_rounding_matches_ggml_on_edges() {
        assert_eq!(f32_to_f16(1.0), 0x3C00);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        assert_eq!(f32_to_f16(65504.0), 0x7BFF);
        assert_eq!(f32_to_f16(65520.0), 0x7C00);
        assert_eq!(f32_to_f16(f32::INFINITY), 0x7C00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xFC00);
        assert_eq!(f32_to_f16(f32::NAN), 0x7E00);
        assert_eq!(f32_to_f16(-f32::NAN), 0xFE00);
        // Halfway between 1 and the next half rounds to even (down); just above rounds up.
        assert_eq!(f32_to_f16(1.0 + 2f32.powi(-11)), 0x3C00);
        assert_eq!(f32_to_f16(1.0 + 3.0 * 2f32.powi(-11)), 0x3C02);
        // Smallest subnormal half and a value that rounds to it.
        assert_eq!(f32_to_f16(2f32.powi(-24)), 0x0001);
        assert_eq!(f32_to_f16(0.6 * 2f32.powi(-24)), 0x0001);
        assert_eq!(f32_to_f16(0.4 * 2f32.powi(-24)), 0x0000);
    }

    #[test]
    fn bf16_rounds_to_even_and_quiets_nans() {
        assert_eq!(f32_to_bf16(1.0), 0x3F80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8000)), 0x3F80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F81_8000)), 0x3F82);
        assert_eq!(f32_to_bf16(f32::from_bits(0x7F80_0001)), 0x7FC0);
        assert_eq!(bf16_to_f32(0x3F80), 1.0);
    }

    #[test]
    fn e8m0_half_covers_subnormal_scales() {
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
    }
}
