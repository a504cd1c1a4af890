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
        let backend = row["backend"].as_str().unwrap();
        let isa = plumb_ggml::Isa::detect().name();
        assert_eq!(backend, format!("cpu (f16, {isa})"), "{row}");
        // The process maps the whole model file and touches its weights.
        assert!(row["peak_rss_bytes"].as_u64().unwrap() > 50 << 20, "{row}");
    }
    assert_eq!(rows[0]["n_prompt"], 16);
    assert_eq!(rows[1]["n_gen"], 4);
}

/// `PLUMB_CPU_ISA` caps the kernels' instruction set (the label says which ran), and a name
/// this CPU cannot run is an error naming the variable, not a silent fallback.
#[test]
fn plumb_cpu_isa_caps_the_instruction_set() {
    let model = require_model!("smollm2-135m");
    let bench = |isa: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_plumb"))
            .args(["bench", "-m", model.to_str().unwrap()])
            .args(["-p", "8", "-n", "2", "-r", "1", "-t", "1", "--json"])
            .env("PLUMB_CPU_ISA", isa)
            .output()
            .unwrap()
    };
    let o = bench("scalar");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(rows[0]["backend"], "cpu (f16, scalar)");
    let o = bench("sse9");
    assert!(!o.status.success());
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("PLUMB_CPU_ISA") && stderr.contains("sse9"),
        "{stderr}"
    );
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
fn depth_and_parallel_tests_are_named_as_llama_cpp_names_them() {
    let model = require_model!("smollm2-135m");
    let model = model.to_str().unwrap();
    let tests = |args: &[&str]| -> Vec<(String, u64, u64)> {
        let common = ["bench", "-m", model, "-r", "1", "-t", "1", "--json"];
        let o = plumb(&[&common[..], args].concat());
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let rows: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
        rows.iter()
            .map(|r| {
                let rate = r["avg_ts"].as_f64().unwrap();
                assert!(rate > 0.0 && rate.is_finite(), "{r}");
                let n = |key: &str| r[key].as_u64().unwrap();
                (
                    r["test"].as_str().unwrap().to_owned(),
                    n("n_prompt"),
                    n("n_gen"),
                )
            })
            .collect()
    };
    let named = |v: &[(&str, u64, u64)]| -> Vec<(String, u64, u64)> {
        v.iter().map(|&(t, p, n)| (t.to_owned(), p, n)).collect()
    };
    assert_eq!(
        tests(&["-p", "8", "-n", "3", "-d", "0,20"]),
        named(&[
            ("pp8", 8, 0),
            ("tg3", 0, 3),
            ("pp8 @ d20", 8, 0),
            ("tg3 @ d20", 0, 3),
        ])
    );
    assert_eq!(
        tests(&["-p", "6", "-n", "2", "--parallel", "1,3"]),
        named(&[
            ("pp6 ×1", 6, 0),
            ("tg2 ×1", 0, 2),
            ("pp6 ×3", 6, 0),
            ("tg2 ×3", 0, 2),
        ])
    );
}

#[test]
fn bad_settings_are_errors() {
    let model = require_model!("smollm2-135m");
    let model = model.to_str().unwrap();
    for (args, message) in [
        (vec!["-r", "0"], "--repetitions must be at least 1"),
        (vec!["-t", "0"], "--threads must be at least 1"),
        (vec!["--cache-type", "q4_0"], "unknown cache type"),
        (
            vec!["--parallel", "2,0"],
            "--parallel counts must be at least 1",
        ),
        (
            vec!["--parallel", "2", "-d", "8"],
            "--n-depth and --parallel cannot be combined",
        ),
    ] {
        let o = plumb(&[&["bench", "-m", model][..], &args].concat());
        assert!(!o.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}
