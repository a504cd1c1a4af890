//! The metadata key/value table, in file order, with typed accessors whose errors name the key.

use std::collections::HashMap;

use crate::{GgufError, Result, Value};

/// The key that names the architecture, and so the prefix of the model's own keys.
pub const ARCHITECTURE_KEY: &str = "general.architecture";
pub const ALIGNMENT_KEY: &str = "general.alignment";
pub const DEFAULT_ALIGNMENT: u64 = 32;

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

impl Metadata {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a key, failing if it is already present.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let key = key.into();
        if self.index.contains_key(&key) {
            return Err(GgufError::DuplicateKey(key));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value.into()));
        Ok(())
    }

    /// Sets a key, replacing any earlier value in place.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        let key = key.into();
        match self.index.get(&key) {
            Some(&i) => self.entries[i].1 = value.into(),
            None => {
                self.index.insert(key.clone(), self.entries.len());
                self.entries.push((key, value.into()));
            }
        }
    }

    pub fn remove(&mut self, key: &str) -> Option<Value> {
        let i = self.index.remove(key)?;
        let (_, value) = self.entries.remove(i);
        for slot in self.index.values_mut() {
            if *slot > i {
                *slot -= 1;
            }
        }
        Some(value)
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.entries[i].1)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn require(&self, key: &str) -> Result<&Value> {
        self.get(key)
            .ok_or_else(|| GgufError::MissingKey(key.to_owned()))
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str> {
        self.get_str(ARCHITECTURE_KEY)
    }

    /// The architecture-prefixed key: `arch_key("attention.head_count")` is
    /// `llama.attention.head_count` in a llama file.
    pub fn arch_key(&self, suffix: &str) -> Result<String> {
        Ok(format!("{}.{suffix}", self.architecture()?))
    }

    pub fn get_str(&self, key: &str) -> Result<&str> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| wrong_type(key, "a string", v))
    }

    pub fn get_bool(&self, key: &str) -> Result<bool> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| wrong_type(key, "a bool", v))
    }

    pub fn get_u32(&self, key: &str) -> Result<u32> {
        self.get_integer(key, "u32")
    }

    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.get_integer(key, "u64")
    }

    pub fn get_i64(&self, key: &str) -> Result<i64> {
        self.get_integer(key, "i64")
    }

    pub fn get_usize(&self, key: &str) -> Result<usize> {
        self.get_integer(key, "usize")
    }

    /// Any float or integer type, as f32 (converters disagree on f32 vs f64 for the same key).
    pub fn get_f32(&self, key: &str) -> Result<f32> {
        let v = self.require(key)?;
        v.as_f64()
            .map(|f| f as f32)
            .ok_or_else(|| wrong_type(key, "a number", v))
    }

    /// Any integer type whose value fits in `T`.
    fn get_integer<T: TryFrom<i128>>(&self, key: &str, expected: &'static str) -> Result<T> {
        let v = self.require(key)?;
        let i = v
            .as_integer()
            .ok_or_else(|| wrong_type(key, "an integer", v))?;
        T::try_from(i).map_err(|_| GgufError::OutOfRange {
            key: key.to_owned(),
            value: i.to_string(),
            expected,
        })
    }

    /// An array of strings, e.g. `tokenizer.ggml.tokens`.
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>> {
        let v = self.require(key)?;
        let arr = v
            .as_array()
            .ok_or_else(|| wrong_type(key, "an array of strings", v))?;
        arr.items
            .iter()
            .map(|item| {
                item.as_str()
                    .ok_or_else(|| wrong_type(key, "an array of strings", v))
            })
            .collect()
    }

    /// An array of numbers as f32, e.g. `tokenizer.ggml.scores`.
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>> {
        let v = self.require(key)?;
        let arr = v
            .as_array()
            .ok_or_else(|| wrong_type(key, "an array of numbers", v))?;
        arr.items
            .iter()
            .map(|item| {
                item.as_f64()
                    .map(|f| f as f32)
                    .ok_or_else(|| wrong_type(key, "an array of numbers", v))
            })
            .collect()
    }

    /// An array of integers that each fit in i64, e.g. `tokenizer.ggml.token_type`.
    pub fn get_i64_array(&self, key: &str) -> Result<Vec<i64>> {
        let v = self.require(key)?;
        let arr = v
            .as_array()
            .ok_or_else(|| wrong_type(key, "an array of integers", v))?;
        arr.items
            .iter()
            .map(|item| {
                item.as_integer()
                    .and_then(|i| i64::try_from(i).ok())
                    .ok_or_else(|| wrong_type(key, "an array of integers", v))
            })
            .collect()
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &Value) -> GgufError {
    GgufError::WrongType {
        key: key.to_owned(),
        expected,
        found: found.type_description(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_convert_integers_and_name_the_key() {
        let mut md = Metadata::new();
        md.insert("general.architecture", "llama").unwrap();
        md.insert("llama.block_count", Value::U64(30)).unwrap();
        md.insert("llama.neg", Value::I32(-1)).unwrap();
        md.insert("llama.rope.freq_base", Value::F64(1e4)).unwrap();
        assert_eq!(
            md.get_u32(&md.arch_key("block_count").unwrap()).unwrap(),
            30
        );
        assert_eq!(md.get_f32("llama.rope.freq_base").unwrap(), 1e4);
        let err = md.get_u32("llama.neg").unwrap_err().to_string();
        assert!(err.contains("llama.neg") && err.contains("u32"), "{err}");
        let err = md.get_str("llama.block_count").unwrap_err().to_string();
        assert!(
            err.contains("llama.block_count") && err.contains("u64"),
            "{err}"
        );
        let err = md.get_u32("llama.missing").unwrap_err().to_string();
        assert!(err.contains("llama.missing"), "{err}");
        assert!(matches!(
            md.insert("llama.neg", 1u32),
            Err(GgufError::DuplicateKey(k)) if k == "llama.neg"
        ));
    }

    #[test]
    fn remove_keeps_order_and_index() {
        let mut md = Metadata::new();
        for (i, k) in ["a", "b", "c"].iter().enumerate() {
            md.insert(*k, i as u32).unwrap();
        }
        md.remove("a");
        assert_eq!(md.iter().map(|(k, _)| k).collect::<Vec<_>>(), ["b", "c"]);
        assert_eq!(md.get_u32("c").unwrap(), 2);
    }
}
