//! Speed of one weight type's GEMM against a few tokens, the shape of a server's batched decode:
//! `cargo run --release -p plumb-ggml --example gemm_speed -- TYPE ROWS K [TOKENS] [THREADS]`
//! (e.g. `q5_0 4864 896 8 2`). It packs a random matrix into the panels of the kept GEMM
//! (`DotKernel::kept_gemm`, as a server's) once, then times walks over all of them (bytes
//! streamed from memory) and repeated walks over the first panels that fit in L2 (the same
//! work without the memory traffic), and prints time per product, GB/s of panel bytes and
//! GMAC/s. Run it on a quiet machine.

use std::time::Instant;

use plumb_ggml::{quantize_row_to_vec, DotKernel, GgmlType};

/// Bytes of panels that stay in one core's L2 beside the activations.
const L2_BYTES: usize = 512 * 1024;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: gemm_speed TYPE ROWS K [TOKENS] [THREADS]";
    let name = args.first().ok_or(usage)?;
    let ty = GgmlType::from_name(name).ok_or(format!("unknown type {name}"))?;
    let m: usize = args.get(1).ok_or(usage)?.parse()?;
    let k: usize = args.get(2).ok_or(usage)?.parse()?;
    let n: usize = args.get(3).map_or(Ok(8), |a| a.parse())?;
    let threads: usize = args.get(4).map_or(Ok(1), |a| a.parse())?;

    let kernel = DotKernel::new(ty)?;
    let gemm = kernel
        .gemm()
        .ok_or(format!("{ty} has no GEMM on this CPU"))?;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut random_row = |len: usize| -> Vec<f32> {
        (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
            })
            .collect()
    };

    let (panel_rows, panel_bytes) = (gemm.panel_rows(), gemm.panel_bytes(k));
    let n_panels = m.div_ceil(panel_rows);
    let mut panels = vec![0u8; n_panels * panel_bytes];
    let mut native_bytes = 0;
    for (p, panel) in panels.chunks_exact_mut(panel_bytes).enumerate() {
        let rows: Vec<u8> = (p * panel_rows..((p + 1) * panel_rows).min(m))
            .flat_map(|_| quantize_row_to_vec(ty, &random_row(k)).expect("quantizes"))
            .collect();
        native_bytes += rows.len();
        gemm.pack_panel_unchecked(&rows, k, panel);
    }
    let act_bytes = gemm.act_bytes(k);
    let mut acts = vec![0u8; n * act_bytes];
    let mut quantized = vec![0u8; kernel.act_row_bytes(k)];
    for act in acts.chunks_exact_mut(act_bytes) {
        kernel.quantize(&random_row(k), &mut quantized)?;
        gemm.pack_act_unchecked(&quantized, act);
    }

    // Each thread walks its share of `panels` (consecutive panels), `reps` times.
    let walk = |panels: &[u8], reps: usize| -> f64 {
        let start = Instant::now();
        std::thread::scope(|s| {
            let per_thread = (panels.len() / panel_bytes).div_ceil(threads) * panel_bytes;
            for part in panels.chunks(per_thread.max(panel_bytes)) {
                let acts = &acts;
                s.spawn(move || {
                    let mut out = vec![0.0f32; n * panel_rows];
                    for _ in 0..reps {
                        for panel in part.chunks_exact(panel_bytes) {
                            gemm.run_unchecked(panel, acts, &mut out);
                        }
                    }
                    std::hint::black_box(&out);
                });
            }
        });
        start.elapsed().as_secs_f64()
    };

    println!(
        "{ty} [{k} -> {m}], {n} tokens, {threads} threads: panels {:.1} MB ({:.2} B/weight), \
         native {:.1} MB",
        panels.len() as f64 / 1e6,
        panels.len() as f64 / (m * k) as f64,
        native_bytes as f64 / 1e6
    );
    let macs = (n * m * k) as f64;
    let report = |what: &str, bytes: f64, macs: f64, secs: f64| {
        println!(
            "  {what}: {:.3} ms per product, {:.1} GB/s of panels, {:.1} GMAC/s",
            secs * 1e3,
            bytes / secs / 1e9,
            macs / secs / 1e9
        );
    };
    walk(&panels, 3);
    let reps = 20;
    let secs = walk(&panels, reps) / reps as f64;
    report("whole matrix", panels.len() as f64, macs, secs);
    let resident = (L2_BYTES * threads / panel_bytes).clamp(threads, n_panels) * panel_bytes;
    let reps_resident = (reps * panels.len() / resident).max(1);
    walk(&panels[..resident], reps_resident);
    let secs = walk(&panels[..resident], reps_resident) / reps_resident as f64;
    let fraction = resident as f64 / panels.len() as f64;
    let scaled = secs / fraction;
    report(
        "L2-resident panels, scaled to the whole matrix",
        panels.len() as f64,
        macs,
        scaled,
    );
    Ok(())
}
