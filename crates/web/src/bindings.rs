//! The JavaScript API (wasm-bindgen): thin wrappers over [`ModelBytes`] and [`WebChat`]. An
//! error is thrown as a JavaScript `Error` whose message is the error's own text.
//!
//! One build, one backend: the cpu backend (WASM SIMD), or with the `wgpu` feature the wgpu
//! backend on the page's WebGPU. In the wgpu build, `ModelLoader.load` and `Chat.step` wait
//! for the GPU (the device, the uploads, each step's readback), so they are JSPI exports that
//! return a promise (see plumb-backend-wgpu's `wait.rs`); the page awaits both in either build.

use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

use plumb_model::Backend;
use wasm_bindgen::prelude::*;

use crate::{ChatSettings, ModelBytes, Reply, WebChat, WebError};

/// The backend this build runs models on.
#[cfg(not(feature = "wgpu"))]
type PageBackend = plumb_backend_cpu::CpuBackend;
#[cfg(feature = "wgpu")]
type PageBackend = plumb_backend_wgpu::WgpuBackend;

/// Set once a model is loaded: an instance holds one model for its lifetime (see
/// [`WebChat::load`]).
static LOADED: AtomicBool = AtomicBool::new(false);

fn thrown(err: WebError) -> JsError {
    JsError::new(&err.to_string())
}

/// Receives a model file chunk by chunk: `new ModelLoader(file.size)`, `push(chunk)` for
/// each `Uint8Array`, then `load(...)`.
#[wasm_bindgen]
pub struct ModelLoader(ModelBytes);

#[wasm_bindgen]
impl ModelLoader {
    /// Allocates the buffer for a file of `len` bytes, or refuses a file that cannot load.
    #[wasm_bindgen(constructor)]
    pub fn new(len: f64) -> Result<ModelLoader, JsError> {
        if LOADED.load(Ordering::Relaxed) {
            return Err(thrown(WebError::AlreadyLoaded));
        }
        if !(len.is_finite() && len >= 0.0 && len.fract() == 0.0) {
            return Err(JsError::new(&format!(
                "the model file's length {len} is not a byte count"
            )));
        }
        ModelBytes::new(len as u64).map(ModelLoader).map_err(thrown)
    }

    /// Copies the next chunk of the file into the buffer.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), JsError> {
        self.0.push(chunk).map_err(thrown)
    }

    /// Bytes received so far.
    pub fn received(&self) -> f64 {
        self.0.received() as f64
    }
}

#[cfg(not(feature = "wgpu"))]
#[wasm_bindgen]
impl ModelLoader {
    /// Reads the complete file and loads the model on the cpu backend on `threads` threads
    /// (see [`start_thread`]); see [`Chat::configure`] for the settings.
    pub fn load(
        self,
        temperature: f32,
        seed: u32,
        max_tokens: i32,
        threads: u32,
    ) -> Result<Chat, JsError> {
        let settings = settings(temperature, seed, max_tokens);
        loaded(WebChat::load(self.0, settings, threads as usize))
    }
}

#[cfg(feature = "wgpu")]
#[wasm_bindgen]
impl ModelLoader {
    /// Reads the complete file, opens the page's WebGPU device and uploads the model's
    /// weights to it: a promise of the chat. See [`Chat::configure`] for the settings.
    #[wasm_bindgen(jspi)]
    #[allow(deprecated)] // wasm-bindgen marks JSPI experimental.
    pub fn load(self, temperature: f32, seed: u32, max_tokens: i32) -> Result<Chat, JsError> {
        let settings = settings(temperature, seed, max_tokens);
        let backend = PageBackend::new().map_err(|e| thrown(e.into()))?;
        loaded(WebChat::with_backend(self.0, backend, settings))
    }
}

fn loaded(chat: Result<WebChat<PageBackend>, WebError>) -> Result<Chat, JsError> {
    let chat = chat.map_err(thrown)?;
    LOADED.store(true, Ordering::Relaxed);
    Ok(Chat(chat))
}

/// A chat with the loaded model.
#[wasm_bindgen]
pub struct Chat(WebChat<PageBackend>);

/// A finished reply.
#[wasm_bindgen(getter_with_clone)]
pub struct ReplyInfo {
    pub text: String,
    pub n_tokens: u32,
    /// `eog`, `length`, `stop`, `context` or `interrupted`.
    pub stop: String,
    pub prompt_tokens: u32,
    pub prompt_tokens_per_second: f64,
    pub tokens_per_second: f64,
}

#[wasm_bindgen]
impl Chat {
    /// The architecture, layers and context, for the page to show.
    pub fn describe(&self) -> String {
        self.0.describe()
    }

    /// The backend the model runs on, for the page to show: `cpu` or `wgpu`.
    pub fn backend(&self) -> String {
        self.0.backend().name().to_owned()
    }

    /// Sampling from the next reply on: `temperature` (0: greedy), `seed`, and at most
    /// `max_tokens` new tokens per reply (negative: no limit).
    pub fn configure(
        &mut self,
        temperature: f32,
        seed: u32,
        max_tokens: i32,
    ) -> Result<(), JsError> {
        self.0
            .configure(settings(temperature, seed, max_tokens))
            .map_err(thrown)
    }

    /// Forgets the conversation.
    pub fn reset(&mut self) -> Result<(), JsError> {
        self.0.reset().map_err(thrown)
    }

    /// Sends a user message; `step` generates the reply.
    pub fn send(&mut self, text: &str) -> Result<(), JsError> {
        self.0.send(text).map_err(thrown)
    }

    /// Asks the reply to stop; the next `step` ends it.
    pub fn stop(&mut self) {
        self.0.stop();
    }

    /// Whether a reply is being generated.
    pub fn generating(&self) -> bool {
        self.0.generating()
    }
}

#[cfg(not(feature = "wgpu"))]
#[wasm_bindgen]
impl Chat {
    /// The threads the model computes on.
    pub fn threads(&self) -> u32 {
        self.0.threads() as u32
    }

    /// Runs one forward pass of the reply, calling `on_text(piece)` for each new piece of
    /// text; returns the finished reply at the end, else `undefined`.
    pub fn step(&mut self, on_text: js_sys::Function) -> Result<Option<ReplyInfo>, JsError> {
        self.step_now(&on_text)
    }
}

#[cfg(feature = "wgpu")]
#[wasm_bindgen]
impl Chat {
    /// Runs one forward pass of the reply, calling `on_text(piece)` for each new piece of
    /// text: a promise of the finished reply at the end, else of `undefined`. The Worker
    /// calls nothing else on the chat until it settles.
    #[wasm_bindgen(jspi)]
    #[allow(deprecated)] // wasm-bindgen marks JSPI experimental.
    pub fn step(&mut self, on_text: js_sys::Function) -> Result<Option<ReplyInfo>, JsError> {
        self.step_now(&on_text)
    }
}

impl Chat {
    fn step_now(&mut self, on_text: &js_sys::Function) -> Result<Option<ReplyInfo>, JsError> {
        let mut failed = None;
        let reply = self
            .0
            .step(|piece| match on_text.call1(&JsValue::NULL, &piece.into()) {
                Ok(_) => ControlFlow::Continue(()),
                Err(err) => {
                    failed = Some(err);
                    ControlFlow::Break(())
                }
            })
            .map_err(thrown)?;
        if let Some(err) = failed {
            let message = match err.dyn_ref::<js_sys::Error>() {
                Some(error) => error.message().into(),
                None => err.as_string().unwrap_or_else(|| format!("{err:?}")),
            };
            return Err(thrown(WebError::Callback(message)));
        }
        Ok(reply.map(ReplyInfo::from))
    }
}

/// Whether this module was built with shared memory, so that [`start_thread`] can run
/// threads. The page loads the threaded build only where it can share memory (a
/// cross-origin isolated page), the single-threaded one elsewhere.
#[wasm_bindgen]
pub fn threaded() -> bool {
    cfg!(all(target_arch = "wasm32", target_feature = "atomics"))
}

/// The module and its shared memory, for the page to instantiate in the Web Workers that
/// become threads.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
#[wasm_bindgen]
pub fn shared_module() -> js_sys::Array {
    js_sys::Array::of2(&wasm_bindgen::module(), &wasm_bindgen::memory())
}

/// Makes the calling Web Worker (an instance over [`shared_module`]) a thread the model can
/// compute on, calling `ready()` once it is counted; never returns. The page starts
/// `threads − 1` of them before it loads a model on `threads`.
#[cfg(all(target_arch = "wasm32", target_feature = "atomics"))]
#[wasm_bindgen]
pub fn start_thread(ready: &js_sys::Function) {
    plumb_backend_cpu::web_threads::serve(|| {
        // A failing callback only keeps the page waiting for this thread; it loads on fewer.
        let _ = ready.call0(&JsValue::NULL);
    })
}

fn settings(temperature: f32, seed: u32, max_tokens: i32) -> ChatSettings {
    ChatSettings {
        temperature,
        seed,
        max_tokens: usize::try_from(max_tokens).ok(),
    }
}

impl From<Reply> for ReplyInfo {
    fn from(reply: Reply) -> ReplyInfo {
        ReplyInfo {
            text: reply.text,
            n_tokens: reply.n_tokens as u32,
            stop: reply.stop.to_owned(),
            prompt_tokens: reply.prompt_tokens_evaluated as u32,
            prompt_tokens_per_second: reply.prompt_tokens_per_second,
            tokens_per_second: reply.tokens_per_second,
        }
    }
}
