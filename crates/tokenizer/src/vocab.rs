//! The vocabulary as llama.cpp builds it from GGUF metadata: token texts, scores and
//! attributes, the special token ids, and the flags that steer tokenization.
//!
//! llama.cpp does not take token types from the file as they are: it forces some
//! well-known texts to be control tokens, marks unused ones, derives the end-of-generation
//! set from texts, and adjusts a few models by name. All of that changes ids, so it is
//! reproduced here.

use plumb_gguf::Metadata;
use rustc_hash::{FxHashMap, FxHashSet};

use crate::pretokenize::{self, PreConfig};
use crate::TokenizerError;

/// Token attribute bits, as in llama.cpp's `llama_token_attr`.
pub(crate) mod attr {
    pub const UNKNOWN: u16 = 1 << 0;
    pub const UNUSED: u16 = 1 << 1;
    pub const NORMAL: u16 = 1 << 2;
    pub const CONTROL: u16 = 1 << 3;
    pub const USER_DEFINED: u16 = 1 << 4;
    pub const BYTE: u16 = 1 << 5;
    pub const LSTRIP: u16 = 1 << 7;
    pub const RSTRIP: u16 = 1 << 8;
}

/// The two tokenizer algorithms plumb implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VocabKind {
    /// `tokenizer.ggml.model = llama`: SentencePiece, merging by piece score.
    SentencePiece,
    /// `tokenizer.ggml.model = gpt2`: byte-level BPE with ranked merges.
    BytePairEncoding,
}

/// Choices a caller can make when building a tokenizer.
#[derive(Clone, Debug, Default)]
pub struct TokenizerOptions {
    /// Use this pre-tokenizer instead of `tokenizer.ggml.pre` (byte-level BPE only). Needed
    /// for files whose `pre` value plumb does not know.
    pub pre_override: Option<String>,
}

/// Special token ids; `None` where the vocabulary has no such token.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpecialIds {
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub eot: Option<u32>,
    pub eom: Option<u32>,
    pub unk: Option<u32>,
    pub sep: Option<u32>,
    pub pad: Option<u32>,
    pub mask: Option<u32>,
    pub fim_pre: Option<u32>,
    pub fim_suf: Option<u32>,
    pub fim_mid: Option<u32>,
    pub fim_pad: Option<u32>,
    pub fim_rep: Option<u32>,
    pub fim_sep: Option<u32>,
}

pub(crate) struct Vocab {
    pub kind: VocabKind,
    /// The pre-tokenizer's name and configuration (byte-level BPE only).
    pub pre: Option<(String, PreConfig)>,
    pub texts: Vec<String>,
    pub scores: Vec<f32>,
    pub attrs: Vec<u16>,
    pub ids: FxHashMap<Box<[u8]>, u32>,
    pub special: SpecialIds,
    pub add_bos: bool,
    pub add_eos: bool,
    pub add_space_prefix: bool,
    pub clean_spaces: bool,
    pub ignore_merges: bool,
    /// Control, user-defined and unknown tokens, longest text first: the tokens that are
    /// cut out of the text before the tokenizer proper runs.
    pub special_tokens: Vec<u32>,
    pub eog: FxHashSet<u32>,
}

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TYPES: &str = "tokenizer.ggml.token_type";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_PREFIX: &str = "tokenizer.ggml.add_space_prefix";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";

impl Vocab {
    pub fn from_metadata(
        md: &Metadata,
        options: &TokenizerOptions,
    ) -> Result<Vocab, TokenizerError> {
        let model = md.get_str(KEY_MODEL)?;
        let kind = match model {
            "llama" => VocabKind::SentencePiece,
            "gpt2" => VocabKind::BytePairEncoding,
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };

        let texts = read_tokens(md)?;
        let n = texts.len();
        let scores = match md.get(KEY_SCORES) {
            Some(_) => checked_len(md.get_f32_array(KEY_SCORES)?, KEY_SCORES, n)?,
            None => vec![0.0; n],
        };
        let mut attrs = match md.get(KEY_TYPES) {
            Some(_) => checked_len(md.get_i64_array(KEY_TYPES)?, KEY_TYPES, n)?
                .into_iter()
                .map(attr_of_type)
                .collect(),
            None => vec![attr::NORMAL; n],
        };
        let mut ids = FxHashMap::default();
        ids.reserve(n);
        for (i, text) in texts.iter().enumerate() {
            if let Some(first) = ids.insert(text.as_bytes().into(), i as u32) {
                return Err(TokenizerError::DuplicateToken {
                    text: text.clone(),
                    first,
                    second: i as u32,
                });
            }
        }

        let mut special = SpecialIds::default();
        let (mut add_bos, mut add_space_prefix, clean_spaces, ignore_merges, pre) = match kind {
            VocabKind::SentencePiece => {
                special.bos = Some(1);
                special.eos = Some(2);
                special.unk = Some(0);
                (true, true, false, false, None)
            }
            VocabKind::BytePairEncoding => {
                let (name, config) = pre_config(md, options)?;
                special.bos = (!config.no_default_bos).then_some(11);
                special.eos = Some(11);
                (
                    config.add_bos,
                    false,
                    config.clean_spaces,
                    config.ignore_merges,
                    Some((name, config)),
                )
            }
        };
        if md.contains(KEY_ADD_PREFIX) {
            add_space_prefix = md.get_bool(KEY_ADD_PREFIX)?;
        }
        read_special_ids(md, &mut special, n)?;

        let mut add_eos = false;
        if md.contains(KEY_ADD_BOS) {
            add_bos = md.get_bool(KEY_ADD_BOS)?;
        }
        if md.contains(KEY_ADD_EOS) {
            add_eos = md.get_bool(KEY_ADD_EOS)?;
        }
        if add_bos && special.bos.is_none() {
            return Err(TokenizerError::AddSpecialWithoutToken {
                add_key: KEY_ADD_BOS,
                id_key: KEY_BOS,
            });
        }
        if add_eos && special.eos.is_none() {
            return Err(TokenizerError::AddSpecialWithoutToken {
                add_key: KEY_ADD_EOS,
                id_key: KEY_EOS,
            });
        }

        detect_special_by_text(&texts, &mut attrs, &mut special);
        let eog = end_of_generation_set(&texts, &mut attrs, &special);
        let special_tokens = special_token_cache(&texts, &attrs);
        adjust_attrs_by_model_name(md, &ids, &special_tokens, &mut attrs);

        Ok(Vocab {
            kind,
            pre,
            texts,
            scores,
            attrs,
            ids,
            special,
            add_bos,
            add_eos,
            add_space_prefix,
            clean_spaces,
            ignore_merges,
            special_tokens,
            eog,
        })
    }

    pub fn n_tokens(&self) -> usize {
        self.texts.len()
    }

    pub fn id_of(&self, text: &[u8]) -> Option<u32> {
        self.ids.get(text).copied()
    }

    pub fn has_attr(&self, id: u32, bits: u16) -> bool {
        self.attrs[id as usize] & bits != 0
    }
}

fn read_tokens(md: &Metadata) -> Result<Vec<String>, TokenizerError> {
    Ok(md
        .get_str_array(KEY_TOKENS)?
        .into_iter()
        .enumerate()
        .map(|(i, t)| {
            if t.is_empty() {
                format!("[EMPTY_{i}]")
            } else {
                t.to_owned()
            }
        })
        .collect())
}

/// llama.cpp requires at least one entry per token and ignores any extra.
fn checked_len<T>(
    mut values: Vec<T>,
    key: &'static str,
    n: usize,
) -> Result<Vec<T>, TokenizerError> {
    if values.len() < n {
        return Err(TokenizerError::LengthMismatch {
            key,
            found: values.len(),
            expected: n,
        });
    }
    values.truncate(n);
    Ok(values)
}

/// `tokenizer.ggml.token_type` values (`llama_token_type`) to attribute bits.
fn attr_of_type(t: i64) -> u16 {
    match t {
        1 => attr::NORMAL,
        2 => attr::UNKNOWN,
        3 => attr::CONTROL,
        4 => attr::USER_DEFINED,
        5 => attr::UNUSED,
        6 => attr::BYTE,
        _ => 0,
    }
}

fn pre_config(
    md: &Metadata,
    options: &TokenizerOptions,
) -> Result<(String, PreConfig), TokenizerError> {
    if let Some(name) = &options.pre_override {
        return PreConfig::from_name(name)
            .map(|c| (name.clone(), c))
            .ok_or_else(|| TokenizerError::UnknownPreOverride {
                pre: name.clone(),
                known: pretokenize::known_pre_types(),
            });
    }
    let name = match md.get(KEY_PRE) {
        Some(_) => md.get_str(KEY_PRE)?,
        None => "",
    };
    if name.is_empty() {
        tracing::warn!(
            "{KEY_PRE} is missing; using the \"default\" pre-tokenizer as llama.cpp does"
        );
        let config = PreConfig::from_name("default").expect("\"default\" is a known pre-tokenizer");
        return Ok(("default".to_owned(), config));
    }
    PreConfig::from_name(name)
        .map(|c| (name.to_owned(), c))
        .ok_or_else(|| TokenizerError::UnknownPre {
            pre: name.to_owned(),
            known: pretokenize::known_pre_types(),
        })
}

/// Reads the special token ids over the model type's defaults. As in llama.cpp, a default
/// outside the vocabulary is dropped, and an id in the file outside it is ignored.
fn read_special_ids(
    md: &Metadata,
    special: &mut SpecialIds,
    n: usize,
) -> Result<(), TokenizerError> {
    type Slot = fn(&mut SpecialIds) -> &mut Option<u32>;
    let slots: [(&str, Slot); 17] = [
        (KEY_BOS, |s| &mut s.bos),
        (KEY_EOS, |s| &mut s.eos),
        ("tokenizer.ggml.eot_token_id", |s| &mut s.eot),
        ("tokenizer.ggml.eom_token_id", |s| &mut s.eom),
        ("tokenizer.ggml.unknown_token_id", |s| &mut s.unk),
        ("tokenizer.ggml.seperator_token_id", |s| &mut s.sep),
        ("tokenizer.ggml.padding_token_id", |s| &mut s.pad),
        ("tokenizer.ggml.mask_token_id", |s| &mut s.mask),
        ("tokenizer.ggml.fim_pre_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.fim_suf_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.fim_mid_token_id", |s| &mut s.fim_mid),
        ("tokenizer.ggml.fim_pad_token_id", |s| &mut s.fim_pad),
        ("tokenizer.ggml.fim_rep_token_id", |s| &mut s.fim_rep),
        ("tokenizer.ggml.fim_sep_token_id", |s| &mut s.fim_sep),
        // Deprecated names, read after the current ones as llama.cpp does.
        ("tokenizer.ggml.prefix_token_id", |s| &mut s.fim_pre),
        ("tokenizer.ggml.suffix_token_id", |s| &mut s.fim_suf),
        ("tokenizer.ggml.middle_token_id", |s| &mut s.fim_mid),
    ];
    for (key, slot_of) in slots {
        let slot = slot_of(special);
        if slot.is_some_and(|id| id as usize >= n) {
            tracing::warn!(
                "default special token {key} = {:?} is out of the vocabulary; disabling it",
                slot
            );
            *slot = None;
        }
        if !md.contains(key) {
            continue;
        }
        let id = md.get_u32(key)?;
        if (id as usize) < n {
            *slot = Some(id);
        } else {
            tracing::warn!(
                "{key} = {id} is out of the vocabulary ({n} tokens); keeping {:?}",
                slot
            );
        }
    }
    Ok(())
}

const EOT_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
];
const EOM_TEXTS: &[&str] = &["<|eom_id|>"];
const FIM_PRE_TEXTS: &[&str] = &[
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
];
const FIM_SUF_TEXTS: &[&str] = &[
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
];
const FIM_MID_TEXTS: &[&str] = &[
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
];
const FIM_PAD_TEXTS: &[&str] = &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS: &[&str] = &[
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
];
const FIM_SEP_TEXTS: &[&str] = &["<|file_sep|>"];

/// Texts that end generation whatever the file says.
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "[EOS]",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "<｜end▁of▁sentence｜>",
    "[e~[",
];

/// Fills unset EOT, EOM and FIM ids from well-known token texts, makes those tokens control
/// tokens, and marks control tokens named "unused" as unused.
///
/// llama.cpp walks a hash map, so when a vocabulary has several candidate texts for one
/// slot its choice depends on hash order; plumb takes the lowest id. The set of
/// end-of-generation tokens does not depend on that choice.
fn detect_special_by_text(texts: &[String], attrs: &mut [u16], special: &mut SpecialIds) {
    let slots: [(&mut Option<u32>, &[&str]); 8] = [
        (&mut special.eot, EOT_TEXTS),
        (&mut special.eom, EOM_TEXTS),
        (&mut special.fim_pre, FIM_PRE_TEXTS),
        (&mut special.fim_suf, FIM_SUF_TEXTS),
        (&mut special.fim_mid, FIM_MID_TEXTS),
        (&mut special.fim_pad, FIM_PAD_TEXTS),
        (&mut special.fim_rep, FIM_REP_TEXTS),
        (&mut special.fim_sep, FIM_SEP_TEXTS),
    ];
    for (slot, candidates) in slots {
        if slot.is_some() {
            continue;
        }
        if let Some(id) = texts.iter().position(|t| candidates.contains(&t.as_str())) {
            *slot = Some(id as u32);
            force_control(texts, attrs, id);
        }
    }
    for (text, a) in texts.iter().zip(attrs.iter_mut()) {
        if *a & attr::CONTROL != 0 && text.contains("unused") {
            *a |= attr::UNUSED;
        }
    }
}

fn force_control(texts: &[String], attrs: &mut [u16], id: usize) {
    if attrs[id] & attr::CONTROL == 0 {
        tracing::debug!("token {id} {:?} looks like a control token but is not typed as one; treating it as control", texts[id]);
        attrs[id] |= attr::CONTROL;
    }
}

/// The end-of-generation set: the FIM pad/repo/separator tokens, every token with a
/// well-known end text, and the EOS, EOT and EOM ids.
fn end_of_generation_set(
    texts: &[String],
    attrs: &mut [u16],
    special: &SpecialIds,
) -> FxHashSet<u32> {
    let mut eog = FxHashSet::default();
    eog.extend(
        [special.fim_pad, special.fim_rep, special.fim_sep]
            .into_iter()
            .flatten(),
    );
    for (id, text) in texts.iter().enumerate() {
        if EOG_TEXTS.contains(&text.as_str()) {
            eog.insert(id as u32);
            force_control(texts, attrs, id);
        }
    }
    // gpt-oss: these are always rendered.
    for (text, a) in texts.iter().zip(attrs.iter_mut()) {
        if matches!(
            text.as_str(),
            "<|channel|>" | "<|message|>" | "<|start|>" | "<|constrain|>"
        ) {
            *a = attr::USER_DEFINED;
        }
    }
    eog.extend(
        [special.eos, special.eot, special.eom]
            .into_iter()
            .flatten(),
    );

    let with_text =
        |eog: &FxHashSet<u32>, t: &str| eog.iter().copied().find(|&id| texts[id as usize] == t);
    // Harmony-style vocabularies (o200k, solar-open) use <|end|> between messages.
    let has = |eog: &FxHashSet<u32>, t: &str| with_text(eog, t).is_some();
    if let Some(end) = with_text(&eog, "<|end|>") {
        let call = has(&eog, "<|call|>") || has(&eog, "<|calls|>");
        if call && (has(&eog, "<|return|>") || has(&eog, "<|flush|>")) {
            eog.remove(&end);
            attrs[end as usize] = attr::USER_DEFINED;
        }
    }
    // Gemma 4 and PaddleOCR: </s> is an ordinary token there.
    if has(&eog, "<|tool_response>") {
        if let Some(s) = with_text(&eog, "</s>") {
            eog.remove(&s);
            attrs[s as usize] = attr::NORMAL;
        }
    }
    eog
}

fn special_token_cache(texts: &[String], attrs: &[u16]) -> Vec<u32> {
    let mut cache: Vec<u32> = (0..texts.len() as u32)
        .filter(|&id| {
            attrs[id as usize] & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0
        })
        .collect();
    // llama.cpp's sort is unstable among equal lengths; plumb keeps ids in order, which can
    // only matter where two equally long special tokens overlap in the text.
    cache.sort_by_key(|&id| std::cmp::Reverse(texts[id as usize].len()));
    cache
}

/// llama.cpp's per-model attribute fixes, keyed by model and pre-tokenizer names.
fn adjust_attrs_by_model_name(
    md: &Metadata,
    ids: &FxHashMap<Box<[u8]>, u32>,
    special_tokens: &[u32],
    attrs: &mut [u16],
) {
    let text = |key: &str| {
        md.get(key)
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .to_owned()
    };
    let name = text("general.name").to_lowercase();
    let pre = text(KEY_PRE);
    let arch = text("general.architecture");
    let set = |attrs: &mut [u16], token: &str, bit: u16, on: bool| {
        if let Some(&id) = ids.get(token.as_bytes()) {
            if on {
                attrs[id as usize] |= bit;
            } else {
                attrs[id as usize] &= !bit;
            }
        }
    };
    if ["jina-v2-de", "jina-v2-es", "jina-v2-code"]
        .iter()
        .any(|p| pre.contains(p))
        || ["nomic-bert-moe", "jina-bert-v3"]
            .iter()
            .any(|a| arch.contains(a))
    {
        set(attrs, "<mask>", attr::LSTRIP, true);
    } else if name.contains("phi-3") || name.contains("phi3") {
        for &id in special_tokens {
            attrs[id as usize] |= attr::RSTRIP;
        }
        set(attrs, "</s>", attr::RSTRIP, true);
        for token in ["<unk>", "<s>", "<|endoftext|>"] {
            set(attrs, token, attr::RSTRIP, false);
        }
    } else if name.contains("modern-bert") {
        set(attrs, "[MASK]", attr::LSTRIP, true);
    }
}

/// The texts of the BOS and EOS tokens as llama.cpp resolves their ids (model defaults,
/// then the file's ids), or empty strings where there is no such token. Chat templates
/// see these as `bos_token` and `eos_token`.
pub(crate) fn bos_eos_texts(md: &Metadata) -> (String, String) {
    let Ok(tokens) = md.get_str_array(KEY_TOKENS) else {
        return (String::new(), String::new());
    };
    let pre = md.get(KEY_PRE).and_then(|v| v.as_str()).unwrap_or("");
    let (mut bos, mut eos) = match md.get(KEY_MODEL).and_then(|v| v.as_str()) {
        Some("llama") => (Some(1), Some(2)),
        Some("gpt2") => (
            PreConfig::from_name(pre)
                .is_none_or(|c| !c.no_default_bos)
                .then_some(11),
            Some(11),
        ),
        _ => (None, None),
    };
    let text = |slot: &mut Option<u32>, key: &str| {
        if let Ok(id) = md.get_u32(key) {
            *slot = Some(id);
        }
        slot.and_then(|id| tokens.get(id as usize))
            .map(|t| t.to_string())
            .unwrap_or_default()
    };
    (text(&mut bos, KEY_BOS), text(&mut eos, KEY_EOS))
}
