//! MXFP4 (OCP microscaling FP4): blocks of 32 E2M1 values sharing one E8M0 power-of-two scale.
//! Layout as ggml's `block_mxfp4`: e (1 byte), qs[16] (byte j: element j in the low nibble,
//! element j + 16 in the high nibble). 17 bytes.

use crate::fp::e8m0_to_f32_half;

const BLOCK_BYTES: usize = 17;
const QK: usize = 32;

/// E2M1 values doubled, so they are integers (ggml's `kvalues_mxfp4`); the scale is halved
/// to match.
const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

pub(crate) fn dequantize_mxfp4(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src.chunks_exact(BLOCK_BYTES).zip(dst.chunks_exact_mut(QK)) {
        let d = e8m0_to_f32_half(b[0]);
        for (j, &q) in b[1..].iter().enumerate() {
            y[j] = f32::from(KVALUES[usize::from(q & 0x0F)]) * d;
            y[j + QK / 2] = f32::from(KVALUES[usize::from(q >> 4)]) * d;
        }
    }
}
