//! `plumb verify`: run the reference backend and another backend on the same tokens and diff
//! them layer by layer, in memory. Every new backend is accepted through this command.
//!
//! Exit status as `plumb diff`: 0 when they agree, 1 when they diverge, 2 on errors.

use std::process::ExitCode;

use plumb_verify::{diff, next_token_kl, op_that_produced, Tolerance};

use crate::backend_choice::{BackendArgs, BackendChoice};
use crate::commands::diff::report_text;
use crate::commands::trace::record;

#[derive(clap::Args)]
pub struct Args {
    /// GGUF file, or a catalog model name
    #[arg(short, long)]
    model: String,
    /// The backend to check against the reference
    #[arg(long, value_enum)]
    backend: BackendChoice,
    /// Threads for the CPU backend [default: all cores]
    #[arg(short = 't', long)]
    threads: Option<usize>,
    /// The prompt to run
    #[arg(short, long, default_value = "The capital of France is")]
    prompt: String,
    /// Largest allowed relative RMS error [default: 0.2 (the llama.cpp preset) for cpu, whose
    /// 8-bit activations round as llama.cpp's do, and for cuda, whose KV cache is f16 and whose
    /// products of many rows take f16 operands; 1e-2 for wgpu, which rounds only its KV cache
    /// to f16; 1e-3 (same-engine) for ref]
    #[arg(long, value_name = "REL")]
    tolerance: Option<f64>,
    /// Largest allowed KL divergence of the backend's next-token distribution from the
    /// reference's, at any position [default: 0.05 for cpu and cuda; 1e-3 for wgpu; 1e-6 for
    /// ref]
    #[arg(long, value_name = "KL")]
    max_kl: Option<f64>,
}

pub fn run(args: Args) -> ExitCode {
    let result = (|| -> anyhow::Result<bool> {
        let path = plumb_hub::resolve_model(&args.model)?;
        let reference = record(
            &path,
            &BackendArgs::with_backend(BackendChoice::Ref),
            &args.prompt,
            &[],
        )?;
        let candidate = BackendArgs {
            threads: args.threads,
            ..BackendArgs::with_backend(args.backend)
        };
        let candidate = record(&path, &candidate, &args.prompt, &[])?;
        // A backend that quantizes activations to 8 bits, as llama.cpp does, carries llama.cpp's
        // rounding noise; one that keeps an f16 KV cache, that cache's; the reference only has
        // f32's.
        let (mut tolerance, max_kl) = match args.backend {
            // f16 keys and values, and f16 operands in cuBLAS's products of many rows.
            BackendChoice::Cuda | BackendChoice::Cpu => (Tolerance::LLAMA_CPP, 0.05),
            BackendChoice::Ref => (Tolerance::SAME_ENGINE, 1e-6),
            BackendChoice::Wgpu => (Tolerance::F16_KV, 1e-3),
        };
        let max_kl = args.max_kl.unwrap_or(max_kl);
        if let Some(t) = args.tolerance {
            tolerance.max_rel_rms = t;
        }
        let report = diff(&reference, &candidate, tolerance);
        print!(
            "{}",
            report_text("ref", args.backend.name(), &reference, &candidate, &report)
        );
        if let Some(t) = report.first_divergence() {
            eprintln!(
                "verify: backend {} diverges from the reference at {} ({})",
                args.backend.name(),
                t.name,
                op_that_produced(&t.name)
            );
        }
        // Hidden states may all be within tolerance while a small error in a large value
        // that cancels later still moves the output: the distributions are checked apart.
        let kl = next_token_kl(&reference, &candidate)
            .and_then(|kl| Some((kl.max()?, kl.mean(), kl.top1_agreement())));
        let kl_ok = match kl {
            Some(((position, max), mean, top1)) => {
                println!(
                    "next-token distributions: KL(ref ‖ {}) at most {max:.3e} (position \
                     {position}), mean {mean:.3e}, same top-1 at {:.1}% of positions",
                    args.backend.name(),
                    top1 * 100.0
                );
                if max > max_kl {
                    eprintln!(
                        "verify: backend {}'s next-token distribution at position {position} \
                         is KL {max:.3e} from the reference's, over the limit {max_kl:e}",
                        args.backend.name()
                    );
                }
                max <= max_kl
            }
            None => true,
        };
        Ok(report.agree() && kl_ok)
    })();
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
