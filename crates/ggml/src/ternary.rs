//! The ternary types for BitNet b1.58 and TriLM models: 256 values in {−1, 0, 1}, times an f16
//! scale `d`. Layouts as ggml's `block_tq1_0` and `block_tq2_0`:
//!
//! | type  | bytes | layout                          |
//! |-------|-------|---------------------------------|
//! | TQ1_0 | 54    | qs[48] (5 trits/byte), qh[4] (4 trits/byte), d |
//! | TQ2_0 | 66    | qs[64] (2 bits each), d         |

use crate::fp::read_f16;
use plumb_gguf::QK_K;

const TQ1_0_BYTES: usize = 54;
const TQ2_0_BYTES: usize = 66;

/// A TQ1_0 byte holds five trits as a base-3 fraction of 256 (rounded up), most significant
/// first: trit n is the top "digit" of byte·3^n (mod 256), read by multiplying by 3 and taking
/// the overflow.
fn trit(byte: u8, n: usize) -> i32 {
    const POW3: [u8; 5] = [1, 3, 9, 27, 81];
    let q = byte.wrapping_mul(POW3[n]);
    i32::from((u16::from(q) * 3) >> 8)
}

/// Elements: bytes 0–31 of qs give elements 32n + m (trit n of byte m), bytes 32–47 give
/// 160 + 16n + m, and the 4 qh bytes give 240 + 4n + j (trit n of byte j).
pub(crate) fn dequantize_tq1_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(TQ1_0_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 52);
        let mut out = y.iter_mut();
        for bytes in [&b[0..32], &b[32..48]] {
            for n in 0..5 {
                for &byte in bytes {
                    *out.next().expect("256 outputs") = (trit(byte, n) - 1) as f32 * d;
                }
            }
        }
        for n in 0..4 {
            for &byte in &b[48..52] {
                *out.next().expect("256 outputs") = (trit(byte, n) - 1) as f32 * d;
            }
        }
    }
}

/// Element `128h + 32l + m` is bits 2l..2l+1 of `qs[32h + m]`, stored as value + 1.
pub(crate) fn dequantize_tq2_0(src: &[u8], dst: &mut [f32]) {
    for (b, y) in src
        .chunks_exact(TQ2_0_BYTES)
        .zip(dst.chunks_exact_mut(QK_K))
    {
        let d = read_f16(b, 64);
        let mut out = y.iter_mut();
        for qs in b[..64].chunks_exact(32) {
            for l in 0..4 {
                for &byte in qs {
                    let q = i32::from((byte >> (2 * l)) & 3);
                    *out.next().expect("256 outputs") = (q - 1) as f32 * d;
                }
            }
        }
    }
}
