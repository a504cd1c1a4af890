//! Chat templates: turning a conversation into the prompt text a model was trained on.
//!
//! A GGUF file's `tokenizer.chat_template` is a Jinja template written for Hugging Face's
//! `apply_chat_template`; it is rendered with `minijinja` set up the way Hugging Face sets up
//! Jinja (see `jinja.rs`). Files without one can use a named template, written out in Rust
//! exactly as llama.cpp's built-in templates (see `builtin.rs`).

mod builtin;
mod jinja;
mod json;

use std::path::{Path, PathBuf};

use plumb_gguf::{GgufError, Metadata};
use serde::Serialize;

use builtin::Builtin;
pub use builtin::BUILTIN_TEMPLATES;

const KEY_TEMPLATE: &str = "tokenizer.chat_template";

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant` or `tool`.
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> ChatMessage {
        ChatMessage {
            role: role.into(),
            content: content.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    #[error(transparent)]
    Metadata(#[from] GgufError),
    #[error("unknown chat template {name:?}: not a file, and not one of the built-in templates {}", BUILTIN_TEMPLATES.join(", "))]
    UnknownName { name: String },
    #[error("cannot read chat template {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("chat template {origin} does not parse: {detail}")]
    Syntax { origin: String, detail: String },
    #[error("chat template {origin} failed to render: {detail}")]
    Render { origin: String, detail: String },
}

/// A chat template, ready to render conversations.
pub struct ChatTemplate {
    kind: Kind,
    /// Where the template came from, for error messages.
    origin: String,
    bos_token: String,
    eos_token: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Builtin(b) => format!("{b:?}"),
            Kind::Jinja(_) => "Jinja".to_owned(),
        };
        f.debug_struct("ChatTemplate")
            .field("kind", &kind)
            .field("origin", &self.origin)
            .finish()
    }
}

enum Kind {
    Builtin(Builtin),
    Jinja(Box<jinja::JinjaTemplate>),
}

impl ChatTemplate {
    /// The file's `tokenizer.chat_template`, with `bos_token` and `eos_token` taken from its
    /// vocabulary; `None` when the file has no template (plain completion still works).
    pub fn from_gguf(metadata: &Metadata) -> Result<Option<ChatTemplate>, ChatTemplateError> {
        if !metadata.contains(KEY_TEMPLATE) {
            return Ok(None);
        }
        let source = metadata.get_str(KEY_TEMPLATE)?;
        let (bos, eos) = crate::vocab::bos_eos_texts(metadata);
        Ok(Some(
            ChatTemplate::from_source(source, KEY_TEMPLATE)?.with_special_tokens(bos, eos),
        ))
    }

    /// One of llama.cpp's built-in templates by name: `chatml`, `llama2`, `llama3`,
    /// `gemma`, `zephyr`.
    pub fn named(name: &str) -> Result<ChatTemplate, ChatTemplateError> {
        let builtin = Builtin::from_name(name).ok_or_else(|| ChatTemplateError::UnknownName {
            name: name.to_owned(),
        })?;
        Ok(ChatTemplate {
            kind: Kind::Builtin(builtin),
            origin: format!("{name:?}"),
            bos_token: String::new(),
            eos_token: String::new(),
        })
    }

    /// A Jinja template read from a file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<ChatTemplate, ChatTemplateError> {
        let path = path.as_ref();
        let source = std::fs::read_to_string(path).map_err(|source| ChatTemplateError::Io {
            path: path.to_owned(),
            source,
        })?;
        ChatTemplate::from_source(&source, &path.display().to_string())
    }

    /// A Jinja template from its text; `origin` names it in error messages.
    pub fn from_source(source: &str, origin: &str) -> Result<ChatTemplate, ChatTemplateError> {
        let template =
            jinja::JinjaTemplate::new(source).map_err(|e| ChatTemplateError::Syntax {
                origin: origin.to_owned(),
                detail: jinja::describe(&e),
            })?;
        Ok(ChatTemplate {
            kind: Kind::Jinja(Box::new(template)),
            origin: origin.to_owned(),
            bos_token: String::new(),
            eos_token: String::new(),
        })
    }

    /// What `--chat-template` takes: a built-in name, else a path to a Jinja file.
    pub fn select(name_or_path: &str) -> Result<ChatTemplate, ChatTemplateError> {
        if Builtin::from_name(name_or_path).is_some() {
            return ChatTemplate::named(name_or_path);
        }
        let path = Path::new(name_or_path);
        if path.is_file() {
            return ChatTemplate::from_file(path);
        }
        Err(ChatTemplateError::UnknownName {
            name: name_or_path.to_owned(),
        })
    }

    /// Sets the `bos_token` and `eos_token` strings a Jinja template sees.
    pub fn with_special_tokens(
        mut self,
        bos_token: impl Into<String>,
        eos_token: impl Into<String>,
    ) -> ChatTemplate {
        self.bos_token = bos_token.into();
        self.eos_token = eos_token.into();
        self
    }

    /// Renders a conversation. With `add_generation_prompt`, the prompt ends with the
    /// opening of the assistant's turn.
    pub fn render(
        &self,
        messages: &[ChatMessage],
        add_generation_prompt: bool,
    ) -> Result<String, ChatTemplateError> {
        let messages = serde_json::to_value(messages).expect("chat messages serialize to JSON");
        self.render_json(&messages, add_generation_prompt, None)
    }

    /// Renders messages given as JSON (a list of objects with at least `role` and
    /// `content`, and whatever else the template reads, such as `tool_calls`). `tools` is
    /// passed to the template as it is.
    ///
    /// JSON objects keep `serde_json`'s key order, which is sorted unless the build enables
    /// its `preserve_order` feature; Python keeps insertion order, so `tojson` of a tool
    /// definition can order keys differently from Hugging Face.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        add_generation_prompt: bool,
        tools: Option<&serde_json::Value>,
    ) -> Result<String, ChatTemplateError> {
        let rendered = match &self.kind {
            Kind::Builtin(builtin) => Ok(builtin.render(messages, add_generation_prompt)),
            Kind::Jinja(template) => template.render(jinja::Context {
                messages,
                add_generation_prompt,
                bos_token: &self.bos_token,
                eos_token: &self.eos_token,
                tools,
            }),
        };
        rendered.map_err(|e| ChatTemplateError::Render {
            origin: self.origin.clone(),
            detail: jinja::describe(&e),
        })
    }

    /// The Jinja source, for templates that have one.
    pub fn source(&self) -> Option<&str> {
        match &self.kind {
            Kind::Builtin(_) => None,
            Kind::Jinja(t) => Some(t.source()),
        }
    }
}
