//! Greedy generation on the cpu backend, printing the token ids and the decoding speed: the
//! same program natively and in WebAssembly, so that both can be compared token for token and
//! timed. `cargo run --release -p plumb-engine --example greedy -- MODEL.gguf [TOKENS]
//! [THREADS] [PROMPT]`; for WebAssembly build it with `--target wasm32-wasip1` and run the
//! `.wasm` with `node --single-threaded-gc tools/wasi-run.mjs`.

use std::ops::ControlFlow;

use plumb_backend_cpu::{CpuBackend, KvCacheType};
use plumb_engine::sampling::{Sampler, SamplingConfig};
use plumb_engine::{GenerateOptions, Session};
use plumb_model::Model;
use plumb_tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        return Err("usage: greedy MODEL.gguf [TOKENS] [THREADS] [PROMPT]".into());
    };
    let n_tokens: usize = args.get(2).map_or(Ok(64), |s| s.parse())?;
    let threads: usize = args.get(3).map_or(Ok(1), |s| s.parse())?;
    let prompt = args
        .get(4)
        .map_or("The capital of France is", String::as_str);

    let model = Model::load(path, CpuBackend::new(threads, KvCacheType::F16)?)?;
    let tokenizer = Tokenizer::from_gguf(model.metadata())?;
    let mut session = Session::new(&model, &tokenizer, 2048, 256)?;
    let mut sampler = Sampler::new(SamplingConfig::greedy(), model.hparams().n_vocab)?;
    let prompt = tokenizer.encode(prompt, true, true)?;
    let options = GenerateOptions {
        max_tokens: Some(n_tokens),
        stop: Vec::new(),
    };
    let out = session.generate(&prompt, &mut sampler, &options, |_| {
        ControlFlow::Continue(())
    })?;
    let t = out.timings;
    println!("tokens {:?}", out.tokens);
    println!(
        "prompt {} tokens in {:.3} s; decoded {} tokens in {:.3} s: {:.2} tokens/s",
        out.prompt.n_evaluated,
        t.prompt_eval.as_secs_f64(),
        t.n_decoded,
        t.decode.as_secs_f64(),
        t.n_decoded as f64 / t.decode.as_secs_f64()
    );
    Ok(())
}
