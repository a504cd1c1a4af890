//! A made-up SentencePiece vocabulary of any size, laid out as llama's: `<unk>`, `<s>`, `</s>`,
//! the 256 byte tokens `<0x00>`..`<0xFF>` (llama.cpp's SPM loader insists on every one), then
//! distinct pieces. The pieces are every string of lower-case letters, shortest first, each
//! with and without the `▁` that marks a word start, so that text tokenizes into pieces as
//! a real vocabulary's would, anything else falling back to bytes.

use plumb_gguf::Metadata;

/// `llama_token_type` values.
const NORMAL: i32 = 1;
const UNKNOWN: i32 = 2;
const CONTROL: i32 = 3;
const BYTE: i32 = 6;

/// The tokens before the pieces: three specials and the byte tokens.
const N_FIXED_TOKENS: usize = 3 + 256;

/// Sets the `tokenizer.ggml.*` keys of an `n_vocab`-token vocabulary, which must have room for
/// at least the specials and the bytes.
pub fn add_vocabulary(md: &mut Metadata, n_vocab: usize) {
    let mut tokens = Vec::with_capacity(n_vocab);
    let mut types = Vec::with_capacity(n_vocab);
    tokens.extend(["<unk>", "<s>", "</s>"].map(String::from));
    types.extend([UNKNOWN, CONTROL, CONTROL]);
    tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    types.extend([BYTE; 256]);
    let n_pieces = n_vocab.saturating_sub(tokens.len());
    tokens.extend(pieces().take(n_pieces));
    types.resize(tokens.len(), NORMAL);
    // SentencePiece merges the highest score first; earlier (shorter) pieces rank higher.
    let mut scores = vec![0.0f32; N_FIXED_TOKENS.min(tokens.len())];
    scores.extend((1..=tokens.len() - scores.len()).map(|k| -(k as f32)));

    md.set("tokenizer.ggml.model", "llama");
    md.set("tokenizer.ggml.tokens", tokens);
    md.set("tokenizer.ggml.scores", scores);
    md.set("tokenizer.ggml.token_type", types);
    md.set("tokenizer.ggml.bos_token_id", 1u32);
    md.set("tokenizer.ggml.eos_token_id", 2u32);
    md.set("tokenizer.ggml.unknown_token_id", 0u32);
    md.set("tokenizer.ggml.add_bos_token", true);
    md.set("tokenizer.ggml.add_eos_token", false);
}

/// `▁`, then for lengths 1, 2, …: every string of lower-case letters, as `▁s` and `s`.
fn pieces() -> impl Iterator<Item = String> {
    let words = (1u32..).flat_map(|len| {
        (0..26u64.pow(len)).map(move |mut i| {
            let mut letters = vec![b'a'; len as usize];
            for c in letters.iter_mut().rev() {
                *c = b'a' + (i % 26) as u8;
                i /= 26;
            }
            letters.into_iter().map(char::from).collect::<String>()
        })
    });
    std::iter::once("▁".to_owned()).chain(words.flat_map(|w| [format!("▁{w}"), w]))
}
