use plumb_model::ModelError;
use plumb_tokenizer::{ChatTemplateError, TokenizerError};

use crate::sampling::SamplingError;

/// Everything that can stop a generation or a chat turn.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error(transparent)]
    Template(#[from] ChatTemplateError),
    #[error(transparent)]
    Sampling(#[from] SamplingError),
    #[error("the prompt gives no tokens")]
    EmptyPrompt,
    #[error(
        "the prompt is {n_prompt} tokens, and a context of {n_ctx} has room for at most {} \
         prompt tokens plus one generated token (raise --ctx-size)",
        n_ctx.saturating_sub(1)
    )]
    PromptTooLong { n_prompt: usize, n_ctx: usize },
    #[error(
        "the request needs up to {need} KV cache blocks, and the pool has {total}; ask for \
         fewer tokens or choices"
    )]
    KvPool { need: usize, total: usize },
    #[error("cannot start the engine's thread: {0}")]
    Spawn(std::io::Error),
    #[error("the model has no chat template; pass one with --chat-template")]
    NoChatTemplate,
}
