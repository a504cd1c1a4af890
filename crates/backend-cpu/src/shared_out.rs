//! An output buffer that the pool's threads fill in disjoint parts.

use std::marker::PhantomData;

/// A mutable slice shared by the threads of one job. Every element must be written by at most
/// one thread, and read by none, while the job runs: the callers' splits guarantee it.
pub struct SharedOut<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: threads only touch disjoint elements (see the type's contract).
unsafe impl<T: Send> Sync for SharedOut<'_, T> {}

impl<'a, T> SharedOut<'a, T> {
    pub fn new(data: &'a mut [T]) -> Self {
        SharedOut {
            ptr: data.as_mut_ptr(),
            len: data.len(),
            _borrow: PhantomData,
        }
    }

    /// # Safety
    /// No other thread may access `start..start + len` during the job.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len, "shared output range out of bounds");
        // SAFETY: in bounds (checked), and exclusive by the caller's contract.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}
