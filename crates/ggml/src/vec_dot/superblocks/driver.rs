//! The loops over super-blocks and activation rows that every instruction set's kernels
//! share. A kernel only says how to unpack one weight super-block and how to add one
//! activation block's products to a row's running sum; `dot` and `dot_many` here do the rest.
//!
//! `dot_many` unpacks each weight super-block once for [`ROWS`] activation rows at a time
//! (then [`ROWS`]/2 for what is left, then one by one), keeping the rows' running sums in
//! registers: the unpacking (nibble splitting, scale decoding) is shared, which is what makes
//! prompt processing cheaper than a matrix-vector product per token. Every path does the same
//! operations per row in the same order, so `dot_many` equals `dot` bit for bit.

use super::q8_k::Q8_K_BYTES;

/// How far ahead of the super-block being read `dot` asks for weight bytes. A decoding thread
/// walks its consecutive share of a matrix's rows, and the rows after this one are next:
/// with it, qwen2.5-coder-1.5b decoded at 40 tokens/s against 34 (AVX2, 2 threads).
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;

/// Activation rows handled together by `dot_many`: enough to share the unpacking, few enough
/// that the rows' sums stay in registers (8 measured faster than 4 on AVX2 and AVX-512).
pub(super) const ROWS: usize = 8;

/// One weight type's kernel on one instruction set.
///
/// Implementations must not call intrinsics from closures: a closure is a function of its
/// own, without the caller's `#[target_feature]`s, so LLVM would not inline them into it.
///
/// # Safety
///
/// The methods may use instructions of the kernel's instruction set: callers must have
/// checked that the CPU has it, and must pass exactly one block to `unpack` and
/// `accumulate`. All functions here are `#[inline(always)]` so that they compile into the
/// caller's `#[target_feature]` function.
pub(super) trait BlockKernel {
    /// Bytes of one weight super-block.
    const BLOCK_BYTES: usize;
    /// One weight super-block, unpacked.
    type Unpacked;
    /// One activation row's running sum.
    type Acc: Copy;

    unsafe fn zero() -> Self::Acc;
    /// Unpacks `w`, exactly one super-block.
    unsafe fn unpack(w: &[u8]) -> Self::Unpacked;
    /// Adds `w · act` to `acc`; `act` is exactly one Q8_K block.
    unsafe fn accumulate(w: &Self::Unpacked, act: &[u8], acc: &mut Self::Acc);
    unsafe fn finish(acc: Self::Acc) -> f32;
}

/// `w · act` over whole rows. Lengths are taken from `w`; a short `act` gives a panic.
///
/// # Safety
///
/// As [`BlockKernel`]: the CPU must have `K`'s instruction set.
#[inline(always)]
pub(super) unsafe fn dot<K: BlockKernel>(w: &[u8], act: &[u8]) -> f32 {
    let [sum] = dot_rows::<K, 1>(w, [act]);
    sum
}

/// `out[c] = w · act_c` for the activation rows stored back to back in `acts`.
///
/// # Safety
///
/// As [`BlockKernel`]: the CPU must have `K`'s instruction set.
#[inline(always)]
pub(super) unsafe fn dot_many<K: BlockKernel>(w: &[u8], acts: &[u8], out: &mut [f32]) {
    let row_bytes = w.len() / K::BLOCK_BYTES * Q8_K_BYTES;
    if row_bytes == 0 {
        out.fill(0.0);
        return;
    }
    let mut rows = acts.chunks_exact(row_bytes);
    let mut outs = out.chunks_exact_mut(ROWS);
    for group in &mut outs {
        let acts: [&[u8]; ROWS] = std::array::from_fn(|_| rows.next().expect("activation row"));
        group.copy_from_slice(&dot_rows::<K, ROWS>(w, acts));
    }
    let mut outs = outs.into_remainder().chunks_exact_mut(ROWS / 2);
    for group in &mut outs {
        let acts: [&[u8]; ROWS / 2] = std::array::from_fn(|_| rows.next().expect("activation row"));
        group.copy_from_slice(&dot_rows::<K, { ROWS / 2 }>(w, acts));
    }
    for o in outs.into_remainder() {
        *o = dot::<K>(w, rows.next().expect("activation row"));
    }
}

/// `w · acts[r]` for `R` rows at once, unpacking each weight super-block once.
#[inline(always)]
unsafe fn dot_rows<K: BlockKernel, const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R] {
    let mut accs = [K::zero(); R];
    for (i, block) in w.chunks_exact(K::BLOCK_BYTES).enumerate() {
        // One activation row (decoding) streams the weights from memory once.
        #[cfg(target_arch = "x86_64")]
        if R == 1 {
            prefetch::<K>(block.as_ptr());
        }
        let unpacked = K::unpack(block);
        let at = i * Q8_K_BYTES..(i + 1) * Q8_K_BYTES;
        for (acc, act) in accs.iter_mut().zip(&acts) {
            K::accumulate(&unpacked, &act[at.clone()], acc);
        }
    }
    let mut sums = [0.0; R];
    for (sum, acc) in sums.iter_mut().zip(accs) {
        *sum = K::finish(acc);
    }
    sums
}

/// Asks for the bytes [`PREFETCH_AHEAD`] past the super-block at `block`, one cache line at a
/// time. A prefetch never faults, even past the end of the weights.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch<K: BlockKernel>(block: *const u8) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for line in (0..K::BLOCK_BYTES).step_by(64) {
        _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(PREFETCH_AHEAD + line).cast());
    }
}
