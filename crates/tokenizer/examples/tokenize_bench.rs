//! Times plumb's tokenizer on a text file for `bench/tokenize_bench.py`: builds the tokenizer
//! from the model, tokenizes the file (add_special = false, parse_special = false) several
//! times on this one thread, writes the ids of the last run as little-endian u32 to
//! IDS_OUT, and prints the timings as JSON.
//!
//! usage: tokenize_bench MODEL.gguf TEXT_FILE REPEATS IDS_OUT

use std::time::Instant;

use plumb_gguf::GgufFile;
use plumb_tokenizer::Tokenizer;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, model, text, repeats, ids_out] = args.as_slice() else {
        return Err("usage: tokenize_bench MODEL.gguf TEXT_FILE REPEATS IDS_OUT".into());
    };
    let repeats: usize = repeats.parse()?;
    let start = Instant::now();
    let file = GgufFile::open(model)?;
    let tok = Tokenizer::from_gguf(file.metadata())?;
    let load_s = start.elapsed().as_secs_f64();
    let text = std::fs::read(text)?;
    let mut seconds = Vec::new();
    let mut ids = Vec::new();
    for _ in 0..repeats {
        let start = Instant::now();
        ids = tok.encode_bytes(&text, false, false)?;
        seconds.push(start.elapsed().as_secs_f64());
    }
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    std::fs::write(ids_out, bytes)?;
    println!(
        "{}",
        serde_json::json!({ "load_s": load_s, "seconds": seconds, "n_tokens": ids.len() })
    );
    Ok(())
}
