//! `resolve_model` against a cache directory set through `$PLUMB_MODELS`. Alone in its test
//! binary, since it sets an environment variable for the whole process.

use plumb_hub::{resolve_model, Error, MODELS_ENV};

#[test]
fn paths_catalog_names_and_unknown_specs() {
    let cache = tempfile::tempdir().unwrap();
    std::env::set_var(MODELS_ENV, cache.path());

    // An existing file is returned as is, even when it is not a model.
    let file = cache.path().join("any.bin");
    std::fs::write(&file, b"x").unwrap();
    let spec = file.to_str().unwrap();
    assert_eq!(resolve_model(spec).unwrap(), file);

    // A cached catalog model is returned without pulling (no python needed).
    let cached = cache.path().join("gemma3-270m.gguf");
    std::fs::write(&cached, b"stand-in").unwrap();
    assert_eq!(resolve_model("gemma3-270m").unwrap(), cached);

    for spec in ["llama-7b", "./missing.gguf"] {
        let err = resolve_model(spec).unwrap_err();
        assert!(matches!(err, Error::UnknownModel { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains(spec), "{message}");
        assert!(
            message.contains("smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b"),
            "{message}"
        );
    }
}
