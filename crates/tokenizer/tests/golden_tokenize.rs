//! Every string in `testdata/golden/<model>/tokenize.json` must give llama.cpp's ids in each
//! recorded mode, llama.cpp's pieces, and detokenize to llama.cpp's bytes.

use plumb_gguf::GgufFile;
use plumb_tokenizer::Tokenizer;
use serde_json::Value;

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("id list")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks one model; returns the number of (case, field) comparisons made.
fn check_model(model: &str, golden: &std::path::Path, model_path: &std::path::Path) -> usize {
    let file = GgufFile::open(model_path).unwrap();
    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    let json: Value = serde_json::from_str(&std::fs::read_to_string(golden).unwrap()).unwrap();
    assert_eq!(
        tok.bos_id(),
        json["bos"].as_u64().map(|v| v as u32),
        "{model}: bos"
    );
    assert_eq!(
        tok.eos_id(),
        json["eos"].as_u64().map(|v| v as u32),
        "{model}: eos"
    );
    assert_eq!(
        tok.add_bos(),
        json["add_bos"].as_bool().unwrap(),
        "{model}: add_bos"
    );
    assert_eq!(
        tok.add_eos(),
        json["add_eos"].as_bool().unwrap(),
        "{model}: add_eos"
    );

    let mut failures = Vec::new();
    let mut checks = 0;
    let cases = json["cases"].as_array().unwrap();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        let text = case["text"].as_str().unwrap();
        let mut check = |field: &str, ok: bool, detail: String| {
            checks += 1;
            if !ok {
                failures.push(format!("{model} / {name} / {field}: {detail}"));
            }
        };
        for (field, add_special, parse_special) in [
            ("ids_add_special", true, false),
            ("ids", false, false),
            ("ids_parse_special", false, true),
        ] {
            let want = ids(&case[field]);
            let got = tok.encode(text, add_special, parse_special).unwrap();
            check(field, got == want, format!("got {got:?}, want {want:?}"));
        }
        let base = ids(&case["ids"]);
        let texts: Vec<&str> = base.iter().map(|&id| tok.token_text(id).unwrap()).collect();
        let want_texts: Vec<&str> = case["vocab_text"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        check("vocab_text", texts == want_texts, format!("got {texts:?}"));
        let pieces: Vec<String> = base
            .iter()
            .map(|&id| hex(&tok.token_to_piece(id)))
            .collect();
        let want_pieces: Vec<&str> = case["pieces_hex"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        check(
            "pieces_hex",
            pieces == want_pieces,
            format!("got {pieces:?}"),
        );
        let detok = tok.detokenize(&base, false, false).unwrap();
        check(
            "detok_hex",
            hex(&detok) == case["detok_hex"].as_str().unwrap(),
            format!("got {:?}", String::from_utf8_lossy(&detok)),
        );
        let decoded = tok.decode(&base).unwrap();
        check(
            "detok",
            decoded == case["detok"].as_str().unwrap(),
            format!("got {decoded:?}"),
        );
        let round_trip = detok == text.as_bytes();
        check(
            "roundtrip_ok",
            round_trip == case["roundtrip_ok"].as_bool().unwrap(),
            format!("plumb round trip {round_trip}"),
        );
        let with_special = tok
            .detokenize(&ids(&case["ids_add_special"]), true, false)
            .unwrap();
        let want = case["detok_add_special_remove_special"].as_str().unwrap();
        check(
            "detok_add_special_remove_special",
            String::from_utf8_lossy(&with_special) == want,
            format!("got {:?}", String::from_utf8_lossy(&with_special)),
        );
    }
    assert!(
        failures.is_empty(),
        "{} of {checks} checks failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    eprintln!(
        "{model}: {} strings, {checks} checks, all match llama.cpp",
        cases.len()
    );
    checks
}

macro_rules! golden_test {
    ($test:ident, $model:literal) => {
        #[test]
        fn $test() {
            let model = plumb_testutil::require_model!($model);
            let golden = plumb_testutil::testdata(concat!("golden/", $model, "/tokenize.json"));
            assert!(check_model($model, &golden, &model) > 0);
        }
    };
}

golden_test!(smollm2_matches_llama_cpp, "smollm2-135m");
golden_test!(gemma3_matches_llama_cpp, "gemma3-270m");
golden_test!(qwen25_coder_matches_llama_cpp, "qwen2.5-coder-0.5b");
