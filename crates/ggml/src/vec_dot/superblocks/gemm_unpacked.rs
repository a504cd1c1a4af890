//! A super-block as the GEMMs pack it (AVX2 and NEON): the scalar unpacking's levels, with
//! every type's sub-block scales and mins widened to 16 entries so that one panel format
//! serves Q2_K's 16 sub-blocks and the 8 of the others.

use super::scalar::Levels;
use crate::QK_K;

/// A super-block as integers, for any number of sub-blocks up to 16.
pub(super) struct Unpacked {
    pub(super) q: [i8; QK_K],
    pub(super) scales: [i32; 16],
    pub(super) mins: [i32; 16],
    pub(super) d: f32,
    pub(super) dmin: f32,
}

pub(super) fn unpacked<const N: usize>(l: Levels<N>) -> Unpacked {
    let mut u = Unpacked {
        q: l.q,
        scales: [0; 16],
        mins: [0; 16],
        d: l.d,
        dmin: l.dmin,
    };
    u.scales[..N].copy_from_slice(&l.scales);
    u.mins[..N].copy_from_slice(&l.mins);
    u
}
