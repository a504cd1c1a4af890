//! Bad input: invalid UTF-8, the empty string, and a megabyte without a single space, which
//! must take linear time.

use std::time::{Duration, Instant};

use plumb_gguf::GgufFile;
use plumb_tokenizer::Tokenizer;

fn load(name: &str) -> Option<Tokenizer> {
    let path = plumb_testutil::model(module_path!(), name)?;
    let file = GgufFile::open(path).unwrap();
    Some(Tokenizer::from_gguf(file.metadata()).unwrap())
}

/// Ids from llama.cpp (llama-cpp-python 0.3.36, `tokenize(add_bos=False, special=False)`).
const INVALID_UTF8: &[(&str, &[u8], &[u32])] = &[
    ("smollm2-135m", b"a\xffb\xc3", &[81, 24211, 82, 24211]),
    ("smollm2-135m", b"\xe2\x82", &[24211, 24211]),
    ("smollm2-135m", b"\xed\xa0\x80x", &[184, 250, 218, 104]),
    ("smollm2-135m", b"\xc0\x80", &[190]),
    ("gemma3-270m", b"a\xffb\xc3", &[236746, 493, 336, 433]),
    ("gemma3-270m", b"\xe2\x82", &[464, 368]),
    ("gemma3-270m", b"\xed\xa0\x80x", &[475, 398, 366, 236781]),
    ("gemma3-270m", b"\xc0\x80", &[430, 366]),
    ("qwen2.5-coder-0.5b", b"a\xffb\xc3", &[64, 5691, 65, 5691]),
    ("qwen2.5-coder-0.5b", b"\xe2\x82", &[9973]),
    ("qwen2.5-coder-0.5b", b"\xed\xa0\x80x", &[169, 63219, 87]),
    ("qwen2.5-coder-0.5b", b"\xc0\x80", &[188]),
];

#[test]
fn invalid_utf8_is_tokenized_as_llama_cpp_does() {
    for &(model, bytes, want) in INVALID_UTF8 {
        let Some(tok) = load(model) else { return };
        let got = tok.encode_bytes(bytes, false, false).unwrap();
        assert_eq!(got, want, "{model}: {bytes:?}");
        // SentencePiece keeps malformed bytes as byte tokens; byte-level BPE has replaced
        // them with U+FFFD. Either way decoding gives valid text.
        let back = tok.detokenize(&got, false, false).unwrap();
        if tok.pre().is_none() {
            assert_eq!(back, bytes, "{model}");
        }
        assert!(tok.decode(&got).is_ok());
    }
}

#[test]
fn empty_input() {
    for model in ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"] {
        let Some(tok) = load(model) else { return };
        assert_eq!(
            tok.encode("", false, false).unwrap(),
            Vec::<u32>::new(),
            "{model}"
        );
        let with_special = tok.encode("", true, true).unwrap();
        assert_eq!(
            with_special,
            tok.add_bos()
                .then(|| tok.bos_id().unwrap())
                .into_iter()
                .collect::<Vec<_>>(),
            "{model}"
        );
        assert_eq!(tok.decode(&[]).unwrap(), "");
    }
}

/// The token count and the best time of three runs (the machine may be busy).
fn time_encode(tok: &Tokenizer, text: &str) -> (usize, Duration) {
    let mut best = Duration::MAX;
    let mut n = 0;
    for _ in 0..3 {
        let start = Instant::now();
        n = tok.encode(text, false, false).unwrap().len();
        best = best.min(start.elapsed());
    }
    (n, best)
}

/// A 1 MiB string without spaces, and its first quarter: four times the text must not
/// take sixteen times as long (allowing for noise on a busy machine, ten).
#[test]
fn megabyte_without_spaces_is_linear() {
    const MIB: usize = 1 << 20;
    let inputs = [
        ("one letter repeated", "a".repeat(MIB)),
        ("digits", "7".repeat(MIB)),
        ("mixed letters", "Thequickbrownfox".repeat(MIB / 16)),
        ("CJK", "日本語のテキスト中文".repeat(MIB / 30)),
    ];
    for model in ["smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b"] {
        let Some(tok) = load(model) else { return };
        for (label, text) in &inputs {
            let quarter = &text[..text.len() / 4];
            let (n_quarter, t_quarter) = time_encode(&tok, quarter);
            let (n_full, t_full) = time_encode(&tok, text);
            eprintln!(
                "{model}, {label}: {} bytes -> {n_full} tokens in {:.3} s ({} bytes -> {n_quarter} tokens in {:.3} s)",
                text.len(),
                t_full.as_secs_f64(),
                quarter.len(),
                t_quarter.as_secs_f64()
            );
            assert!(
                n_full >= n_quarter * 3,
                "{model}, {label}: token counts do not scale"
            );
            assert!(
                t_full < t_quarter * 10 + Duration::from_millis(50),
                "{model}, {label}: 4x the text took {:.1}x the time",
                t_full.as_secs_f64() / t_quarter.as_secs_f64()
            );
        }
    }
}
