//! Cutting special tokens out of the text before the tokenizer proper runs, as llama.cpp's
//! `tokenizer_st_partition` does.
//!
//! llama.cpp takes the special tokens longest first and, for each, splits every remaining
//! piece of plain text at each of its occurrences, left to right. The order matters: a
//! longer token wins even where a shorter one starts earlier. plumb follows the same
//! procedure, but first finds which special tokens occur in the text at all with one pass
//! over a trie, so that a vocabulary with thousands of special tokens costs a few passes
//! over the text rather than thousands.

use memchr::memmem;

use crate::vocab::{attr, Vocab};

/// A piece of the input: plain text (a byte range of it) or a special token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fragment {
    Text(usize, usize),
    Token(u32),
}

/// A byte trie over the special tokens' texts.
pub(crate) struct SpecialMatcher {
    nodes: Vec<Node>,
}

#[derive(Default)]
struct Node {
    /// Child nodes by next byte, sorted by byte.
    edges: Vec<(u8, u32)>,
    /// The position in `Vocab::special_tokens` of the token ending here.
    token: Option<u32>,
}

impl SpecialMatcher {
    pub fn new(vocab: &Vocab) -> SpecialMatcher {
        let mut nodes = vec![Node::default()];
        for (rank, &id) in vocab.special_tokens.iter().enumerate() {
            let mut node = 0usize;
            for &b in vocab.texts[id as usize].as_bytes() {
                node = match nodes[node].edges.binary_search_by_key(&b, |e| e.0) {
                    Ok(k) => nodes[node].edges[k].1 as usize,
                    Err(k) => {
                        let child = nodes.len() as u32;
                        nodes[node].edges.insert(k, (b, child));
                        nodes.push(Node::default());
                        child as usize
                    }
                };
            }
            nodes[node].token = Some(rank as u32);
        }
        SpecialMatcher { nodes }
    }

    /// Marks in `present` (indexed like `Vocab::special_tokens`) every special token that
    /// occurs somewhere in `text`.
    fn find_present(&self, text: &[u8], present: &mut [bool]) {
        let root = &self.nodes[0];
        if root.edges.is_empty() {
            return;
        }
        let mut starts = [false; 256];
        for &(b, _) in &root.edges {
            starts[b as usize] = true;
        }
        for i in 0..text.len() {
            if !starts[text[i] as usize] {
                continue;
            }
            let mut node = root;
            for &b in &text[i..] {
                match node.edges.binary_search_by_key(&b, |e| e.0) {
                    Ok(k) => node = &self.nodes[node.edges[k].1 as usize],
                    Err(_) => break,
                }
                if let Some(rank) = node.token {
                    present[rank as usize] = true;
                }
            }
        }
    }
}

/// Splits `text` into plain text and special tokens. Control and unknown tokens are only
/// recognized with `parse_special`; user-defined tokens always are.
pub(crate) fn partition(
    vocab: &Vocab,
    matcher: &SpecialMatcher,
    text: &[u8],
    parse_special: bool,
) -> Vec<Fragment> {
    let mut fragments = Vec::new();
    if text.is_empty() {
        return fragments;
    }
    fragments.push(Fragment::Text(0, text.len()));
    let mut present = vec![false; vocab.special_tokens.len()];
    matcher.find_present(text, &mut present);

    let mut next = Vec::new();
    for (rank, &id) in vocab.special_tokens.iter().enumerate() {
        if !present[rank] || (!parse_special && vocab.has_attr(id, attr::CONTROL | attr::UNKNOWN)) {
            continue;
        }
        let needle = vocab.texts[id as usize].as_bytes();
        let finder = memmem::Finder::new(needle);
        let lstrip = vocab.has_attr(id, attr::LSTRIP);
        let rstrip = vocab.has_attr(id, attr::RSTRIP);
        next.clear();
        for fragment in fragments.drain(..) {
            let Fragment::Text(mut start, end) = fragment else {
                next.push(fragment);
                continue;
            };
            while let Some(found) = finder.find(&text[start..end]) {
                let at = start + found;
                let mut left_end = at;
                if lstrip {
                    while left_end > start && is_c_space(text[left_end - 1]) {
                        left_end -= 1;
                    }
                }
                if left_end > start {
                    next.push(Fragment::Text(start, left_end));
                }
                next.push(Fragment::Token(id));
                start = at + needle.len();
                if rstrip {
                    while start < end && is_c_space(text[start]) {
                        start += 1;
                    }
                }
            }
            if start < end {
                next.push(Fragment::Text(start, end));
            }
        }
        std::mem::swap(&mut fragments, &mut next);
    }
    fragments
}

/// C's `isspace`, which llama.cpp uses to strip around LSTRIP/RSTRIP tokens.
fn is_c_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | 0x0B | 0x0C | b'\r' | b' ')
}
