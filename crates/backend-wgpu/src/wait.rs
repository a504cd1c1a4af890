//! Waiting for the device: opening it, popping an error scope, mapping a buffer for reading.
//! The backend's ops are synchronous (the engine asks for logits and gets them), so each wait
//! happens inside the op that needs it.
//!
//! Natively a wait blocks the thread (`pollster`, `Device::poll`). In the browser nothing may
//! block: WebGPU settles its promises on the event loop of the thread that waits. There a wait
//! suspends the WebAssembly call through JSPI (WebAssembly JavaScript Promise Integration, on
//! by default in Chromium from 137 and Firefox from 153): the page's Worker calls the ops
//! through `#[wasm_bindgen(jspi)]` exports, which return a promise, and the event loop runs
//! while the call is suspended. JSPI rather than an engine step split into submit, awaited
//! readback and finish: the model and engine code stay as they are, and the readback stays
//! inside `Backend::to_host`/`Backend::top_k` on every platform.

use std::future::Future;

/// Waits for `future`.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn block_on<T>(future: impl Future<Output = T>) -> Result<T, String> {
    Ok(pollster::block_on(future))
}

/// Waits for `future`, a GPU future that owns what it needs, by suspending the WebAssembly call until a promise of it settles. Fails
/// (a thrown `SuspendError`) unless a `#[wasm_bindgen(jspi)]` export is on the stack.
#[cfg(target_arch = "wasm32")]
#[allow(deprecated)] // wasm-bindgen marks its JSPI API experimental.
pub(crate) fn block_on<T: 'static>(future: impl Future<Output = T> + 'static) -> Result<T, String> {
    use std::cell::RefCell;
    use std::rc::Rc;

    let output = Rc::new(RefCell::new(None));
    let slot = Rc::clone(&output);
    let promise = js_sys::futures::future_to_promise(async move {
        *slot.borrow_mut() = Some(future.await);
        Ok(wasm_bindgen::JsValue::UNDEFINED)
    });
    js_sys::futures::jspi_block_on_promise(&promise)
        .map_err(|e| format!("waiting for the GPU failed: {e:?}"))?;
    let finished = output.borrow_mut().take();
    finished.ok_or_else(|| "the GPU future did not finish".to_owned())
}

/// Maps `buffer` for reading, after the work submitted before, and waits until it is.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn map_read(device: &wgpu::Device, buffer: &wgpu::Buffer) -> Result<(), String> {
    let (sender, receiver) = std::sync::mpsc::channel();
    buffer.map_async(wgpu::MapMode::Read, .., move |mapped| {
        let _ = sender.send(mapped);
    });
    device
        .poll(wgpu::PollType::wait_indefinitely())
        .map_err(|e| format!("waiting for the device: {e}"))?;
    receiver
        .recv()
        .map_err(|_| "the readback was dropped".to_owned())?
        .map_err(|e| format!("reading back: {e}"))
}

/// Maps `buffer` for reading, after the work submitted before, and waits until it is: the
/// browser maps it on its own (`Device::poll` does nothing there).
#[cfg(target_arch = "wasm32")]
pub(crate) fn map_read(_device: &wgpu::Device, buffer: &wgpu::Buffer) -> Result<(), String> {
    let mapping = Mapping::default();
    let done = mapping.clone();
    buffer.map_async(wgpu::MapMode::Read, .., move |mapped| done.finish(mapped));
    block_on(mapping)?.map_err(|e| format!("reading back: {e}"))
}

/// The outcome of a `map_async`, as a future: its callback finishes it.
#[cfg(target_arch = "wasm32")]
#[derive(Clone, Default)]
struct Mapping(std::sync::Arc<std::sync::Mutex<MappingState>>);

#[cfg(target_arch = "wasm32")]
#[derive(Default)]
struct MappingState {
    outcome: Option<Result<(), wgpu::BufferAsyncError>>,
    waker: Option<std::task::Waker>,
}

#[cfg(target_arch = "wasm32")]
impl Mapping {
    fn finish(&self, outcome: Result<(), wgpu::BufferAsyncError>) {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        state.outcome = Some(outcome);
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }
}

#[cfg(target_arch = "wasm32")]
impl Future for Mapping {
    type Output = Result<(), wgpu::BufferAsyncError>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match state.outcome.take() {
            Some(outcome) => std::task::Poll::Ready(outcome),
            None => {
                state.waker = Some(cx.waker().clone());
                std::task::Poll::Pending
            }
        }
    }
}
