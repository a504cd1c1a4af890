//! `plumb synth`: a file `plumb run` loads, the same bytes for the same seed, and errors that
//! name the bad argument.

mod common;
use common::plumb;

fn synth(out: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "synth",
        "--shape",
        "tiny",
        "--type",
        "q4_k_m",
        "-t",
        "2",
        "-o",
        out.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    plumb(&args)
}

#[test]
fn writes_a_model_that_runs_and_depends_on_the_seed_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        dir.path().join("a.gguf"),
        dir.path().join("b.gguf"),
        dir.path().join("c.gguf"),
    );
    for (path, seed) in [(&a, "7"), (&b, "7"), (&c, "8")] {
        let o = synth(path, &["--seed", seed]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            String::from_utf8_lossy(&o.stdout).trim(),
            path.to_str().unwrap()
        );
    }
    let read = |p: &std::path::Path| std::fs::read(p).unwrap();
    assert_eq!(read(&a), read(&b), "the same seed gave different bytes");
    assert_ne!(read(&a), read(&c), "another seed gave the same bytes");

    let o = plumb(&[
        "run",
        "-m",
        a.to_str().unwrap(),
        "-n",
        "4",
        "--temp",
        "0",
        "-p",
        "hello",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn bad_arguments_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.gguf");
    let o = plumb(&[
        "synth",
        "--shape",
        "llama9-99b",
        "--type",
        "q4_0",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("llama9-99b"), "{err}");
    let o = synth(&out, &["--layers", "0"]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("--layers"));
    let o = synth(dir.path(), &[]);
    assert!(!o.status.success());
    assert!(!out.exists());
}
