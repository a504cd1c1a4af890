//! Tokenizes a JSON array of strings with a model's tokenizer and prints, per string, a JSON
//! line with the ids in llama.cpp's three recorded modes and the detokenized bytes in hex.
//! `scripts/compare_llama_cpp.py` drives it to compare plumb with llama.cpp on many strings.
//!
//! usage: tokenize_batch MODEL.gguf STRINGS.json

use plumb_gguf::GgufFile;
use plumb_tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, strings] = args.as_slice() else {
        return Err("usage: tokenize_batch MODEL.gguf STRINGS.json".into());
    };
    let file = GgufFile::open(model)?;
    let tok = Tokenizer::from_gguf(file.metadata())?;
    let texts: Vec<String> = serde_json::from_str(&std::fs::read_to_string(strings)?)?;
    for text in &texts {
        let ids = tok.encode(text, false, false)?;
        let detok: String = tok
            .detokenize(&ids, false, false)?
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let line = serde_json::json!({
            "ids_add_special": tok.encode(text, true, false)?,
            "ids": ids,
            "ids_parse_special": tok.encode(text, false, true)?,
            "detok_hex": detok,
        });
        println!("{line}");
    }
    Ok(())
}
