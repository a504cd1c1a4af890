//! `plumb bench`: one row per (threads, test), llama-bench's columns, and its errors.

mod common;
use common::plumb;

use plumb_testutil::require_model;

#[test]
fn json_has_a_row_per_thread_count_and_test() {
    let model = require_model!("smollm2-135m");
    let o = plumb(&[
        "bench",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "16",
        "-n",
        "4",
        "-r",
        "2",
        "-t",
        "1,2",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    let tests: Vec<(u64, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["n_threads"].as_u64().unwrap(),
                r["test"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(tests, [(1, "pp16"), (1, "tg4"), (2, "pp16"), (2, "tg4")]);
    for row in &rows {
        let samples = row["samples_ts"].as_array().unwrap();
        assert_eq!(samples.len(), 2, "{row}");
        let mean = samples.iter().map(|s| s.as_f64().unwrap()).sum::<f64>() / 2.0;
        assert!(mean > 0.0 && mean.is_finite(), "{row}");
        assert!(
            (row["avg_ts"].as_f64().unwrap() - mean).abs() < 1e-9 * mean,
            "{row}"
        );
        assert_eq!(row["model_n_params"], 134_515_008, "{row}");
        assert_eq!(row["backend"], "cpu (f16)");
        // The process maps the whole model file and touches its weights.
        assert!(row["peak_rss_bytes"].as_u64().unwrap() > 50 << 20, "{row}");
    }
    assert_eq!(rows[0]["n_prompt"], 16);
    assert_eq!(rows[1]["n_gen"], 4);
}

#[test]
fn table_skips_tests_of_length_zero() {
    let model = require_model!("smollm2-135m");
    let o = plumb(&[
        "bench",
        "-m",
        model.to_str().unwrap(),
        "-p",
        "0",
        "-n",
        "3",
        "-r",
        "1",
        "-t",
        "1",
        "--backend",
        "ref",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8(o.stdout).unwrap();
    assert!(text.starts_with("| model "), "{text}");
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("| llama ")).collect();
    assert_eq!(rows.len(), 1, "{text}");
    assert!(
        rows[0].contains("| ref ") && rows[0].contains("tg3"),
        "{text}"
    );
    assert!(text.contains("peak RSS: "), "{text}");
}

#[test]
fn bad_settings_are_errors() {
    let model = require_model!("smollm2-135m");
    let model = model.to_str().unwrap();
    for (args, message) in [
        (vec!["-r", "0"], "--repetitions must be at least 1"),
        (vec!["-t", "0"], "--threads must be at least 1"),
        (vec!["--cache-type", "q4_0"], "unknown cache type"),
    ] {
        let o = plumb(&[&["bench", "-m", model][..], &args].concat());
        assert!(!o.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
