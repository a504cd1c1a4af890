//! Chat templates: the golden chat prompt of every shipped model, Hugging Face's Jinja
//! behaviour (expected outputs recorded from Jinja2 through llama-cpp-python's
//! `Jinja2ChatFormatter`, which sets Jinja up as Hugging Face does), and selection.

use plumb_gguf::GgufFile;
use plumb_tokenizer::{ChatMessage, ChatTemplate, ChatTemplateError, Tokenizer};

/// The prompt text recorded in `logits.gguf`, the ids of every recorded prompt, and the
/// text of each greedy continuation.
fn check_golden_chat(model: &str, model_path: &std::path::Path, logits: &std::path::Path) {
    let golden = GgufFile::open(logits).unwrap();
    let md = golden.metadata();
    let file = GgufFile::open(model_path).unwrap();
    let user = md.get_str("chat.user_message").unwrap();
    let how = md.get_str("chat.how").unwrap();
    let template = match ChatTemplate::from_gguf(file.metadata()).unwrap() {
        Some(t) => t,
        None => {
            assert!(
                how.contains("built-in template \"gemma\""),
                "{model}: {how}"
            );
            ChatTemplate::named("gemma").unwrap()
        }
    };
    let rendered = template
        .render(&[ChatMessage::new("user", user)], true)
        .unwrap();
    assert_eq!(rendered, md.get_str("chat.text").unwrap(), "{model}: {how}");

    let tok = Tokenizer::from_gguf(file.metadata()).unwrap();
    for prompt in md.get_str_array("golden.prompts").unwrap() {
        let text = md.get_str(&format!("{prompt}.text")).unwrap();
        let parse_special = md.get_bool(&format!("{prompt}.parse_special")).unwrap();
        let want: Vec<u32> = golden
            .tensor_bytes(&format!("{prompt}.tokens"))
            .unwrap()
            .chunks_exact(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()) as u32)
            .collect();
        assert_eq!(
            tok.encode(text, true, parse_special).unwrap(),
            want,
            "{model}: prompt {prompt}"
        );
    }
}

macro_rules! golden_chat_test {
    ($test:ident, $model:literal) => {
        #[test]
        fn $test() {
            let model = plumb_testutil::require_model!($model);
            let logits = plumb_testutil::testdata(concat!("golden/", $model, "/logits.gguf"));
            check_golden_chat($model, &model, &logits);
        }
    };
}

golden_chat_test!(smollm2_chat_prompt, "smollm2-135m");
golden_chat_test!(gemma3_chat_prompt, "gemma3-270m");
golden_chat_test!(qwen25_coder_chat_prompt, "qwen2.5-coder-0.5b");

/// Qwen2.5's template with tools, a tool call and a tool response: `tools` passed through,
/// `tojson` of nested objects with their key order, loops and whitespace control.
#[test]
fn qwen_template_with_tools() {
    let model = plumb_testutil::require_model!("qwen2.5-coder-0.5b");
    let file = GgufFile::open(model).unwrap();
    let template = ChatTemplate::from_gguf(file.metadata()).unwrap().unwrap();
    let messages: serde_json::Value = serde_json::from_str(MESSAGES).unwrap();
    let tools: serde_json::Value = serde_json::from_str(TOOLS).unwrap();
    assert_eq!(
        template.render_json(&messages, true, Some(&tools)).unwrap(),
        QWEN_WITH_TOOLS
    );
}

const MESSAGES: &str = r#"[{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}, {"role": "tool", "content": "18°C, sunny"}, {"role": "assistant", "content": "18°C and sunny."}, {"role": "user", "content": "Thanks"}]"#;
const TOOLS: &str = r#"[{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]"#;
const QWEN_WITH_TOOLS: &str = "<|im_start|>system\nBe terse.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather in a city\", \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18°C, sunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n18°C and sunny.<|im_end|>\n<|im_start|>user\nThanks<|im_end|>\n<|im_start|>assistant\n";

/// trim_blocks/lstrip_blocks, `-` markers, comments, `namespace`, `break`, `tojson` with
/// indent, Python string methods, `raise_exception`, and `{% generation %}`.
#[test]
fn jinja_features_render_as_in_hugging_face() {
    let template = ChatTemplate::from_source(CUSTOM, "test")
        .unwrap()
        .with_special_tokens("<s>", "</s>");
    let messages = [
        ChatMessage::new("user", "  Hi there  "),
        ChatMessage::new("assistant", "Hello!"),
    ];
    assert_eq!(template.render(&messages, true).unwrap(), CUSTOM_OUT);

    let err = template
        .render(&[ChatMessage::new("system", "x")], true)
        .unwrap_err();
    assert!(matches!(err, ChatTemplateError::Render { .. }), "{err}");
    assert!(err.to_string().contains("bad role system"), "{err}");
}

const CUSTOM: &str = "{%- set ns = namespace(n=0) -%}\n{{ bos_token }}\n{% for m in messages %}\n  {% if m.role not in ['user', 'assistant'] %}{{ raise_exception('bad role ' + m.role) }}{% endif %}\n  {% if loop.index0 > 5 %}{% break %}{% endif %}\n  {%- set ns.n = ns.n + 1 %}\n  <{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>  {# comment #}\n{% endfor %}\n{{ messages | tojson(indent=2) }}\n{{ {'k': [1, 2.5, none, true], 'é': '\"q\"'} | tojson }}\ncount={{ ns.n }} {{ messages[0].content.strip().upper() }} {{ 'a,b'.split(',') | length }}\n{% generation %}gen{% endgeneration %}\n{%- if add_generation_prompt %}[assistant]{% endif %}\n";
const CUSTOM_OUT: &str = "<s>\n  <user>Hi there</user>    <assistant>Hello!</assistant>  [\n  {\n    \"role\": \"user\",\n    \"content\": \"  Hi there  \"\n  },\n  {\n    \"role\": \"assistant\",\n    \"content\": \"Hello!\"\n  }\n]\n{\"k\": [1, 2.5, null, true], \"é\": \"\\\"q\\\"\"}\ncount=2 HI THERE 2\ngen[assistant]";

#[test]
fn template_selection() {
    for name in plumb_tokenizer::BUILTIN_TEMPLATES {
        let t = ChatTemplate::select(name).unwrap();
        assert!(t.source().is_none());
        assert!(!t
            .render(&[ChatMessage::new("user", "hi")], true)
            .unwrap()
            .is_empty());
    }
    let err = ChatTemplate::select("no-such-template")
        .unwrap_err()
        .to_string();
    assert!(err.contains("chatml") && err.contains("zephyr"), "{err}");

    let dir = std::env::temp_dir().join(format!("plumb-chat-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.jinja");
    std::fs::write(
        &path,
        "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}",
    )
    .unwrap();
    let t = ChatTemplate::select(path.to_str().unwrap()).unwrap();
    assert_eq!(
        t.render(&[ChatMessage::new("user", "hi")], false).unwrap(),
        "[user] hi\n"
    );
    std::fs::write(&path, "{% for m in messages %}").unwrap();
    let err = ChatTemplate::from_file(&path).err().unwrap();
    assert!(matches!(err, ChatTemplateError::Syntax { .. }), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();

    let strftime = ChatTemplate::from_source("{{ strftime_now('%Y') }}", "test").unwrap();
    let year = strftime.render(&[], false).unwrap();
    assert!(
        year.len() == 4 && year.chars().all(|c| c.is_ascii_digit()),
        "{year}"
    );
}
