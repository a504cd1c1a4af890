//! How the SIMD kernels walk the activation rows of `dot_many`: each kernel computes a group
//! of `R` rows against one weight row, unpacking each weight block once for the group, and
//! `dot` is the one-row group. A row's operations do not depend on `R`, so `dot_many` agrees
//! with `dot` bit for bit.

/// A kernel that computes the dot products of one weight row with `R` activation rows. It and
/// everything it calls are `#[inline(always)]`, so they compile into the `#[target_feature]`
/// entry point that calls it.
pub(super) trait RowKernel {
    /// Bytes of a weight block and of an activation block (of one element for float types).
    const W_BYTES: usize;
    const A_BYTES: usize;
    /// Reads whole blocks only, as many as the shortest of `w` and `acts` holds.
    ///
    /// # Safety
    /// The CPU must have the instruction set the kernel is written for.
    unsafe fn rows<const R: usize>(w: &[u8], acts: [&[u8]; R]) -> [f32; R];
}

/// `out[r] = w · act_r`, rows taken `G` at a time, the rest 4, 2 and 1 at a time.
///
/// # Safety
/// As [`RowKernel::rows`].
#[inline(always)]
pub(super) unsafe fn dot_many<K: RowKernel, const G: usize>(
    w: &[u8],
    acts: &[u8],
    out: &mut [f32],
) {
    let row_bytes = w.len() / K::W_BYTES * K::A_BYTES;
    debug_assert_eq!(acts.len(), row_bytes * out.len());
    let r = rows_by::<K, G>(w, acts, row_bytes, out, 0);
    let r = rows_by::<K, 4>(w, acts, row_bytes, out, r);
    let r = rows_by::<K, 2>(w, acts, row_bytes, out, r);
    rows_by::<K, 1>(w, acts, row_bytes, out, r);
}

/// Fills `out[start..]` `R` rows at a time while whole groups remain; returns the next row.
#[inline(always)]
unsafe fn rows_by<K: RowKernel, const R: usize>(
    w: &[u8],
    acts: &[u8],
    row_bytes: usize,
    out: &mut [f32],
    start: usize,
) -> usize {
    let mut r = start;
    while r + R <= out.len() {
        let rows = std::array::from_fn(|i| &acts[(r + i) * row_bytes..(r + i + 1) * row_bytes]);
        out[r..r + R].copy_from_slice(&K::rows::<R>(w, rows));
        r += R;
    }
    r
}

/// The number of whole blocks in `w` and in every activation row, whichever is fewest: the
/// kernels read no further, whatever lengths they are given.
#[inline(always)]
pub(super) fn block_count<const R: usize>(
    w: &[u8],
    w_bytes: usize,
    acts: &[&[u8]; R],
    a_bytes: usize,
) -> usize {
    let n = w.len() / w_bytes;
    debug_assert!(acts.iter().all(|a| a.len() == n * a_bytes));
    acts.iter().fold(n, |n, a| n.min(a.len() / a_bytes))
}
