//! Device buffers for the activations of decode steps, reused in stream order instead of
//! allocated and freed op by op.
//!
//! A decode step recorded as a CUDA graph (`graphs`) records every stream-ordered allocation
//! and free as a node of its own, and stream capture makes an edge programmatic (`launch`)
//! only between two kernels: with the activations allocated op by op, 356 of a 7B step's 501
//! kernels followed an allocation or a free and had to wait for the whole kernel before them.
//! Buffers taken from this pool were allocated before the recording, so a recorded step is
//! kernels after kernels.
//!
//! Reuse in stream order is safe: every op runs on the backend's one stream, so a buffer
//! handed out again is written only by kernels queued after every kernel that used it, and a
//! kernel launched with programmatic dependent launch waits for those before it writes
//! (`kernels/pdl.cuh`).
//!
//! A recording's kernels write the buffers it took at the same addresses on every replay, so
//! those belong to the recordings from then on: no pass that is not recorded takes them
//! again. The recordings share them, since graphs run one after the other on the stream and a
//! pass's activations are dropped when it ends; only the logits outlive a pass, so each
//! recording keeps the buffer of its logits to itself ([`Parked`]), and no graph is launched
//! while a caller still holds logits that a graph wrote ([`Pool::holds_logits`]).
//!
//! Only the passes that may be recorded (decode steps, see `graphs`) take buffers from the
//! pool; a prompt's larger activations are allocated and freed as before, so that the pool
//! keeps only buffers of the sizes decode steps ask for again and again.

use std::collections::HashMap;
use std::mem::ManuallyDrop;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUdeviceptr;
use cudarc::driver::{CudaSlice, CudaStream, DeviceRepr};
use plumb_model::Result;

use crate::error::{error, failed};

/// Where the pool's buffers go.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub(crate) enum Mode {
    /// Allocated and freed on the stream, op by op (a prompt's pass, ops outside a pass).
    #[default]
    Off,
    /// Taken from the pool's buffers that no recording has taken (a decode step run op by op).
    Shared,
    /// Taken for a recording, from the recordings' buffers first.
    Recording,
}

/// The activation buffers of one backend's stream.
pub(crate) struct Pool {
    stream: Arc<CudaStream>,
    state: Mutex<State>,
    /// Logits written by a graph that a caller still holds (see [`Pool::holds_logits`]).
    held_logits: AtomicUsize,
}

#[derive(Default)]
struct State {
    mode: Mode,
    /// Free buffers by size class, that no recording has taken.
    free: HashMap<usize, Vec<CUdeviceptr>>,
    /// Free buffers by size class that recordings have taken.
    recorded: HashMap<usize, Vec<CUdeviceptr>>,
}

/// The bytes a buffer of `bytes` is allocated with: a multiple of an eighth of the power of
/// two at or above it (at least 256 bytes), so that a size asked for again finds its buffer
/// and a few sizes share one.
fn size_class(bytes: usize) -> usize {
    let step = (bytes.max(1).next_power_of_two() / 8).max(256);
    bytes.max(1).div_ceil(step) * step
}

impl Pool {
    pub fn new(stream: &Arc<CudaStream>) -> Arc<Pool> {
        Arc::new(Pool {
            stream: Arc::clone(stream),
            state: Mutex::new(State::default()),
            held_logits: AtomicUsize::new(0),
        })
    }

    pub fn stream(&self) -> &Arc<CudaStream> {
        &self.stream
    }

    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| error("pool", "a previous op panicked"))
    }

    /// Sets where the next buffers come from (see [`Mode`]).
    pub fn set_mode(&self, mode: Mode) -> Result<()> {
        self.state()?.mode = mode;
        Ok(())
    }

    /// Whether a caller holds logits that a graph wrote: then no graph may be launched, since
    /// its kernels could write the buffer of those logits (see the module's doc).
    pub fn holds_logits(&self) -> bool {
        self.held_logits.load(Ordering::Acquire) > 0
    }

    /// An uninitialized buffer of `len` values of T, for op `op`.
    ///
    /// # Safety
    /// The kernel that fills it must write every element that is read.
    pub unsafe fn take<T: DeviceRepr>(
        self: &Arc<Pool>,
        op: &'static str,
        len: usize,
    ) -> Result<Buffer<T>> {
        let len = len.max(1);
        let class = size_class(len * std::mem::size_of::<T>());
        // One lock: the mode, and where it takes from the pool, its free buffer of the class.
        let (mode, found) = {
            let mut state = self.state()?;
            let state = &mut *state;
            let pop =
                |map: &mut HashMap<usize, Vec<CUdeviceptr>>| map.get_mut(&class).and_then(Vec::pop);
            let found = match state.mode {
                Mode::Off => None,
                Mode::Shared => pop(&mut state.free),
                Mode::Recording => pop(&mut state.recorded).or_else(|| pop(&mut state.free)),
            };
            (state.mode, found)
        };
        if mode == Mode::Off {
            // SAFETY: the caller vouches for the initialization.
            let slice = unsafe { self.stream.alloc::<T>(len) }.map_err(failed(op))?;
            return Ok(Buffer::own(slice));
        }
        let recording = mode == Mode::Recording;
        let ptr = match found {
            Some(ptr) => ptr,
            // While recording, a new allocation would be the graph's own (an allocation
            // node): it is left to the graph, as before, and freed as it was.
            None if recording => {
                // SAFETY: as above.
                let slice = unsafe { self.stream.alloc::<T>(len) }.map_err(failed(op))?;
                return Ok(Buffer::own(slice));
            }
            // SAFETY: the buffer is handed out as `len` values of T below, which it holds.
            None => unsafe { self.stream.alloc::<u8>(class) }
                .map_err(failed(op))?
                .leak(),
        };
        // SAFETY: ptr holds `class` bytes, at least len values of T, unused until returned.
        let slice = unsafe { self.stream.upgrade_device_ptr::<T>(ptr, len) };
        Ok(Buffer {
            slice: ManuallyDrop::new(slice),
            home: Home::Pool {
                pool: Arc::clone(self),
                class,
                recorded: recording,
            },
        })
    }

    fn give_back(&self, ptr: CUdeviceptr, class: usize, recorded: bool) {
        // A poisoned lock leaks the buffer rather than panic in a drop.
        if let Ok(mut state) = self.state.lock() {
            let map = if recorded {
                &mut state.recorded
            } else {
                &mut state.free
            };
            map.entry(class).or_default().push(ptr);
        }
    }

    fn free(&self, ptr: CUdeviceptr) {
        // SAFETY: ptr was allocated on this stream and nothing uses it after the work queued
        // so far; the free is queued after that work.
        drop(unsafe { self.stream.upgrade_device_ptr::<u8>(ptr, 1) });
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let Ok(state) = self.state.get_mut() else {
            return;
        };
        let buffers: Vec<CUdeviceptr> = state
            .free
            .drain()
            .chain(state.recorded.drain())
            .flat_map(|(_, ptrs)| ptrs)
            .collect();
        for ptr in buffers {
            self.free(ptr);
        }
    }
}

/// The buffer of one recording's logits, between the caller's holding them and the next
/// replay (which writes them again).
pub(crate) struct Parked {
    pool: Arc<Pool>,
    ptr: Mutex<Option<CUdeviceptr>>,
}

impl Parked {
    /// The buffer, for a replay that writes it, if no caller holds it.
    fn take(&self) -> Option<CUdeviceptr> {
        self.ptr.lock().ok()?.take()
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        if let Some(ptr) = self.ptr.get_mut().ok().and_then(Option::take) {
            self.pool.free(ptr);
        }
    }
}

/// Where a [`Buffer`] goes when it is dropped.
enum Home {
    /// Nothing left to do.
    Leaked,
    /// Freed on the stream (cudarc's drop).
    Own,
    /// Back to its pool.
    Pool {
        pool: Arc<Pool>,
        class: usize,
        recorded: bool,
    },
    /// Logits that a graph wrote: back to its recording where it keeps them (`parked`), else
    /// freed (the graph allocates them itself on every launch).
    Logits {
        pool: Arc<Pool>,
        parked: Option<Arc<Parked>>,
    },
}

/// A device buffer that goes back where it came from when dropped.
pub(crate) struct Buffer<T> {
    slice: ManuallyDrop<CudaSlice<T>>,
    home: Home,
}

impl<T> Buffer<T> {
    /// `slice`, freed on drop.
    pub fn own(slice: CudaSlice<T>) -> Buffer<T> {
        Buffer {
            slice: ManuallyDrop::new(slice),
            home: Home::Own,
        }
    }

    /// This buffer, just written by the recording's launch, as that recording's logits: the
    /// recording keeps it from now on (how it will find it again on each replay), and the
    /// pool counts it as held until it is dropped. `None` where the buffer is not one a
    /// recording took from the pool (the graph allocated it itself, as it will on every
    /// launch).
    pub fn into_logits(mut self) -> (Buffer<T>, Option<Arc<Parked>>) {
        let home = std::mem::replace(&mut self.home, Home::Own);
        let (pool, parked) = match home {
            Home::Pool {
                pool,
                recorded: true,
                ..
            } => {
                let parked = Arc::new(Parked {
                    pool: Arc::clone(&pool),
                    ptr: Mutex::new(None),
                });
                (pool, Some(parked))
            }
            other => {
                self.home = other;
                return (self, None);
            }
        };
        pool.held_logits.fetch_add(1, Ordering::AcqRel);
        self.home = Home::Logits {
            pool,
            parked: parked.clone(),
        };
        (self, parked)
    }

    /// The logits of a replay of a recording that keeps them in `parked`, `len` values; `None`
    /// where a caller still holds them.
    pub fn parked_logits(pool: &Arc<Pool>, parked: &Arc<Parked>, len: usize) -> Option<Buffer<T>> {
        let ptr = parked.take()?;
        pool.held_logits.fetch_add(1, Ordering::AcqRel);
        // SAFETY: the recording's logits, len values of T, which the replay has just written.
        let slice = unsafe { pool.stream.upgrade_device_ptr::<T>(ptr, len) };
        Some(Buffer {
            slice: ManuallyDrop::new(slice),
            home: Home::Logits {
                pool: Arc::clone(pool),
                parked: Some(Arc::clone(parked)),
            },
        })
    }

    /// The logits of a replay of a recording whose graph allocates them at `ptr` on every
    /// launch: freed on drop, before the next launch.
    ///
    /// # Safety
    /// `ptr` must be the graph's allocation of `len` values of T, just launched.
    pub unsafe fn graph_logits(pool: &Arc<Pool>, ptr: CUdeviceptr, len: usize) -> Buffer<T> {
        pool.held_logits.fetch_add(1, Ordering::AcqRel);
        // SAFETY: as the caller vouches.
        let slice = unsafe { pool.stream.upgrade_device_ptr::<T>(ptr, len) };
        Buffer {
            slice: ManuallyDrop::new(slice),
            home: Home::Logits {
                pool: Arc::clone(pool),
                parked: None,
            },
        }
    }

    /// Drops this buffer without freeing it: a recording that failed allocated it, and its
    /// address is no memory outside that graph.
    pub fn forget_if_graph_allocated(mut self) {
        if matches!(self.home, Home::Own) {
            // SAFETY: taken once; self's drop then has nothing to do.
            let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
            slice.leak();
            self.home = Home::Leaked;
        }
    }
}

impl<T> Drop for Buffer<T> {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.home, Home::Leaked) {
            Home::Leaked => {}
            Home::Own => {
                // SAFETY: taken once, here.
                drop(unsafe { ManuallyDrop::take(&mut self.slice) });
            }
            Home::Pool {
                pool,
                class,
                recorded,
            } => {
                // SAFETY: taken once, here.
                let ptr = unsafe { ManuallyDrop::take(&mut self.slice) }.leak();
                pool.give_back(ptr, class, recorded);
            }
            Home::Logits { pool, parked } => {
                // SAFETY: taken once, here.
                let slice = unsafe { ManuallyDrop::take(&mut self.slice) };
                match parked {
                    Some(parked) => {
                        if let Ok(mut slot) = parked.ptr.lock() {
                            *slot = Some(slice.leak());
                        }
                    }
                    None => drop(slice),
                }
                pool.held_logits.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl<T> Deref for Buffer<T> {
    type Target = CudaSlice<T>;
    fn deref(&self) -> &CudaSlice<T> {
        &self.slice
    }
}

impl<T> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut CudaSlice<T> {
        &mut self.slice
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_hold_their_sizes_and_are_few() {
        let mut last = 0;
        for bytes in 1..(1 << 18) {
            let class = size_class(bytes);
            let step = (bytes.next_power_of_two() / 8).max(256);
            assert!(class >= bytes && class - bytes < step, "{bytes} -> {class}");
            assert!(class >= last, "{bytes} -> {class} after {last}");
            last = class;
        }
        // Four classes from one power of two to the next.
        let classes: std::collections::BTreeSet<_> =
            ((1 << 16) + 1..=(1 << 17)).map(size_class).collect();
        assert_eq!(classes.len(), 4);
    }
}
