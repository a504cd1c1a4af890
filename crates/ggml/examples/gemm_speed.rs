//! Speed of one weight type's GEMM against a few tokens, the shape of a server's batched decode:
//! `cargo run --release -p plumb-ggml --example gemm_speed -- TYPE ROWS K [TOKENS] [THREADS]`
//! (e.g. `q5_0 4864 896 8 2`). It packs a random matrix into the panels of the kept GEMM
//! (`DotKernel::kept_gemm`, as a server's) once, then times walks over all of them (bytes
//! streamed from memory) and repeated walks over the first panels that fit in L2 (the same
//! work without the memory traffic), and prints time per product, GB/s of panel bytes and
//! GMAC/s. It times the per-row path (`DotKernel::dot` for one token, `dot_many` for more: what
//! products without a GEMM, and every decode step, use) on the same rows the same two ways, the
//! rows split between the threads in consecutive parts as the GEMM's panels are. Run it on a
//! quiet machine.

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

    // A random weight row: quantized random values, or for IQ4_XS, which plumb has no
    // quantizer for, random bytes with each block's f16 scale `d` (its first two bytes) set
    // to 1/1024.
    let mut weight_row = |k: usize| -> Result<Vec<u8>, Box<dyn std::error::Error>> {
        let values = random_row(k);
        if ty != GgmlType::IQ4_XS {
            return Ok(quantize_row_to_vec(ty, &values)?);
        }
        let mut row: Vec<u8> = values.iter().map(|v| (v * 512.0) as i8 as u8).collect();
        row.truncate(k / ty.block_size() * ty.block_bytes());
        for block in row.chunks_exact_mut(ty.block_bytes()) {
            block[..2].copy_from_slice(&0x1400u16.to_le_bytes());
        }
        Ok(row)
    };

    let (panel_rows, panel_bytes) = (gemm.panel_rows(), gemm.panel_bytes(k));
    let n_panels = m.div_ceil(panel_rows);
    let mut panels = vec![0u8; n_panels * panel_bytes];
    let mut native = Vec::new();
    for (p, panel) in panels.chunks_exact_mut(panel_bytes).enumerate() {
        let mut rows = Vec::new();
        for _ in p * panel_rows..((p + 1) * panel_rows).min(m) {
            rows.extend_from_slice(&weight_row(k)?);
        }
        gemm.pack_panel_unchecked(&rows, k, panel);
        native.extend_from_slice(&rows);
    }
    let row_bytes = native.len() / m;
    let act_bytes = gemm.act_bytes(k);
    let mut acts = vec![0u8; n * act_bytes];
    let mut quantized = vec![0u8; n * kernel.act_row_bytes(k)];
    for (act, q) in acts
        .chunks_exact_mut(act_bytes)
        .zip(quantized.chunks_exact_mut(kernel.act_row_bytes(k)))
    {
        kernel.quantize(&random_row(k), q)?;
        gemm.pack_act_unchecked(q, act);
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

    // The same for the per-row path: each thread's share of the rows in `native`.
    let walk_rows = |rows: &[u8], reps: usize| -> f64 {
        let start = Instant::now();
        std::thread::scope(|s| {
            let per_thread = (rows.len() / row_bytes).div_ceil(threads) * row_bytes;
            for part in rows.chunks(per_thread.max(row_bytes)) {
                let quantized = &quantized;
                s.spawn(move || {
                    let mut out = vec![0.0f32; n];
                    for _ in 0..reps {
                        for row in part.chunks_exact(row_bytes) {
                            if n == 1 {
                                out[0] = kernel.dot_unchecked(row, quantized);
                            } else {
                                kernel.dot_many_unchecked(row, quantized, &mut out);
                            }
                            std::hint::black_box(&out);
                        }
                    }
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
        native.len() as f64 / 1e6
    );
    let macs = (n * m * k) as f64;
    let report = |what: &str, bytes: f64, secs: f64| {
        println!(
            "  {what}: {:.3} ms per product, {:.1} GB/s of weights, {:.1} GMAC/s",
            secs * 1e3,
            bytes / secs / 1e9,
            macs / secs / 1e9
        );
    };
    // The whole matrix (streamed from memory), then its first `unit`s that fit in L2 walked
    // over and over (the same work without the memory traffic), scaled to the whole matrix;
    // each timed over about half a second, so that the shared machine's noise averages out.
    let time = |walk: &dyn Fn(&[u8], usize) -> f64, all: &[u8], unit: usize, what: &str| {
        let reps = (0.5 / (walk(all, 3) / 3.0)).clamp(3.0, 100_000.0) as usize;
        report(
            &format!("{what}, whole matrix"),
            all.len() as f64,
            walk(all, reps) / reps as f64,
        );
        let resident = (L2_BYTES * threads / unit).clamp(threads, all.len() / unit) * unit;
        let reps_resident = (reps * all.len() / resident).max(1);
        walk(&all[..resident], reps_resident);
        let secs = walk(&all[..resident], reps_resident) / reps_resident as f64;
        report(
            &format!("{what}, L2-resident, scaled to the whole matrix"),
            all.len() as f64,
            secs * all.len() as f64 / resident as f64,
        );
    };
    time(&walk, &panels, panel_bytes, "GEMM");
    let per_row = if n == 1 { "dot" } else { "dot_many" };
    time(&walk_rows, &native, row_bytes, per_row);
    Ok(())
}
