//! llama.cpp's built-in chat templates (`llm_chat_apply_template` in its
//! `src/llama-chat.cpp`), for models whose file carries no template.

/// The names [`super::ChatTemplate::named`] accepts.
pub const BUILTIN_TEMPLATES: &[&str] = &["chatml", "llama2", "llama3", "gemma", "zephyr"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Builtin {
    ChatMl,
    Llama2,
    Llama3,
    Gemma,
    Zephyr,
}

impl Builtin {
    pub fn from_name(name: &str) -> Option<Builtin> {
        Some(match name {
            "chatml" => Builtin::ChatMl,
            "llama2" => Builtin::Llama2,
            "llama3" => Builtin::Llama3,
            "gemma" => Builtin::Gemma,
            "zephyr" => Builtin::Zephyr,
            _ => return None,
        })
    }

    /// Renders JSON messages; a missing role or content counts as empty, as llama.cpp's C
    /// API only ever sees strings.
    pub fn render(self, messages: &serde_json::Value, add_assistant: bool) -> String {
        let field = |m: &serde_json::Value, key: &str| {
            m.get(key).and_then(|v| v.as_str()).unwrap_or("").to_owned()
        };
        let chat: Vec<(String, String)> = messages
            .as_array()
            .map(|list| {
                list.iter()
                    .map(|m| (field(m, "role"), field(m, "content")))
                    .collect()
            })
            .unwrap_or_default();
        let mut out = String::new();
        match self {
            Builtin::ChatMl => {
                for (role, content) in &chat {
                    out += &format!("<|im_start|>{role}\n{content}<|im_end|>\n");
                }
                if add_assistant {
                    out += "<|im_start|>assistant\n";
                }
            }
            Builtin::Llama2 => {
                // No system-message support: a system message is written as plain text.
                let mut inside_turn = true;
                out += "[INST] ";
                for (role, content) in &chat {
                    if !inside_turn {
                        inside_turn = true;
                        out += "[INST] ";
                    }
                    match role.as_str() {
                        "system" => out += &format!("{content}\n"),
                        "user" => out += &format!("{content} [/INST]"),
                        _ => {
                            out += &format!("{content}</s>");
                            inside_turn = false;
                        }
                    }
                }
            }
            Builtin::Llama3 => {
                for (role, content) in &chat {
                    out += &format!(
                        "<|start_header_id|>{role}<|end_header_id|>\n\n{}<|eot_id|>",
                        trim(content)
                    );
                }
                if add_assistant {
                    out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
                }
            }
            Builtin::Gemma => {
                // Gemma has no system role; a system message is merged into the next turn.
                let mut system = String::new();
                for (role, content) in &chat {
                    if role == "system" {
                        system += trim(content);
                        continue;
                    }
                    let role = if role == "assistant" {
                        "model"
                    } else {
                        role.as_str()
                    };
                    out += &format!("<start_of_turn>{role}\n");
                    if !system.is_empty() && role != "model" {
                        out += &format!("{system}\n\n");
                        system.clear();
                    }
                    out += &format!("{}<end_of_turn>\n", trim(content));
                }
                if add_assistant {
                    out += "<start_of_turn>model\n";
                }
            }
            Builtin::Zephyr => {
                for (role, content) in &chat {
                    out += &format!("<|{role}|>\n{content}<|endoftext|>\n");
                }
                if add_assistant {
                    out += "<|assistant|>\n";
                }
            }
        }
        out
    }
}

/// llama.cpp's `trim`: C `isspace` from both ends.
fn trim(s: &str) -> &str {
    s.trim_matches(|c: char| matches!(c, '\t' | '\n' | '\x0B' | '\x0C' | '\r' | ' '))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(b: Builtin, msgs: &[(&str, &str)], add: bool) -> String {
        let json: Vec<_> = msgs
            .iter()
            .map(|(r, c)| serde_json::json!({"role": r, "content": c}))
            .collect();
        b.render(&serde_json::Value::Array(json), add)
    }

    #[test]
    fn templates_match_llama_cpp_output() {
        let chat = [
            ("system", "Be brief."),
            ("user", " Hi "),
            ("assistant", "Hello"),
            ("user", "Bye"),
        ];
        assert_eq!(
            render(Builtin::ChatMl, &chat[1..2], true),
            "<|im_start|>user\n Hi <|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(
            render(Builtin::Llama2, &chat, false),
            "[INST] Be brief.\n Hi  [/INST]Hello</s>[INST] Bye [/INST]"
        );
        assert_eq!(
            render(Builtin::Gemma, &chat, true),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello<end_of_turn>\n\
             <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
        );
        assert_eq!(
            render(Builtin::Llama3, &chat[1..2], true),
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
        );
        assert_eq!(
            render(Builtin::Zephyr, &chat[1..2], true),
            "<|user|>\n Hi <|endoftext|>\n<|assistant|>\n"
        );
    }
}
