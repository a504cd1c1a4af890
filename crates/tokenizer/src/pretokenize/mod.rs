//! Byte-level BPE pre-tokenizers: how `tokenizer.ggml.pre` splits text into words before
//! merges run inside each word.
//!
//! Each pre-tokenizer is llama.cpp's list of regexes, applied one after the other, each
//! splitting the pieces the previous one left. llama.cpp runs two of its regexes through
//! hand-written splitters (`custom.rs`) and the rest through C++ `std::regex`, often on a
//! "collapsed" copy of the text where each non-ASCII code point becomes one byte for its
//! category. `rules.rs` reproduces those matches, ECMAScript backtracking included, without
//! a regex engine: the patterns are few and fixed, and hand-written matchers are linear.

mod custom;
mod rules;

use crate::unicode::{self, CharFlags};
use rules::Rule;

/// The regex families llama.cpp knows for byte-level BPE vocabularies, as far as plumb
/// implements them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    /// `LLAMA_VOCAB_PRE_TYPE_DEFAULT`.
    Default,
    /// GPT-2's regex alone (`gpt-2`, `mpt`, `olmo`, ...).
    Gpt2,
    /// Single digits, then GPT-2's regex (`starcoder`, `smollm`, ...).
    Starcoder,
    /// The Llama 3 regex (`llama3`, `dbrx`, `smaug-bpe`, `glm4`).
    Llama3,
    /// Qwen2's regex: Llama 3's with single digits (`qwen2`, `stablelm2`, ...).
    Qwen2,
    /// Qwen3.5's regex: Qwen2's with combining marks counted as letters.
    Qwen35,
    DeepseekLlm,
    DeepseekCoder,
    Falcon,
}

impl Family {
    fn rules(self) -> &'static [Rule] {
        use rules::Rule::*;
        match self {
            Family::Default => &[
                PunctuationRun { backtick: false },
                Gpt2,
                NumberRun,
                AsciiDigitTriples,
            ],
            Family::Gpt2 => &[Gpt2],
            Family::Starcoder => &[SingleNumber, Gpt2],
            Family::Llama3 => &[Llama3],
            Family::Qwen2 => &[Qwen2 { marks: false }],
            Family::Qwen35 => &[Qwen2 { marks: true }],
            Family::DeepseekLlm => &[
                LineBreak,
                SpaceThenWide(rules::DEEPSEEK_LETTERS),
                SpaceThenWide(rules::DEEPSEEK_PUNCTUATION),
                TrailingSpace,
                WideRun(rules::DEEPSEEK_CJK),
                NumberRun,
            ],
            Family::DeepseekCoder => &[
                LineBreak,
                SpaceThenLetters,
                SpaceThenPunctuation,
                WideRun(rules::DEEPSEEK_CJK),
                SingleNumber,
            ],
            Family::Falcon => &[PunctuationRun { backtick: true }, Gpt2, AsciiDigitTriples],
        }
    }
}

/// What a `tokenizer.ggml.pre` value selects: the splitting rules and the vocabulary
/// settings llama.cpp ties to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PreConfig {
    family: Family,
    /// Undo GPT-2 style spaces before punctuation when detokenizing.
    pub clean_spaces: bool,
    /// A word that is itself a vocabulary token is emitted whole, without merges.
    pub ignore_merges: bool,
    /// The default for `add_bos_token` when the file does not say.
    pub add_bos: bool,
    /// The vocabulary has no BOS token unless the file names one.
    pub no_default_bos: bool,
}

/// `(names, family, clean_spaces, ignore_merges, add_bos, no_default_bos)`, in llama.cpp's
/// order.
#[allow(clippy::type_complexity)]
const PRE_TYPES: &[(&[&str], Family, bool, bool, bool, bool)] = &[
    (&["default"], Family::Default, true, false, false, false),
    (
        &[
            "llama3",
            "llama-v3",
            "llama-bpe",
            "falcon3",
            "falcon-h1",
            "pixtral",
            "midm-2.0",
            "lfm2",
            "jina-v5-nano",
        ],
        Family::Llama3,
        true,
        true,
        true,
        false,
    ),
    (
        &["deepseek-llm"],
        Family::DeepseekLlm,
        false,
        false,
        false,
        false,
    ),
    (
        &["deepseek-coder"],
        Family::DeepseekCoder,
        false,
        false,
        false,
        false,
    ),
    (&["falcon"], Family::Falcon, true, false, false, false),
    (&["mpt"], Family::Gpt2, true, false, false, false),
    (&["starcoder"], Family::Starcoder, true, false, false, false),
    (
        &[
            "gpt-2",
            "phi-2",
            "jina-es",
            "jina-de",
            "gigachat",
            "jina-v2-es",
            "jina-v2-de",
            "a.x-4.0",
            "mellum",
            "modern-bert",
        ],
        Family::Gpt2,
        true,
        false,
        false,
        false,
    ),
    (
        &["jina-v1-en", "jina-v2-code", "roberta-bpe"],
        Family::Gpt2,
        true,
        false,
        false,
        false,
    ),
    (&["refact"], Family::Starcoder, true, false, false, false),
    (
        &["command-r"],
        Family::Starcoder,
        false,
        false,
        false,
        false,
    ),
    (
        &["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2"],
        Family::Qwen2,
        false,
        false,
        false,
        false,
    ),
    (&["qwen35"], Family::Qwen35, false, false, false, false),
    (&["stablelm2"], Family::Qwen2, true, false, false, false),
    (&["olmo"], Family::Gpt2, true, false, false, false),
    (&["dbrx"], Family::Llama3, true, false, false, false),
    (&["smaug-bpe"], Family::Llama3, true, false, false, false),
    (
        &["glm4", "chatglm-bpe"],
        Family::Llama3,
        true,
        false,
        false,
        true,
    ),
    (&["jais"], Family::Gpt2, true, false, false, false),
    (&["smollm"], Family::Starcoder, false, false, false, false),
    (&["codeshell"], Family::Starcoder, true, false, false, false),
    (&["exaone"], Family::Starcoder, true, false, false, false),
    (&["exaone4"], Family::Gpt2, true, false, false, false),
    (
        &["minerva-7b"],
        Family::Starcoder,
        true,
        false,
        false,
        false,
    ),
    (&["megrez"], Family::Qwen2, true, false, false, false),
    (&["trillion"], Family::Gpt2, false, false, false, false),
    (
        &["granite-docling"],
        Family::Gpt2,
        false,
        false,
        false,
        false,
    ),
    (&["hunyuan"], Family::Qwen2, false, false, false, false),
    (&["solar-open"], Family::Qwen2, false, false, false, false),
    (&["mellum2"], Family::Starcoder, true, false, false, false),
];

impl PreConfig {
    /// The configuration for a `tokenizer.ggml.pre` value, or `None` if plumb does not know it.
    pub fn from_name(name: &str) -> Option<PreConfig> {
        PRE_TYPES
            .iter()
            .find(|(names, ..)| names.contains(&name))
            .map(
                |&(_, family, clean_spaces, ignore_merges, add_bos, no_default_bos)| PreConfig {
                    family,
                    clean_spaces,
                    ignore_merges,
                    add_bos,
                    no_default_bos,
                },
            )
    }

    /// Splits `cpts` into words; each word is a range of code point indices, in order,
    /// covering everything.
    pub fn split(&self, cpts: &[u32], words: &mut Vec<(usize, usize)>) {
        let mut flags: Vec<CharFlags> = Vec::new();
        let mut collapsed: Vec<u8> = Vec::new();
        let mut next = Vec::new();
        words.clear();
        if cpts.is_empty() {
            return;
        }
        words.push((0, cpts.len()));
        for rule in self.family.rules() {
            if rule.needs_flags() && flags.is_empty() {
                flags.extend(cpts.iter().map(|&c| unicode::flags(c)));
            }
            if rule.needs_collapsed() && collapsed.is_empty() {
                collapsed.extend(cpts.iter().map(|&c| unicode::collapsed(c)));
            }
            next.clear();
            let text = rules::Text {
                cpts,
                flags: &flags,
                collapsed: &collapsed,
            };
            for &(start, end) in words.iter() {
                rule.split(&text, start, end, &mut next);
            }
            std::mem::swap(words, &mut next);
        }
    }
}

/// Every `tokenizer.ggml.pre` value plumb accepts for byte-level BPE vocabularies.
pub fn known_pre_types() -> Vec<&'static str> {
    PRE_TYPES
        .iter()
        .flat_map(|(names, ..)| names.iter().copied())
        .collect()
}
