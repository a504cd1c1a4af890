//! Python's `json.dumps` for template values, which is what Hugging Face's `tojson` filter
//! is: `", "` and `": "` separators, no HTML escaping, non-ASCII kept unless asked,
//! floats written as Python writes them.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind};

pub(super) struct Options {
    /// The indentation per level; `None` writes everything on one line.
    pub indent: Option<String>,
    pub ensure_ascii: bool,
    pub sort_keys: bool,
    /// `(item separator, key separator)`.
    pub separators: Option<(String, String)>,
}

pub(super) fn dumps(value: &Value, options: &Options) -> Result<String, Error> {
    let (item_sep, key_sep) = match (&options.separators, &options.indent) {
        (Some((i, k)), _) => (i.clone(), k.clone()),
        (None, None) => (", ".to_owned(), ": ".to_owned()),
        (None, Some(_)) => (",".to_owned(), ": ".to_owned()),
    };
    let mut out = String::new();
    let writer = Writer {
        options,
        item_sep,
        key_sep,
    };
    writer.value(value, 0, &mut out)?;
    Ok(out)
}

struct Writer<'a> {
    options: &'a Options,
    item_sep: String,
    key_sep: String,
}

impl Writer<'_> {
    fn value(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), Error> {
        match v.kind() {
            ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
            ValueKind::Number => out.push_str(&python_float(f64::try_from(v.clone())?)),
            ValueKind::String => self.string(v.as_str().unwrap_or(""), out),
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v.try_iter()?.collect();
                self.container('[', ']', items.len(), depth, out, |i, out| {
                    self.value(&items[i], depth + 1, out)
                })?;
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v.try_iter()?.collect();
                if self.options.sort_keys {
                    keys.sort_by_key(|k| k.to_string());
                }
                self.container('{', '}', keys.len(), depth, out, |i, out| {
                    let key = &keys[i];
                    match key.as_str() {
                        Some(s) => self.string(s, out),
                        None => self.string(&key.to_string(), out),
                    }
                    out.push_str(&self.key_sep);
                    self.value(&v.get_item(key)?, depth + 1, out)
                })?;
            }
            _ => {
                return Err(Error::new(
                    ErrorKind::BadSerialization,
                    format!("tojson: cannot serialize {} value", v.kind()),
                ));
            }
        }
        Ok(())
    }

    fn container(
        &self,
        open: char,
        close: char,
        len: usize,
        depth: usize,
        out: &mut String,
        mut item: impl FnMut(usize, &mut String) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            if let Some(indent) = &self.options.indent {
                out.push('\n');
                out.push_str(&indent.repeat(depth + 1));
            }
            item(i, out)?;
        }
        if let Some(indent) = &self.options.indent {
            out.push('\n');
            out.push_str(&indent.repeat(depth));
        }
        out.push(close);
        Ok(())
    }

    fn string(&self, s: &str, out: &mut String) {
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
                c if self.options.ensure_ascii && (c as u32) > 0x7E => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// Python's `repr` of a float, as `json.dumps` writes it: the shortest round-trip digits,
/// in positional notation for exponents from -4 to 15 and scientific notation otherwise.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned();
    }
    let scientific = format!("{f:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("{:e} always has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e} exponent is an integer");
    if (-4..16).contains(&exponent) {
        let mut s = f.to_string();
        if !s.contains('.') {
            s.push_str(".0");
        }
        s
    } else {
        format!(
            "{mantissa}e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(v: serde_json::Value, indent: Option<&str>) -> String {
        let options = Options {
            indent: indent.map(str::to_owned),
            ensure_ascii: false,
            sort_keys: false,
            separators: None,
        };
        dumps(&Value::from_serialize(&v), &options).unwrap()
    }

    #[test]
    fn matches_python_json_dumps() {
        assert_eq!(
            dump(
                serde_json::json!({"a": [1, 2.5, null, true], "b": "é\"<\n"}),
                None
            ),
            r#"{"a": [1, 2.5, null, true], "b": "é\"<\n"}"#
        );
        assert_eq!(
            dump(serde_json::json!({"a": [1], "b": {}}), Some("  ")),
            "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}"
        );
        assert_eq!(python_float(1e20), "1e+20");
        assert_eq!(python_float(1.5e-5), "1.5e-05");
        assert_eq!(python_float(100.0), "100.0");
        assert_eq!(python_float(0.0001), "0.0001");
    }
}
