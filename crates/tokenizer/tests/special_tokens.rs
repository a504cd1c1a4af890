//! Special tokens as llama.cpp sees them (values from llama-cpp-python 0.3.36:
//! `llama_vocab_is_eog` and `llama_vocab_is_control` over every id), and streaming
//! decoding of characters that span several tokens.

use plumb_gguf::GgufFile;
use plumb_tokenizer::Tokenizer;

fn load(name: &str) -> Option<Tokenizer> {
    let path = plumb_testutil::model(module_path!(), name)?;
    let file = GgufFile::open(path).unwrap();
    Some(Tokenizer::from_gguf(file.metadata()).unwrap())
}

/// `(model, end-of-generation ids, number of control tokens, pad id)`.
const SPECIAL: &[(&str, &[u32], usize, u32)] = &[
    ("smollm2-135m", &[0, 2, 4], 17, 2),
    ("gemma3-270m", &[1, 106, 212], 6250, 0),
    (
        "qwen2.5-coder-0.5b",
        &[128247, 151643, 151645, 151662, 151663, 151664],
        21,
        151643,
    ),
];

#[test]
fn end_of_generation_and_control_tokens_match_llama_cpp() {
    for &(model, eog, n_control, pad) in SPECIAL {
        let Some(tok) = load(model) else { return };
        assert_eq!(tok.end_of_generation_ids(), eog, "{model}");
        for &id in eog {
            assert!(tok.is_end_of_generation(id), "{model}: {id}");
        }
        assert!(
            !tok.is_end_of_generation(tok.n_vocab() as u32),
            "{model}: out of range"
        );
        let controls = (0..tok.n_vocab() as u32)
            .filter(|&id| tok.is_control(id))
            .count();
        assert_eq!(controls, n_control, "{model}");
        assert_eq!(tok.pad_id(), Some(pad), "{model}");
    }
}

/// `🦀 x` and U+10FFFF, which gemma3 spells with four byte tokens and the BPE models with
/// pieces of its UTF-8 bytes; ids from llama.cpp.
const SPLIT_CHARACTERS: &[(&str, &[u32])] = &[
    ("smollm2-135m", &[10813, 116, 218, 1792, 189, 233, 140, 140]),
    ("gemma3-270m", &[248714, 1123, 482, 381, 429, 429]),
    ("qwen2.5-coder-0.5b", &[147579, 856, 176, 237, 123, 123]),
];

#[test]
fn stream_decoder_holds_back_incomplete_characters() {
    let text = "🦀 x\u{10FFFF}";
    for &(model, want) in SPLIT_CHARACTERS {
        let Some(tok) = load(model) else { return };
        let ids = tok.encode(text, false, false).unwrap();
        assert_eq!(ids, want, "{model}");
        let mut stream = tok.stream_decoder();
        let chunks: Vec<String> = ids.iter().map(|&id| stream.push(id).unwrap()).collect();
        assert_eq!(stream.flush(), "");
        assert_eq!(chunks.concat(), text, "{model}: {chunks:?}");
        // The last character needs all of its tokens: nothing of it comes out early.
        let last = chunks.iter().rposition(|c| !c.is_empty()).unwrap();
        assert_eq!(chunks[last], "\u{10FFFF}", "{model}: {chunks:?}");
        assert_eq!(last, chunks.len() - 1, "{model}");
        assert!(
            chunks[chunks.len() - 2].is_empty() || chunks[chunks.len() - 2].ends_with('x'),
            "{model}: {chunks:?}"
        );
    }
}

#[test]
fn stream_decoder_replaces_what_can_never_be_valid() {
    let Some(tok) = load("gemma3-270m") else {
        return;
    };
    // <0xFF> can start no UTF-8 sequence; <0xF0> alone is a truncated one.
    let (ff, f0) = (
        tok.token_id("<0xFF>").unwrap(),
        tok.token_id("<0xF0>").unwrap(),
    );
    let a = tok.encode("a", false, false).unwrap()[0];
    let mut stream = tok.stream_decoder();
    assert_eq!(stream.push(ff).unwrap(), "\u{FFFD}");
    assert_eq!(stream.push(f0).unwrap(), "");
    assert_eq!(stream.push(a).unwrap(), "\u{FFFD}a");
    assert_eq!(stream.push(f0).unwrap(), "");
    assert_eq!(stream.flush(), "\u{FFFD}");
    assert!(stream.push(tok.n_vocab() as u32).is_err());
    // Control tokens are not printed.
    assert_eq!(stream.push(tok.eos_id().unwrap()).unwrap(), "");
}
