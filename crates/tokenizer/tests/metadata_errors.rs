//! Building tokenizers from small synthetic vocabularies: errors name the key or value at
//! fault, the `pre` override, and SentencePiece's space prefix and byte fallback.

use plumb_gguf::{Metadata, Value};
use plumb_tokenizer::{byte_level_pieces, Tokenizer, TokenizerError, TokenizerOptions};

fn bpe_metadata(pre: Option<&str>) -> Metadata {
    let mut tokens = byte_level_pieces();
    tokens.extend(["he", "hel", "hell", "hello", "Ġhello"].map(String::from));
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", "gpt2");
    if let Some(pre) = pre {
        md.set("tokenizer.ggml.pre", pre);
    }
    md.set("tokenizer.ggml.tokens", tokens);
    md.set(
        "tokenizer.ggml.merges",
        ["h e", "he l", "hel l", "hell o", "Ġ hello"]
            .map(String::from)
            .to_vec(),
    );
    md
}

#[test]
fn unknown_pre_is_an_error_listing_known_values_unless_overridden() {
    let md = bpe_metadata(Some("mystery"));
    let err = Tokenizer::from_gguf(&md).unwrap_err();
    assert!(matches!(err, TokenizerError::UnknownPre { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("\"mystery\"")
            && msg.contains("qwen2")
            && msg.contains("llama3")
            && msg.contains("smollm"),
        "{msg}"
    );

    let options = TokenizerOptions {
        pre_override: Some("gpt-2".into()),
    };
    let tok = Tokenizer::from_gguf_with(&md, options).unwrap();
    assert_eq!(tok.pre(), Some("gpt-2"));
    let ids = tok.encode("hello hello", false, false).unwrap();
    assert_eq!(ids, [259, 260]);
    assert_eq!(tok.decode(&ids).unwrap(), "hello hello");

    let bad = TokenizerOptions {
        pre_override: Some("nope".into()),
    };
    assert!(Tokenizer::from_gguf_with(&md, bad)
        .unwrap_err()
        .to_string()
        .contains("nope"));
}

#[test]
fn missing_pre_falls_back_to_default() {
    let tok = Tokenizer::from_gguf(&bpe_metadata(None)).unwrap();
    assert_eq!(tok.pre(), Some("default"));
}

#[test]
fn errors_name_the_key() {
    let mut md = bpe_metadata(Some("gpt-2"));
    md.remove("tokenizer.ggml.merges");
    assert!(Tokenizer::from_gguf(&md)
        .unwrap_err()
        .to_string()
        .contains("tokenizer.ggml.merges"));

    let mut md = bpe_metadata(Some("gpt-2"));
    md.set("tokenizer.ggml.model", "bert");
    assert!(
        matches!(Tokenizer::from_gguf(&md), Err(TokenizerError::UnsupportedModel(m)) if m == "bert")
    );

    let mut md = bpe_metadata(Some("gpt-2"));
    md.remove("tokenizer.ggml.tokens");
    assert!(Tokenizer::from_gguf(&md)
        .unwrap_err()
        .to_string()
        .contains("tokenizer.ggml.tokens"));

    let mut md = bpe_metadata(Some("gpt-2"));
    md.set(
        "tokenizer.ggml.tokens",
        vec!["a".to_string(), "b".to_string(), "a".to_string()],
    );
    let err = Tokenizer::from_gguf(&md).unwrap_err().to_string();
    assert!(
        err.contains("\"a\"") && err.contains("0") && err.contains("2"),
        "{err}"
    );

    let mut md = bpe_metadata(Some("glm4"));
    md.set("tokenizer.ggml.add_bos_token", true);
    let err = Tokenizer::from_gguf(&md).unwrap_err().to_string();
    assert!(
        err.contains("add_bos_token") && err.contains("bos_token_id"),
        "{err}"
    );

    let mut md = bpe_metadata(Some("gpt-2"));
    md.set("tokenizer.ggml.token_type", vec![1i32; 3]);
    let err = Tokenizer::from_gguf(&md).unwrap_err().to_string();
    assert!(err.contains("tokenizer.ggml.token_type"), "{err}");
}

fn spm_metadata() -> Metadata {
    let mut tokens: Vec<String> = ["<unk>", "<s>", "</s>"].map(String::from).to_vec();
    tokens.extend((0..256).map(|b| format!("<0x{b:02X}>")));
    tokens.extend(["▁", "h", "i", "hi", "▁hi"].map(String::from));
    let n = tokens.len();
    let mut types = vec![3i32; 3];
    types.extend([6; 256]);
    types.extend([1; 5]);
    let mut scores = vec![0f32; n];
    scores[n - 2] = -1.0;
    scores[n - 1] = -0.5;
    let mut md = Metadata::new();
    md.set("tokenizer.ggml.model", "llama");
    md.set("tokenizer.ggml.tokens", tokens);
    md.set("tokenizer.ggml.scores", scores);
    md.set("tokenizer.ggml.token_type", types);
    md.set("tokenizer.ggml.bos_token_id", Value::U32(1));
    md.set("tokenizer.ggml.eos_token_id", Value::U32(2));
    md
}

#[test]
fn sentencepiece_space_prefix_and_byte_fallback() {
    let tok = Tokenizer::from_gguf(&spm_metadata()).unwrap();
    let hi = tok.token_id("▁hi").unwrap();
    // BOS, the space prefix, and byte tokens for what the vocabulary lacks.
    let ids = tok.encode("hi é", true, false).unwrap();
    let space = tok.token_id("▁").unwrap();
    let (c3, a9) = (
        tok.token_id("<0xC3>").unwrap(),
        tok.token_id("<0xA9>").unwrap(),
    );
    assert_eq!(ids, [1, hi, space, c3, a9]);
    // llama_detokenize drops the space the prefix added only when the first token is not
    // BOS: a leading BOS, kept or removed, keeps the space.
    assert_eq!(tok.decode(&ids[1..]).unwrap(), "hi é");
    assert_eq!(tok.decode(&ids).unwrap(), " hi é");
    assert_eq!(
        tok.detokenize(&ids, true, false).unwrap(),
        " hi é".as_bytes()
    );
    // After a special token the prefix comes back.
    assert_eq!(tok.encode("hi</s>hi", false, true).unwrap(), [hi, 2, hi]);
    assert_eq!(tok.encode("hi</s>hi", false, false).unwrap().len(), 6);
    assert!(tok.is_end_of_generation(2));
}
