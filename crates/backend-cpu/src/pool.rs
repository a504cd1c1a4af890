//! A persistent pool of worker threads for the backend's ops.
//!
//! An op runs one job on every thread at once, the caller's thread included: `job(i)` for each
//! thread index `i`, each job deciding from its index which rows it owns. Workers wait for the
//! next job by spinning briefly and then sleeping, so that back-to-back ops of a forward pass
//! (hundreds per token) start in well under a microsecond, while an idle pool costs nothing.
//! Jobs never depend on the thread count for their arithmetic: how rows are split only decides
//! who computes them.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
use crate::web_threads::{self, JoinHandle};
#[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
type JoinHandle = std::thread::JoinHandle<()>;

/// How long an idle worker spins before it sleeps.
const SPIN_TIME: Duration = Duration::from_millis(2);

type Job<'a> = dyn Fn(usize) + Sync + 'a;

struct Shared {
    /// Bumped once per job; workers start a job when they see it change.
    epoch: AtomicUsize,
    /// Workers still running the current job.
    running: AtomicUsize,
    /// The current job, lifetime erased: valid while `running > 0` for the epoch it was set in.
    job: Mutex<Option<&'static Job<'static>>>,
    /// A worker's job panicked; the caller re-raises it.
    panicked: AtomicBool,
    sleep: Mutex<()>,
    wake: Condvar,
    shutdown: AtomicBool,
}

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle>,
    /// One job at a time: the backend may be shared between threads.
    dispatch: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `n_threads` threads in all: the caller's and `n_threads − 1` workers. Where the
    /// platform has no threads at all (WebAssembly without shared memory, WASI), or in the
    /// browser fewer Web Workers wait than asked for ([`crate::web_threads`]), the pool is the
    /// caller's thread alone, with a warning: [`ThreadPool::n_threads`] says what it got.
    pub fn new(n_threads: usize) -> std::io::Result<ThreadPool> {
        match ThreadPool::spawn(n_threads) {
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported && n_threads > 1 => {
                tracing::warn!(
                    requested = n_threads,
                    "this platform has no threads ({e}): the cpu backend runs on one"
                );
                ThreadPool::spawn(1)
            }
            result => result,
        }
    }

    fn spawn(n_threads: usize) -> std::io::Result<ThreadPool> {
        let shared = Arc::new(Shared {
            epoch: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            job: Mutex::new(None),
            panicked: AtomicBool::new(false),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            shutdown: AtomicBool::new(false),
        });
        let workers = (1..n_threads.max(1))
            .map(|index| {
                let shared = Arc::clone(&shared);
                start_thread(index, move || worker(&shared, index))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(ThreadPool {
            shared,
            workers,
            dispatch: Mutex::new(()),
        })
    }

    pub fn n_threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(i)` on every thread `i` of the pool and returns when all have finished.
    pub fn run(&self, job: &(dyn Fn(usize) + Sync)) {
        if self.workers.is_empty() {
            job(0);
            return;
        }
        let _one_at_a_time = self.dispatch.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the reference is only used by workers between the epoch bump below and their
        // decrement of `running`, and this function does not return before `running` is 0.
        let erased: &'static Job<'static> = unsafe { std::mem::transmute(job) };
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = Some(erased);
        self.shared
            .running
            .store(self.workers.len(), Ordering::SeqCst);
        {
            let _guard = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.epoch.fetch_add(1, Ordering::SeqCst);
        }
        self.shared.wake.notify_all();

        let mine = catch_unwind(AssertUnwindSafe(|| job(0)));
        while self.shared.running.load(Ordering::Acquire) != 0 {
            std::hint::spin_loop();
        }
        *self.shared.job.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if let Err(panic) = mine {
            resume_unwind(panic);
        }
        if self.shared.panicked.swap(false, Ordering::SeqCst) {
            panic!("a thread of the CPU backend's pool panicked");
        }
    }
}

/// Starts worker `index`: a std thread, or in the browser a Web Worker the page started.
#[cfg_attr(
    all(target_arch = "wasm32", target_feature = "atomics"),
    allow(unused_variables)
)]
fn start_thread(index: usize, run: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle> {
    #[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
    return web_threads::spawn(run);
    #[cfg(not(all(target_arch = "wasm32", target_feature = "atomics")))]
    std::thread::Builder::new()
        .name(format!("plumb-cpu-{index}"))
        .spawn(run)
}

/// Tells a spinning worker when [`SPIN_TIME`] has passed. WebAssembly in the browser has no
/// clock std can read (`Instant::now` panics there), so it counts spins instead: a spin is an
/// atomic load, a nanosecond or so.
struct SpinTimer {
    spins: u32,
    #[cfg(not(target_family = "wasm"))]
    start: std::time::Instant,
}

impl SpinTimer {
    fn start() -> SpinTimer {
        SpinTimer {
            spins: 0,
            #[cfg(not(target_family = "wasm"))]
            start: std::time::Instant::now(),
        }
    }

    /// Counts one spin; whether the worker has spun long enough to sleep.
    fn spun_out(&mut self) -> bool {
        self.spins += 1;
        #[cfg(not(target_family = "wasm"))]
        return self.spins.is_multiple_of(1024) && self.start.elapsed() > SPIN_TIME;
        #[cfg(target_family = "wasm")]
        return u128::from(self.spins) > SPIN_TIME.as_nanos();
    }
}

fn worker(shared: &Shared, index: usize) {
    let mut seen = 0;
    loop {
        let mut timer = SpinTimer::start();
        loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return;
            }
            if shared.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            if timer.spun_out() {
                let guard = shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
                if shared.epoch.load(Ordering::Acquire) == seen
                    && !shared.shutdown.load(Ordering::Acquire)
                {
                    drop(shared.wake.wait(guard));
                }
            } else {
                std::hint::spin_loop();
            }
        }
        seen = shared.epoch.load(Ordering::Acquire);
        let job = *shared.job.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(job) = job {
            if catch_unwind(AssertUnwindSafe(|| job(index))).is_err() {
                shared.panicked.store(true, Ordering::SeqCst);
            }
        }
        shared.running.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let _guard = self.shared.sleep.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::SeqCst);
        }
        self.shared.wake.notify_all();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
    }
}

/// Runs `work(unit)` for every unit of `0..n_units` on the pool, handing units out one at a
/// time to whichever thread is free: for work whose units differ in cost, such as causal
/// attention, where later tokens see more keys. Each unit is still computed whole by one
/// thread, so results do not depend on who ran it.
pub fn for_each_unit(pool: &ThreadPool, n_units: usize, work: &(dyn Fn(usize) + Sync)) {
    let next = AtomicUsize::new(0);
    pool.run(&|_| loop {
        let unit = next.fetch_add(1, Ordering::Relaxed);
        if unit >= n_units {
            break;
        }
        work(unit);
    });
}

/// Runs `work(unit)` for every unit of `0..n_units` on the pool, each thread walking its own
/// consecutive share of the units in order, and a thread that has finished its share taking
/// units from the far end of the others'. For decoding, where a product streams its weights
/// from memory once: each thread reads one long contiguous stretch, which the hardware
/// prefetchers follow, where units handed out in turn broke every thread's stretch at every
/// unit (qwen2.5-coder-1.5b decoded at 25 tokens/s with 64 KB units against 33 with 221 KB
/// ones), and a core slowed by the shared machine still gets help at the end. Each unit is
/// computed whole by one thread, so results do not depend on who ran it.
pub fn for_each_unit_in_shares(pool: &ThreadPool, n_units: usize, work: &(dyn Fn(usize) + Sync)) {
    let n_threads = pool.n_threads();
    // Share i is the units next..end, both packed into one word so that its owner (taking
    // from the front) and the others (from the back) claim with one compare-and-swap.
    let shares: Vec<AtomicU64> = (0..n_threads)
        .map(|i| {
            let r = split(n_units, i, n_threads, 1);
            AtomicU64::new(((r.start as u64) << 32) | r.end as u64)
        })
        .collect();
    let claim = |share: &AtomicU64, from_front: bool| -> Option<usize> {
        let mut current = share.load(Ordering::Relaxed);
        loop {
            let (next, end) = (current >> 32, current & 0xffff_ffff);
            if next >= end {
                return None;
            }
            let (claimed, new) = if from_front {
                (next, ((next + 1) << 32) | end)
            } else {
                (end - 1, (next << 32) | (end - 1))
            };
            match share.compare_exchange_weak(current, new, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return Some(claimed as usize),
                Err(seen) => current = seen,
            }
        }
    };
    pool.run(&|i| {
        while let Some(unit) = claim(&shares[i], true) {
            work(unit);
        }
        for other in (1..n_threads).map(|k| (i + k) % n_threads) {
            while let Some(unit) = claim(&shares[other], false) {
                work(unit);
            }
        }
    });
}

/// The part of `0..n` that thread `index` of `n_threads` owns, in whole multiples of `align`
/// (the last part takes the remainder).
pub fn split(n: usize, index: usize, n_threads: usize, align: usize) -> std::ops::Range<usize> {
    let units = n.div_ceil(align);
    let start = (units * index / n_threads * align).min(n);
    let end = (units * (index + 1) / n_threads * align).min(n);
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this platform can start threads (WASI and plain WebAssembly cannot).
    fn threads_exist() -> bool {
        !cfg!(target_family = "wasm")
    }

    #[test]
    fn without_threads_the_pool_is_the_callers_thread() {
        let pool = ThreadPool::new(3).unwrap();
        assert_eq!(pool.n_threads(), if threads_exist() { 3 } else { 1 });
    }

    #[test]
    fn every_thread_runs_each_job_once() {
        let pool = ThreadPool::new(3).unwrap();
        let n = pool.n_threads();
        for _ in 0..1000 {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            pool.run(&|i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
        }
    }

    #[test]
    fn sleeping_workers_wake_for_the_next_job() {
        let pool = ThreadPool::new(2).unwrap();
        std::thread::sleep(SPIN_TIME * 5);
        let hits = AtomicUsize::new(0);
        pool.run(&|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), pool.n_threads());
    }

    // WebAssembly aborts on panic: there is nothing to catch.
    #[cfg(panic = "unwind")]
    #[test]
    fn a_panicking_job_panics_the_caller_and_the_pool_survives() {
        let pool = ThreadPool::new(2).unwrap();
        let result = catch_unwind(AssertUnwindSafe(|| {
            pool.run(&|i| {
                if i == 1 {
                    panic!("worker fails");
                }
            })
        }));
        assert!(result.is_err());
        let hits = AtomicUsize::new(0);
        pool.run(&|_| {
            hits.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(hits.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn every_unit_runs_once_when_shares_are_taken_and_stolen() {
        for threads in 1..=3 {
            let pool = ThreadPool::new(threads).unwrap();
            for n_units in [0, 1, 2, 5, 64, 1000] {
                let hits: Vec<AtomicUsize> = (0..n_units).map(|_| AtomicUsize::new(0)).collect();
                for_each_unit_in_shares(&pool, n_units, &|unit| {
                    // Uneven units, so that threads finish at different times and steal.
                    if unit % 7 == 0 {
                        std::thread::sleep(Duration::from_micros(50));
                    }
                    hits[unit].fetch_add(1, Ordering::Relaxed);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));
            }
        }
    }

    #[test]
    fn split_covers_everything_once_in_aligned_parts() {
        for n in [0, 1, 7, 16, 100, 4864] {
            for threads in 1..=5 {
                let mut next = 0;
                for i in 0..threads {
                    let r = split(n, i, threads, 4);
                    assert_eq!(r.start, next);
                    assert!(r.start.is_multiple_of(4) || r.start == n);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }
}
