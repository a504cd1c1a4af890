//! The weight formats of this family as the kernels see them: where each field of a block
//! lies, and which integers a block holds. The scalar unpackers here are the definition that
//! every instruction set's kernel is tested against; the byte layouts are ggml's (see
//! `legacy.rs` and `iq.rs` for the full tables).

use crate::fp::read_f16;
use crate::iq_tables::KVALUES_IQ4NL;

/// Elements per block.
pub(super) const QK: usize = 32;

/// Q8_0 activation blocks: d (f16), qs[32] (i8).
pub(super) const Q8_0_BYTES: usize = 34;
/// Q8_1 activation blocks: d (f16), s = d·Σq (f16), qs[32] (i8).
pub(super) const Q8_1_BYTES: usize = 36;

/// A weight format whose blocks dot with Q8_0 activations: each block is a scale `d` and 32
/// signed integers `q`, standing for the values d·q.
pub(super) trait SignedBlocks {
    const BYTES: usize;
    fn unpack(block: &[u8]) -> (f32, [i8; QK]);
}

/// A weight format whose blocks dot with Q8_1 activations: a scale `d`, an offset `m` and 32
/// unsigned integers `q`, standing for the values d·q + m. The offset's share of a block's dot
/// product is m·Σy, which the activation block carries precomputed as `s`.
pub(super) trait OffsetBlocks {
    const BYTES: usize;
    fn unpack(block: &[u8]) -> (f32, f32, [u8; QK]);
}

pub(super) struct Q4_0;
pub(super) struct Q5_0;
pub(super) struct Q8_0;
pub(super) struct Iq4Nl;
pub(super) struct Q4_1;
pub(super) struct Q5_1;

/// Byte j of a 16-byte nibble array holds element j (low nibble) and element j + 16 (high).
fn nibbles(qs: &[u8]) -> [u8; QK] {
    let mut q = [0; QK];
    for (j, &b) in qs[..QK / 2].iter().enumerate() {
        q[j] = b & 0x0F;
        q[j + QK / 2] = b >> 4;
    }
    q
}

/// Bit j of the little-endian `qh` is the fifth bit of element j.
fn with_fifth_bits(mut q: [u8; QK], qh: &[u8]) -> [u8; QK] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    for (j, v) in q.iter_mut().enumerate() {
        *v |= (((qh >> j) & 1) as u8) << 4;
    }
    q
}

impl SignedBlocks for Q4_0 {
    /// d, qs[16]
    const BYTES: usize = 18;
    fn unpack(block: &[u8]) -> (f32, [i8; QK]) {
        let q = nibbles(&block[2..18]);
        (read_f16(block, 0), q.map(|v| v as i8 - 8))
    }
}

impl SignedBlocks for Q5_0 {
    /// d, qh[4], qs[16]
    const BYTES: usize = 22;
    fn unpack(block: &[u8]) -> (f32, [i8; QK]) {
        let q = with_fifth_bits(nibbles(&block[6..22]), &block[2..6]);
        (read_f16(block, 0), q.map(|v| v as i8 - 16))
    }
}

impl SignedBlocks for Q8_0 {
    /// d, qs[32]
    const BYTES: usize = 34;
    fn unpack(block: &[u8]) -> (f32, [i8; QK]) {
        let mut q = [0; QK];
        for (v, &b) in q.iter_mut().zip(&block[2..34]) {
            *v = b as i8;
        }
        (read_f16(block, 0), q)
    }
}

impl SignedBlocks for Iq4Nl {
    /// d, qs[16] (indices into the 16 non-linear levels)
    const BYTES: usize = 18;
    fn unpack(block: &[u8]) -> (f32, [i8; QK]) {
        let q = nibbles(&block[2..18]);
        (read_f16(block, 0), q.map(|i| KVALUES_IQ4NL[usize::from(i)]))
    }
}

impl OffsetBlocks for Q4_1 {
    /// d, m, qs[16]
    const BYTES: usize = 20;
    fn unpack(block: &[u8]) -> (f32, f32, [u8; QK]) {
        (
            read_f16(block, 0),
            read_f16(block, 2),
            nibbles(&block[4..20]),
        )
    }
}

impl OffsetBlocks for Q5_1 {
    /// d, m, qh[4], qs[16]
    const BYTES: usize = 24;
    fn unpack(block: &[u8]) -> (f32, f32, [u8; QK]) {
        let q = with_fifth_bits(nibbles(&block[8..24]), &block[4..8]);
        (read_f16(block, 0), read_f16(block, 2), q)
    }
}
