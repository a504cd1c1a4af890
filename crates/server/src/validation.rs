//! Field-by-field validation of request bodies, by hand over `serde_json` values, so that
//! every error names its field and says what was expected and what came: `max_tokens must
//! be an integer from 1 to 4096, got -5`.
//!
//! The fields both generation endpoints share are read here into [`GenerationParams`];
//! each endpoint reads its own (messages, prompt, the shape of logprobs) with [`Fields`].

use plumb_engine::sampling::{random_seed, SamplingConfig};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Stop strings a request may give at most.
pub const MAX_STOP_STRINGS: usize = 16;
/// Characters a stop string may have at most.
pub const MAX_STOP_CHARS: usize = 256;
/// `logit_bias` entries a request may give at most.
pub const MAX_LOGIT_BIAS: usize = 1024;
/// Most likely alternatives reported per token at most (OpenAI's limit).
pub const MAX_TOP_LOGPROBS: i64 = 20;

/// What bounds a request's values: the model and the server's flags.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    pub n_ctx: usize,
    pub n_vocab: usize,
    /// Choices a request may ask for at most (`--parallel`).
    pub n_parallel: usize,
}

/// The server's defaults for what a request leaves out (`--temp`, `--seed`, `-n`).
#[derive(Debug, Clone, PartialEq)]
pub struct Defaults {
    pub temperature: f32,
    /// `None`: a random seed per request.
    pub seed: Option<u32>,
    /// `None`: until the model ends the text or the context is full.
    pub max_tokens: Option<usize>,
}

/// The fields both generation endpoints share, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// The `model` the client named, echoed in responses.
    pub model: Option<String>,
    pub sampling: SamplingConfig,
    pub max_tokens: usize,
    pub stop: Vec<String>,
    pub n: usize,
    pub ignore_eos: bool,
    pub stream: bool,
    /// `stream_options.include_usage`.
    pub include_usage: bool,
}

/// A JSON object's fields, read with checks. A field that is absent or `null` reads as
/// `None`, as OpenAI's API treats it.
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    /// The path of this object in the request (`messages[2].`), for `param`.
    prefix: String,
}

impl<'a> Fields<'a> {
    pub fn new(map: &'a Map<String, Value>) -> Fields<'a> {
        Fields {
            map,
            prefix: String::new(),
        }
    }

    /// The fields of `value`, which must be an object, at `path` in the request.
    pub fn nested(value: &'a Value, path: &str) -> Result<Fields<'a>, ApiError> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                prefix: format!("{path}."),
            }),
            other => Err(expected(path, "an object", other)),
        }
    }

    /// The full path of a field, for messages and `param`.
    pub fn path(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    pub fn get(&self, name: &str) -> Option<&'a Value> {
        self.map.get(name).filter(|v| !v.is_null())
    }

    pub fn bool(&self, name: &str) -> Result<Option<bool>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(expected(&self.path(name), "true or false", other)),
        }
    }

    pub fn str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(expected(&self.path(name), "a string", other)),
        }
    }

    /// An integer in `lo..=hi`.
    pub fn int(&self, name: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        self.get(name)
            .map(|v| integer_in(v, &self.path(name), lo, hi))
            .transpose()
    }

    /// A number in `lo..=hi`.
    pub fn number(&self, name: &str, lo: f64, hi: f64) -> Result<Option<f64>, ApiError> {
        match self.get(name) {
            None => Ok(None),
            Some(v) => match v.as_f64() {
                Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
                _ => Err(expected(
                    &self.path(name),
                    &format!("a number from {lo} to {hi}"),
                    v,
                )),
            },
        }
    }
}

/// An integer in `lo..=hi`; an integral float (`5.0`) counts.
pub fn integer_in(value: &Value, path: &str, lo: i64, hi: i64) -> Result<i64, ApiError> {
    let n = match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|x| x.fract() == 0.0 && x.abs() < 9e15)
                .map(|x| x as i64)
        }),
        _ => None,
    };
    match n {
        Some(n) if (lo..=hi).contains(&n) => Ok(n),
        _ => Err(expected(
            path,
            &format!("an integer from {lo} to {hi}"),
            value,
        )),
    }
}

/// `{path} must be {what}, got {value}`.
pub fn expected(path: &str, what: &str, got: &Value) -> ApiError {
    ApiError::invalid(
        path,
        format!("{path} must be {what}, got {}", describe(got)),
    )
}

/// A value for a message: short values as written, long ones by their kind.
pub fn describe(value: &Value) -> String {
    const SHORT: usize = 40;
    let text = value.to_string();
    if text.len() <= SHORT {
        return text;
    }
    match value {
        Value::String(s) => format!("a string of {} characters", s.chars().count()),
        Value::Array(a) => format!("an array of {} elements", a.len()),
        Value::Object(o) => format!("an object with {} fields", o.len()),
        _ => text.chars().take(SHORT).collect(),
    }
}

/// Reads the fields both generation endpoints share.
pub fn generation_params(
    fields: &Fields,
    limits: &Limits,
    defaults: &Defaults,
) -> Result<GenerationParams, ApiError> {
    let n_ctx = i64::try_from(limits.n_ctx).unwrap_or(i64::MAX);
    let max_tokens = match (
        fields.int("max_completion_tokens", 1, n_ctx)?,
        fields.int("max_tokens", 1, n_ctx)?,
        n_predict(fields, n_ctx)?,
    ) {
        (Some(n), _, _) | (None, Some(n), _) | (None, None, Some(Some(n))) => n as usize,
        (None, None, Some(None)) => limits.n_ctx,
        (None, None, None) => defaults.max_tokens.unwrap_or(limits.n_ctx),
    };
    let stream = fields.bool("stream")?.unwrap_or(false);
    let include_usage = match fields.get("stream_options") {
        None => false,
        Some(_) if !stream => {
            return Err(ApiError::invalid(
                "stream_options",
                "stream_options is only allowed when stream is true",
            ))
        }
        Some(options) => Fields::nested(options, "stream_options")?
            .bool("include_usage")?
            .unwrap_or(false),
    };
    let parallel = i64::try_from(limits.n_parallel).unwrap_or(i64::MAX);
    let n = fields.int("n", 1, parallel)?.unwrap_or(1) as usize;
    Ok(GenerationParams {
        model: fields.str("model")?.map(str::to_owned),
        sampling: sampling(fields, limits, defaults)?,
        max_tokens,
        stop: stop_strings(fields)?,
        n,
        ignore_eos: fields.bool("ignore_eos")?.unwrap_or(false),
        stream,
        include_usage,
    })
}

/// llama-server's `n_predict`: `Some(None)` for -1, no limit.
fn n_predict(fields: &Fields, n_ctx: i64) -> Result<Option<Option<i64>>, ApiError> {
    match fields.get("n_predict") {
        None => Ok(None),
        Some(v) if v.as_i64() == Some(-1) => Ok(Some(None)),
        Some(v) => integer_in(v, "n_predict", 1, n_ctx)
            .map(Some)
            .map(Some)
            .map_err(|_| {
                expected(
                    "n_predict",
                    &format!("-1 (no limit) or an integer from 1 to {n_ctx}"),
                    v,
                )
            }),
    }
}

fn sampling(
    fields: &Fields,
    limits: &Limits,
    defaults: &Defaults,
) -> Result<SamplingConfig, ApiError> {
    let base = SamplingConfig::default();
    let f32_of = |x: Option<f64>, default: f32| x.map_or(default, |x| x as f32);
    let repeat_last_n = match fields.get("repeat_last_n") {
        Some(v) if v.as_i64() == Some(-1) => limits.n_ctx,
        _ => fields
            .int(
                "repeat_last_n",
                0,
                i64::try_from(limits.n_ctx).unwrap_or(i64::MAX),
            )?
            .map_or(base.repeat_last_n, |n| n as usize),
    };
    Ok(SamplingConfig {
        temperature: f32_of(
            fields.number("temperature", 0.0, 2.0)?,
            defaults.temperature,
        ),
        top_k: fields
            .int("top_k", -1, i64::from(u32::MAX))?
            .map_or(base.top_k, |k| k.max(0) as usize),
        top_p: f32_of(fields.number("top_p", 0.0, 1.0)?, base.top_p),
        min_p: f32_of(fields.number("min_p", 0.0, 1.0)?, base.min_p),
        presence_penalty: f32_of(fields.number("presence_penalty", -2.0, 2.0)?, 0.0),
        frequency_penalty: f32_of(fields.number("frequency_penalty", -2.0, 2.0)?, 0.0),
        repeat_penalty: f32_of(fields.number("repeat_penalty", 0.01, 10.0)?, 1.0),
        repeat_last_n,
        logit_bias: logit_bias(fields, limits.n_vocab)?,
        seed: seed(fields, defaults)?,
        ..base
    })
}

/// OpenAI's seed is any 64-bit integer, the sampler's is 32 bits: larger seeds are folded.
/// -1 asks for a random seed, as in llama-server.
fn seed(fields: &Fields, defaults: &Defaults) -> Result<u32, ApiError> {
    let Some(value) = fields.get("seed") else {
        return Ok(defaults.seed.unwrap_or_else(random_seed));
    };
    let bits = match value {
        Value::Number(n) if n.as_i64() == Some(-1) => return Ok(random_seed()),
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|i| i as u64)),
        _ => None,
    };
    bits.map(|b| (b ^ (b >> 32)) as u32).ok_or_else(|| {
        expected(
            "seed",
            "an integer that fits in 64 bits (-1 for a random seed)",
            value,
        )
    })
}

/// Refuses a list or object `field` of more than `max` `items`.
pub fn at_most(field: &str, len: usize, max: usize, items: &str) -> Result<(), ApiError> {
    if len > max {
        return Err(ApiError::invalid(
            field,
            format!("{field} holds {len} {items}; at most {max} are allowed"),
        ));
    }
    Ok(())
}

/// `stop`: a string or a list of strings. Empty strings are dropped: they would stop
/// before the first token.
fn stop_strings(fields: &Fields) -> Result<Vec<String>, ApiError> {
    let items: Vec<(String, &Value)> = match fields.get("stop") {
        None => return Ok(Vec::new()),
        Some(v @ Value::String(_)) => vec![("stop".to_owned(), v)],
        Some(Value::Array(list)) => {
            at_most("stop", list.len(), MAX_STOP_STRINGS, "strings")?;
            list.iter()
                .enumerate()
                .map(|(i, v)| (format!("stop[{i}]"), v))
                .collect()
        }
        Some(other) => return Err(expected("stop", "a string or a list of strings", other)),
    };
    let mut stop = Vec::with_capacity(items.len());
    for (path, value) in items {
        let Value::String(text) = value else {
            return Err(expected(&path, "a string", value));
        };
        if text.chars().count() > MAX_STOP_CHARS {
            return Err(ApiError::invalid(
                &path,
                format!("{path} is longer than {MAX_STOP_CHARS} characters"),
            ));
        }
        if !text.is_empty() {
            stop.push(text.clone());
        }
    }
    Ok(stop)
}

/// `logit_bias`: `{"token id": bias}` with biases from -100 to 100, as OpenAI takes it.
fn logit_bias(fields: &Fields, n_vocab: usize) -> Result<Vec<(u32, f32)>, ApiError> {
    let map = match fields.get("logit_bias") {
        None => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(other) => {
            return Err(expected(
                "logit_bias",
                "an object mapping token ids to biases",
                other,
            ))
        }
    };
    at_most("logit_bias", map.len(), MAX_LOGIT_BIAS, "entries")?;
    map.iter()
        .map(|(key, value)| {
            let path = format!("logit_bias[{key:?}]");
            let token = key
                .parse::<u32>()
                .ok()
                .filter(|&t| (t as usize) < n_vocab)
                .ok_or_else(|| {
                    ApiError::invalid(
                        &path,
                        format!(
                            "logit_bias key {} is not a token id of this model (0 to {})",
                            describe(&Value::String(key.clone())),
                            n_vocab.saturating_sub(1)
                        ),
                    )
                })?;
            match value.as_f64() {
                Some(bias) if (-100.0..=100.0).contains(&bias) => Ok((token, bias as f32)),
                _ => Err(expected(&path, "a number from -100 to 100", value)),
            }
        })
        .collect()
}

/// The number of most likely alternatives asked for: `top_logprobs` (chat) or `logprobs`
/// (completions).
pub fn top_logprobs(fields: &Fields, name: &str) -> Result<Option<usize>, ApiError> {
    Ok(fields.int(name, 0, MAX_TOP_LOGPROBS)?.map(|k| k as usize))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const LIMITS: Limits = Limits {
        n_ctx: 4096,
        n_vocab: 49152,
        n_parallel: 4,
    };
    const DEFAULTS: Defaults = Defaults {
        temperature: 0.8,
        seed: Some(7),
        max_tokens: None,
    };

    fn params(body: Value) -> Result<GenerationParams, ApiError> {
        let Value::Object(map) = body else { panic!() };
        generation_params(&Fields::new(&map), &LIMITS, &DEFAULTS)
    }

    /// The error's `param` and message.
    fn error(body: Value) -> (String, String) {
        let err = params(body).expect_err("the request is refused");
        assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
        (err.param.unwrap_or_default(), err.message)
    }

    #[test]
    fn defaults_come_from_the_server() {
        let p = params(json!({})).unwrap();
        assert_eq!(p.sampling.temperature, 0.8);
        assert_eq!(p.sampling.seed, 7);
        assert_eq!(p.max_tokens, 4096);
        assert_eq!(
            (p.n, p.stream, p.include_usage, p.ignore_eos),
            (1, false, false, false)
        );
        assert!(p.stop.is_empty() && p.sampling.logit_bias.is_empty());
    }

    #[test]
    fn reads_every_field() {
        let p = params(json!({
            "model": "m", "max_tokens": 5, "temperature": 0, "top_p": 0.5, "top_k": 3,
            "min_p": 0.1, "seed": 42, "stop": ["a", ""], "presence_penalty": 1.5,
            "frequency_penalty": -1, "logit_bias": {"15": -100, "16": 2.5}, "n": 2,
            "stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true,
            "repeat_penalty": 1.1, "unknown": [1, 2, 3], "user": "x"
        }))
        .unwrap();
        assert_eq!(p.model.as_deref(), Some("m"));
        assert_eq!(p.max_tokens, 5);
        let s = &p.sampling;
        assert_eq!(
            (s.temperature, s.top_p, s.top_k, s.min_p),
            (0.0, 0.5, 3, 0.1)
        );
        assert_eq!(s.seed, 42);
        assert_eq!((s.presence_penalty, s.frequency_penalty), (1.5, -1.0));
        assert_eq!(s.repeat_penalty, 1.1);
        assert_eq!(s.logit_bias, vec![(15, -100.0), (16, 2.5)]);
        assert_eq!(p.stop, vec!["a".to_owned()]);
        assert_eq!(
            (p.n, p.stream, p.include_usage, p.ignore_eos),
            (2, true, true, true)
        );
    }

    #[test]
    fn max_tokens_aliases() {
        assert_eq!(
            params(json!({"max_completion_tokens": 9, "max_tokens": 3}))
                .unwrap()
                .max_tokens,
            9
        );
        assert_eq!(params(json!({"n_predict": 3})).unwrap().max_tokens, 3);
        assert_eq!(params(json!({"n_predict": -1})).unwrap().max_tokens, 4096);
        assert_eq!(
            params(json!({"max_tokens": null})).unwrap().max_tokens,
            4096
        );
    }

    #[test]
    fn errors_name_the_field_and_the_value() {
        let cases = [
            (
                json!({"max_tokens": -5}),
                "max_tokens",
                "max_tokens must be an integer from 1 to 4096, got -5",
            ),
            (json!({"max_tokens": 0}), "max_tokens", "got 0"),
            (
                json!({"max_tokens": 2147483648u64}),
                "max_tokens",
                "got 2147483648",
            ),
            (json!({"max_tokens": "5"}), "max_tokens", "got \"5\""),
            (json!({"max_tokens": 1.5}), "max_tokens", "got 1.5"),
            (
                json!({"max_completion_tokens": []}),
                "max_completion_tokens",
                "got []",
            ),
            (json!({"n_predict": 0}), "n_predict", "-1 (no limit)"),
            (
                json!({"temperature": 1e300}),
                "temperature",
                "a number from 0 to 2",
            ),
            (json!({"temperature": -0.1}), "temperature", "got -0.1"),
            (json!({"temperature": "hot"}), "temperature", "got \"hot\""),
            (json!({"top_p": 1.5}), "top_p", "from 0 to 1"),
            (json!({"top_k": -2}), "top_k", "got -2"),
            (json!({"min_p": true}), "min_p", "got true"),
            (
                json!({"presence_penalty": 3}),
                "presence_penalty",
                "from -2 to 2",
            ),
            (
                json!({"frequency_penalty": {}}),
                "frequency_penalty",
                "got {}",
            ),
            (json!({"repeat_penalty": 0}), "repeat_penalty", "got 0"),
            (json!({"seed": 1.5}), "seed", "fits in 64 bits"),
            (
                json!({"seed": 18446744073709551616.0}),
                "seed",
                "fits in 64 bits",
            ),
            (json!({"seed": "1"}), "seed", "got \"1\""),
            (json!({"n": 0}), "n", "from 1 to 4"),
            (json!({"n": 5}), "n", "got 5"),
            (json!({"stream": "yes"}), "stream", "true or false"),
            (
                json!({"stream_options": {"include_usage": true}}),
                "stream_options",
                "only allowed when stream is true",
            ),
            (
                json!({"stream": true, "stream_options": 1}),
                "stream_options",
                "an object",
            ),
            (
                json!({"stream": true, "stream_options": {"include_usage": 1}}),
                "stream_options.include_usage",
                "true or false",
            ),
            (json!({"stop": 5}), "stop", "a string or a list"),
            (
                json!({"stop": ["a", 5]}),
                "stop[1]",
                "stop[1] must be a string, got 5",
            ),
            (json!({"stop": vec!["x"; 17]}), "stop", "at most 16"),
            (json!({"stop": "x".repeat(300)}), "stop", "longer than 256"),
            (json!({"logit_bias": [1]}), "logit_bias", "an object"),
            (
                json!({"logit_bias": {"49152": 1}}),
                "logit_bias[\"49152\"]",
                "not a token id of this model (0 to 49151)",
            ),
            (
                json!({"logit_bias": {"-1": 1}}),
                "logit_bias[\"-1\"]",
                "not a token id",
            ),
            (
                json!({"logit_bias": {"abc": 1}}),
                "logit_bias[\"abc\"]",
                "not a token id",
            ),
            (
                json!({"logit_bias": {"1": 101}}),
                "logit_bias[\"1\"]",
                "from -100 to 100",
            ),
            (
                json!({"logit_bias": {"1": "x"}}),
                "logit_bias[\"1\"]",
                "got \"x\"",
            ),
            (json!({"ignore_eos": 1}), "ignore_eos", "true or false"),
            (json!({"model": 5}), "model", "a string"),
        ];
        for (body, param, message) in cases {
            let (got_param, got_message) = error(body.clone());
            assert_eq!(got_param, param, "{body}");
            assert!(got_message.contains(message), "{body}: {got_message}");
        }
    }

    #[test]
    fn seeds_are_64_bit() {
        assert_eq!(params(json!({"seed": 5})).unwrap().sampling.seed, 5);
        let big = params(json!({"seed": u64::MAX})).unwrap().sampling.seed;
        assert_eq!(big, 0);
        assert!(params(json!({"seed": i64::MIN})).is_ok());
        assert!(params(json!({"seed": -1})).is_ok());
    }

    #[test]
    fn long_values_are_described_not_echoed() {
        assert_eq!(
            describe(&json!("x".repeat(100))),
            "a string of 100 characters"
        );
        assert_eq!(describe(&json!(vec![1; 100])), "an array of 100 elements");
        assert_eq!(describe(&json!(-5)), "-5");
    }
}
