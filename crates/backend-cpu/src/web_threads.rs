//! Threads in the browser, for a WebAssembly build with shared memory (`+atomics`): std cannot
//! start threads there, since only JavaScript can create the Web Workers that run them. So
//! the page starts the Workers first, each instantiating the module over the shared memory
//! and calling [`serve`] (through the page's API crate), where it waits to be handed work;
//! [`spawn`] then hands a closure to a waiting Worker, synchronously, as `std::thread::spawn`
//! would start a thread. The Workers wait on futexes (`memory.atomic.wait32`), which the
//! browser allows in Workers; the thread that spawns must be a Worker too.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

type Work = Box<dyn FnOnce() + Send>;

/// The Workers in [`serve`] that no work has been handed to, and the work handed out but not
/// yet taken.
struct Hosts {
    waiting: usize,
    queue: VecDeque<Work>,
}

static HOSTS: Mutex<Hosts> = Mutex::new(Hosts {
    waiting: 0,
    queue: VecDeque::new(),
});
static HANDED: Condvar = Condvar::new();

fn hosts() -> MutexGuard<'static, Hosts> {
    HOSTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes the calling Worker a thread that [`spawn`] can start work on, and never returns.
/// `ready` is called once the Worker is counted, so that the page can wait for every Worker
/// before it loads a model.
pub fn serve(ready: impl FnOnce()) -> ! {
    hosts().waiting += 1;
    ready();
    loop {
        let work = {
            let mut hosts = hosts();
            loop {
                if let Some(work) = hosts.queue.pop_front() {
                    break work;
                }
                hosts = HANDED.wait(hosts).unwrap_or_else(|e| e.into_inner());
            }
        };
        work();
        hosts().waiting += 1;
    }
}

/// Workers in [`serve`] that no work has been handed to.
pub fn idle_threads() -> usize {
    hosts().waiting
}

/// Runs `work` on a Worker waiting in [`serve`]; an `Unsupported` error when none is.
pub(crate) fn spawn(work: impl FnOnce() + Send + 'static) -> std::io::Result<JoinHandle> {
    let done = Arc::new((Mutex::new(false), Condvar::new()));
    let signal = Arc::clone(&done);
    let work: Work = Box::new(move || {
        work();
        *signal.0.lock().unwrap_or_else(|e| e.into_inner()) = true;
        signal.1.notify_all();
    });
    let mut hosts = hosts();
    if hosts.waiting == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "no Web Worker is waiting to run a thread (the page starts them before loading)",
        ));
    }
    hosts.queue.push_back(work);
    hosts.waiting -= 1;
    drop(hosts);
    HANDED.notify_all();
    Ok(JoinHandle(done))
}

/// Waits for the work given to [`spawn`] to return, as `std::thread::JoinHandle` does.
pub(crate) struct JoinHandle(Arc<(Mutex<bool>, Condvar)>);

impl JoinHandle {
    pub fn join(self) -> std::thread::Result<()> {
        let (done, returned) = &*self.0;
        let mut done = done.lock().unwrap_or_else(|e| e.into_inner());
        while !*done {
            done = returned.wait(done).unwrap_or_else(|e| e.into_inner());
        }
        Ok(())
    }
}
