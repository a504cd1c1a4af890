//! What every handler shares: the engine, the tokenizer and chat template, and the server's
//! settings.

use std::path::PathBuf;
use std::sync::Arc;

use plumb_engine::SubmitError;
use plumb_tokenizer::{ChatTemplate, Tokenizer};

use crate::error::ApiError;
use crate::generation::Generator;
use crate::validation::{Defaults, Limits};

/// The server's settings, from `plumb serve`'s flags.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// The name `/v1/models` lists and answers carry: `--alias`, else the file's stem.
    pub model_name: String,
    /// Other names a request's `model` may use (the file name, its stem).
    pub other_names: Vec<String>,
    /// Requests must carry this key as `Authorization: Bearer KEY`.
    pub api_key: Option<String>,
    pub defaults: Defaults,
    /// `--web`: the chat page's directory, served beside the API.
    pub web_dir: Option<PathBuf>,
}

/// The state behind every handler.
pub struct AppState {
    pub engine: Arc<dyn Generator>,
    pub tokenizer: Arc<Tokenizer>,
    /// `None`: the model has no chat template, and chat requests are refused.
    pub template: Option<Arc<ChatTemplate>>,
    pub config: ServerConfig,
    /// When the server started, as `/v1/models` reports it.
    pub created: u64,
}

impl AppState {
    pub fn new(
        engine: Arc<dyn Generator>,
        tokenizer: Arc<Tokenizer>,
        template: Option<ChatTemplate>,
        config: ServerConfig,
    ) -> AppState {
        AppState {
            engine,
            tokenizer,
            template: template.map(Arc::new),
            config,
            created: crate::response::unix_time(),
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            n_ctx: self.engine.n_ctx(),
            n_vocab: self.engine.n_vocab(),
            n_parallel: self.engine.n_parallel(),
        }
    }

    /// The model name an answer carries: the one the client asked for, which must be one
    /// this server serves, or the server's own when it asked for none.
    pub fn model_name(&self, asked: Option<&str>) -> Result<String, ApiError> {
        let config = &self.config;
        match asked {
            None => Ok(config.model_name.clone()),
            Some(name)
                if name == config.model_name || config.other_names.iter().any(|n| n == name) =>
            {
                Ok(name.to_owned())
            }
            Some(name) => Err(ApiError::model_not_found(name, &config.model_name)),
        }
    }

    /// Refuses a prompt that gives no tokens or leaves no room to generate, as the engine would,
    /// but naming the request's field, and before any prompt of the request is submitted.
    pub fn check_prompt(&self, tokens: &[u32], field: &str) -> Result<(), ApiError> {
        let n_ctx = self.engine.n_ctx();
        if tokens.is_empty() {
            return Err(ApiError::invalid(field, format!("{field} gives no tokens")));
        }
        if tokens.len() >= n_ctx {
            let err = SubmitError::PromptTooLong {
                n_prompt: tokens.len(),
                n_ctx,
            };
            return Err(ApiError::context_length(field, format!("{field}: {err}")));
        }
        Ok(())
    }
}
