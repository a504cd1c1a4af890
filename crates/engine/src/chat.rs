//! A multi-turn chat: the conversation, the model's chat template, and a [`Session`] whose
//! cache carries over from turn to turn. Each turn renders the whole conversation again;
//! the cache already holds everything up to the end of the last reply, so only the new
//! message is evaluated.

use std::ops::ControlFlow;

use plumb_model::{Architecture, Backend, Model};
use plumb_tokenizer::{ChatMessage, ChatTemplate, Tokenizer};
use serde::{Deserialize, Serialize};

use crate::generate::{GenerateOptions, Generation, Progress, Session, Turn};
use crate::sampling::Sampler;
use crate::EngineError;

/// The chat template for `model`: `name_or_path` (a built-in name or a Jinja file) when
/// given, else the file's own.
pub fn chat_template<B: Backend>(
    model: &Model<B>,
    name_or_path: Option<&str>,
) -> Result<ChatTemplate, EngineError> {
    if let Some(name) = name_or_path {
        return Ok(ChatTemplate::select(name)?);
    }
    match ChatTemplate::from_gguf(model.metadata())? {
        Some(template) => Ok(template),
        // Gemma GGUFs often come without a template; llama.cpp then detects Gemma and uses
        // its built-in one.
        None if model.hparams().architecture == Architecture::Gemma3 => {
            Ok(ChatTemplate::named("gemma")?)
        }
        None => Err(EngineError::NoChatTemplate),
    }
}

/// The tokens of a conversation rendered with `template`, ending with the opening of the
/// assistant's turn. Control tokens written by the template become those tokens, and BOS is
/// added unless the template writes it.
pub fn conversation_tokens(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
) -> Result<Vec<u32>, EngineError> {
    let text = template.render(messages, true)?;
    let writes_bos = tokenizer
        .bos_id()
        .and_then(|id| tokenizer.token_text(id))
        .is_some_and(|bos| !bos.is_empty() && text.starts_with(bos));
    Ok(tokenizer.encode(&text, !writes_bos, true)?)
}

/// A conversation as `/save` writes it and `/load` reads it:
/// `{"messages": [{"role": "user", "content": "…"}, …]}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transcript {
    pub messages: Vec<TranscriptMessage>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TranscriptMessage {
    pub role: String,
    pub content: String,
}

impl Transcript {
    pub fn new(messages: &[ChatMessage]) -> Self {
        Transcript {
            messages: messages
                .iter()
                .map(|m| TranscriptMessage {
                    role: m.role.clone(),
                    content: m.content.clone(),
                })
                .collect(),
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a transcript serializes to JSON")
    }

    /// Reads a transcript; the error says what is wrong with the JSON.
    pub fn from_json(json: &str) -> Result<Transcript, serde_json::Error> {
        serde_json::from_str(json)
    }

    pub fn into_messages(self) -> Vec<ChatMessage> {
        self.messages
            .into_iter()
            .map(|m| ChatMessage::new(m.role, m.content))
            .collect()
    }
}

/// A chat with a model.
pub struct ChatSession<'m, B: Backend> {
    session: Session<'m, B>,
    template: ChatTemplate,
    messages: Vec<ChatMessage>,
}

impl<'m, B: Backend> ChatSession<'m, B> {
    pub fn new(session: Session<'m, B>, template: ChatTemplate) -> Self {
        ChatSession {
            session,
            template,
            messages: Vec::new(),
        }
    }

    pub fn session(&self) -> &Session<'m, B> {
        &self.session
    }

    pub fn messages(&self) -> &[ChatMessage] {
        &self.messages
    }

    /// Replaces the whole conversation (a loaded transcript).
    pub fn set_messages(&mut self, messages: Vec<ChatMessage>) {
        self.messages = messages;
    }

    /// The system message, if the conversation starts with one.
    pub fn system(&self) -> Option<&str> {
        self.messages
            .first()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
    }

    /// Sets, replaces or (with `None`) removes the system message.
    pub fn set_system(&mut self, text: Option<&str>) {
        if self.system().is_some() {
            self.messages.remove(0);
        }
        if let Some(text) = text {
            self.messages.insert(0, ChatMessage::new("system", text));
        }
    }

    /// Forgets the conversation but the system message. The cache keeps what it holds, so
    /// the next turn still reuses the system prompt.
    pub fn reset(&mut self) {
        self.messages.truncate(usize::from(self.system().is_some()));
    }

    /// Sends a user message and generates the reply, streaming it to `on_text`. The reply
    /// joins the conversation even when it was cut short; on an error the conversation is
    /// left as it was.
    pub fn send(
        &mut self,
        user: &str,
        sampler: &mut Sampler,
        options: &GenerateOptions,
        mut on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Generation, EngineError> {
        let mut turn = self.start(user, sampler, options)?;
        loop {
            match self.advance(turn, sampler, &mut on_text)? {
                Progress::Running(next) => turn = next,
                Progress::Done(generation) => return Ok(generation),
            }
        }
    }

    /// Sends a user message and starts the reply, which [`ChatSession::advance`] generates
    /// one forward pass at a time (see [`Session::start`]).
    pub fn start(
        &mut self,
        user: &str,
        sampler: &Sampler,
        options: &GenerateOptions,
    ) -> Result<Turn, EngineError> {
        self.messages.push(ChatMessage::new("user", user));
        let result = conversation_tokens(&self.template, self.session.tokenizer(), &self.messages)
            .and_then(|prompt| self.session.start(&prompt, sampler, options));
        if result.is_err() {
            self.messages.pop();
        }
        result
    }

    /// Runs one forward pass of the reply `turn` (see [`Session::advance`]). The finished
    /// reply joins the conversation, even when it was cut short; on an error the user's
    /// message is taken back.
    pub fn advance(
        &mut self,
        turn: Turn,
        sampler: &mut Sampler,
        on_text: impl FnMut(&str) -> ControlFlow<()>,
    ) -> Result<Progress, EngineError> {
        let progress = self.session.advance(turn, sampler, on_text);
        match &progress {
            Ok(Progress::Done(generation)) => self
                .messages
                .push(ChatMessage::new("assistant", generation.text.as_str())),
            Ok(Progress::Running(_)) => {}
            Err(_) => {
                self.messages.pop();
            }
        }
        progress
    }
}
