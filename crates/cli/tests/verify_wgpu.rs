//! `plumb verify --backend wgpu` on smollm2-135m and gemma3-270m: every named intermediate
//! within the f16-KV tolerance of the reference, and every position's next-token
//! distribution within KL 1e-3 of it. CI runs it on Mesa's lavapipe; without any adapter it
//! skips loudly.

mod common;
use common::plumb;

use plumb_testutil::require_model;

/// Whether wgpu finds an adapter; a loud skip when it does not.
fn have_gpu() -> bool {
    match plumb_backend_wgpu::WgpuBackend::new() {
        Ok(_) => true,
        Err(e) => {
            plumb_testutil::skip(module_path!(), &format!("no GPU adapter ({e})"));
            false
        }
    }
}

fn verify(name: &str) {
    let model = require_model!(name);
    let o = plumb(&["verify", "-m", model.to_str().unwrap(), "--backend", "wgpu"]);
    let text = String::from_utf8(o.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{name}: {text}\n{stderr}");
    assert!(text.contains("relative RMS error <= 1.0e-2"), "{text}");
    assert!(text.contains(", all within tolerance"), "{text}");
    assert!(text.contains("same top-1 at 100.0% of positions"), "{text}");

    // The f16 cache's rounding (about 1e-3) is above a tenth of the tolerance: were it not,
    // the run could not tell the wgpu backend from the reference itself, and the check could
    // not see an error of the tolerance's size.
    assert!(worst_rel_rms(&text) >= 1e-4, "{name}: {text}");
}

/// The largest relative RMS error in verify's table (the column before each verdict).
fn worst_rel_rms(table: &str) -> f64 {
    table
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            match cells[..] {
                [.., rel_rms, "ok"] => rel_rms.parse::<f64>().ok(),
                _ => None,
            }
        })
        .fold(0.0, f64::max)
}

#[test]
fn smollm2_on_wgpu_agrees_with_the_reference() {
    if have_gpu() {
        verify("smollm2-135m");
    }
}

#[test]
fn gemma3_on_wgpu_agrees_with_the_reference() {
    if have_gpu() {
        verify("gemma3-270m");
    }
}
