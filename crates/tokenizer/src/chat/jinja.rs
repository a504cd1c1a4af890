//! Rendering Hugging Face chat templates with `minijinja`.
//!
//! Hugging Face renders with Jinja2 set to `trim_blocks` and `lstrip_blocks`, a `tojson`
//! filter that is plain `json.dumps` (no HTML escaping, non-ASCII kept), the globals
//! `raise_exception` and `strftime_now`, loop controls, and a `{% generation %}` tag that
//! only marks text. Templates also call Python string and dict methods (`.strip()`,
//! `.items()`), which `minijinja-contrib`'s pycompat layer provides.

use minijinja::value::{Kwargs, Value};
use minijinja::{Environment, Error, ErrorKind};

use super::json;

const NAME: &str = "chat_template";

pub(super) struct JinjaTemplate {
    env: Environment<'static>,
    source: String,
}

/// The variables a template sees.
pub(super) struct Context<'a> {
    pub messages: &'a serde_json::Value,
    pub add_generation_prompt: bool,
    pub bos_token: &'a str,
    pub eos_token: &'a str,
    pub tools: Option<&'a serde_json::Value>,
}

impl JinjaTemplate {
    pub fn new(source: &str) -> Result<JinjaTemplate, Error> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned(NAME, neutralize_generation_tags(source))?;
        Ok(JinjaTemplate {
            env,
            source: source.to_owned(),
        })
    }

    pub fn render(&self, ctx: Context) -> Result<String, Error> {
        let template = self.env.get_template(NAME)?;
        template.render(minijinja::context! {
            messages => Value::from_serialize(ctx.messages),
            add_generation_prompt => ctx.add_generation_prompt,
            bos_token => ctx.bos_token,
            eos_token => ctx.eos_token,
            tools => ctx.tools.map(Value::from_serialize).unwrap_or(Value::from(())),
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }
}

/// A minijinja error with its detail and the template location, on one line.
pub(super) fn describe(e: &Error) -> String {
    let mut text = e
        .detail()
        .map_or_else(|| e.kind().to_string(), str::to_owned);
    if let Some(line) = e.line() {
        text += &format!(" (line {line})");
    }
    text
}

/// Hugging Face's `{% generation %}...{% endgeneration %}` marks the assistant's text for
/// training masks and renders its body unchanged. minijinja has no such tag, so each is
/// rewritten into an always-true `if`, keeping its whitespace-control markers.
fn neutralize_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(open) = rest.find("{%") {
        out.push_str(&rest[..open]);
        let tag = &rest[open..];
        match rewrite_generation_tag(tag) {
            Some((replacement, consumed)) => {
                out.push_str(&replacement);
                rest = &tag[consumed..];
            }
            None => {
                out.push_str("{%");
                rest = &tag[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// For a tag at the start of `tag` that is `generation` or `endgeneration`, the
/// replacement and the length of the original tag.
fn rewrite_generation_tag(tag: &str) -> Option<(String, usize)> {
    let inner_start = 2 + usize::from(tag[2..].starts_with(['-', '+']));
    let open_marker = &tag[2..inner_start];
    let close = tag.find("%}")?;
    let body = &tag[inner_start..close];
    let (body, close_marker) = match body.trim_end().strip_suffix(['-', '+']) {
        Some(b) => (b, &body.trim_end()[b.len()..]),
        None => (body, ""),
    };
    let replacement = match body.trim() {
        "generation" => "if true",
        "endgeneration" => "endif",
        _ => return None,
    };
    Some((
        format!("{{%{open_marker} {replacement} {close_marker}%}}"),
        close + 2,
    ))
}

fn tojson(value: Value, kwargs: Kwargs) -> Result<Value, Error> {
    let options = json::Options {
        indent: match kwargs.get::<Option<Value>>("indent")? {
            Some(v) if v.is_integer() => Some(" ".repeat(v.as_i64().unwrap_or(0).max(0) as usize)),
            Some(v) if v.as_str().is_some() => v.as_str().map(str::to_owned),
            _ => None,
        },
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
        separators: kwargs
            .get::<Option<Vec<String>>>("separators")?
            .and_then(|s| match s.as_slice() {
                [item, key] => Some((item.clone(), key.clone())),
                _ => None,
            }),
    };
    kwargs.assert_all_used()?;
    json::dumps(&value, &options).map(Value::from_safe_string)
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(
        ErrorKind::InvalidOperation,
        format!("template raised an exception: {message}"),
    ))
}

fn strftime_now(format: String) -> Result<Value, Error> {
    use chrono::format::{Item, StrftimeItems};
    let items: Vec<Item> = StrftimeItems::new(&format).collect();
    if items.iter().any(|i| matches!(i, Item::Error)) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        ));
    }
    Ok(Value::from(
        chrono::Local::now()
            .format_with_items(items.into_iter())
            .to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_tags_keep_whitespace_control() {
        assert_eq!(
            neutralize_generation_tags("a{%- generation -%}b{% endgeneration %}c{% if x %}"),
            "a{%- if true -%}b{% endif %}c{% if x %}"
        );
    }

    #[test]
    fn strftime_now_rejects_bad_formats() {
        assert!(strftime_now("%Y-%m-%d".into()).is_ok());
        assert!(strftime_now("%Q".into()).is_err());
    }
}
