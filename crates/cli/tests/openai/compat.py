"""plumb serve through the official openai client: every endpoint, streamed and not, n = 2,
logprobs, errors and the API key. Run by crates/cli/tests/serve_openai.rs, which starts the
server and passes its address, key and model name, and what `plumb run --chat` answered to
the same messages at temperature 0, in the environment."""

import json
import os
import sys
import urllib.error
import urllib.request

import openai
from openai import OpenAI

BASE = os.environ["PLUMB_BASE_URL"]
KEY = os.environ["PLUMB_API_KEY"]
MODEL = os.environ["PLUMB_MODEL"]
SYSTEM = os.environ["PLUMB_SYSTEM"]
USER = os.environ["PLUMB_USER"]
EXPECTED = os.environ["PLUMB_EXPECTED_CHAT"]
MAX_TOKENS = int(os.environ["PLUMB_MAX_TOKENS"])

MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]
client = OpenAI(base_url=BASE + "/v1", api_key=KEY, max_retries=0, timeout=120)
checks = []


def check(name):
    def run(test):
        test()
        checks.append(name)
        print(f"ok: {name}", flush=True)

    return run


def raw(method, path, body=None, key=KEY):
    """A request outside the client: (status, parsed JSON or text)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(BASE + path, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode()
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def greedy_chat(**extra):
    return client.chat.completions.create(
        model=MODEL, messages=MESSAGES, temperature=0, max_tokens=MAX_TOKENS, **extra
    )


@check("models list")
def _():
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL], models


@check("chat at temperature 0 equals plumb run --chat")
def _():
    answer = greedy_chat()
    choice = answer.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == EXPECTED, (choice.message.content, EXPECTED)
    assert choice.finish_reason in ("stop", "length"), choice.finish_reason
    usage = answer.usage
    assert usage.prompt_tokens > 0 and usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert usage.prompt_tokens_details.cached_tokens >= 0
    assert answer.model == MODEL and answer.object == "chat.completion"


@check("a repeated prompt comes from the prefix cache")
def _():
    first = greedy_chat()
    second = greedy_chat()
    assert second.choices[0].message.content == first.choices[0].message.content
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert 0 < cached < second.usage.prompt_tokens, second.usage


@check("streamed chat equals the whole answer")
def _():
    whole = greedy_chat().choices[0]
    stream = greedy_chat(stream=True, stream_options={"include_usage": True})
    text, finishes, roles, usage, chunks = "", [], [], None, 0
    for chunk in stream:
        chunks += 1
        assert chunk.object == "chat.completion.chunk"
        if not chunk.choices:
            usage = chunk.usage
            continue
        choice = chunk.choices[0]
        if choice.delta.role:
            roles.append(chunks)
        text += choice.delta.content or ""
        if choice.finish_reason:
            finishes.append(choice.finish_reason)
    assert roles == [1], roles
    assert text == whole.message.content, (text, whole.message.content)
    assert finishes == [whole.finish_reason], finishes
    assert usage is not None and usage.completion_tokens > 0, usage


@check("chat with n = 2")
def _():
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, n=2, temperature=0.9, seed=7, max_tokens=16
    )
    assert [c.index for c in answer.choices] == [0, 1]
    assert all(c.message.content is not None for c in answer.choices)
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, n=2, temperature=0.9, seed=7, max_tokens=16, stream=True
    )
    texts, finishes = ["", ""], [0, 0]
    for chunk in stream:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            finishes[c.index] += c.finish_reason is not None
    assert finishes == [1, 1], finishes
    assert texts == [c.message.content for c in answer.choices], (texts, answer.choices)


@check("chat logprobs")
def _():
    answer = greedy_chat(logprobs=True, top_logprobs=3)
    content = answer.choices[0].logprobs.content
    assert len(content) == answer.usage.completion_tokens, (len(content), answer.usage)
    for entry in content:
        assert entry.logprob <= 0 and len(entry.top_logprobs) == 3
        assert entry.top_logprobs[0].logprob >= entry.top_logprobs[-1].logprob
        # Greedy: the chosen token is the most likely one.
        assert abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-4, entry
    assert "".join(e.token for e in content).strip() != ""


@check("completions, whole and streamed")
def _():
    prompt = "The capital of France is"
    whole = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, temperature=0)
    assert whole.object == "text_completion" and len(whole.choices) == 1
    assert whole.choices[0].finish_reason in ("stop", "length")
    text = ""
    for chunk in client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, temperature=0, stream=True
    ):
        text += "".join(c.text for c in chunk.choices)
    assert text == whole.choices[0].text, (text, whole.choices[0].text)


@check("completions of several prompts, of token ids, with logprobs")
def _():
    answer = client.completions.create(
        model=MODEL, prompt=["One, two,", "A, B,"], max_tokens=4, temperature=0, n=2
    )
    assert [c.index for c in answer.choices] == [0, 1, 2, 3]
    assert answer.choices[0].text == answer.choices[1].text
    status, tokens = raw("POST", "/tokenize", {"content": "One, two,", "add_special": True})
    assert status == 200, tokens
    by_ids = client.completions.create(
        model=MODEL, prompt=tokens["tokens"], max_tokens=4, temperature=0
    )
    assert by_ids.choices[0].text == answer.choices[0].text
    assert by_ids.usage.prompt_tokens == len(tokens["tokens"])
    with_logprobs = client.completions.create(
        model=MODEL, prompt="One, two,", max_tokens=4, temperature=0, logprobs=2
    )
    lp = with_logprobs.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4, lp
    assert all(len(t) <= 2 for t in lp.top_logprobs)


@check("tokenize, detokenize, health and metrics")
def _():
    status, tokens = raw("POST", "/tokenize", {"content": "Hello world", "with_pieces": True})
    assert status == 200 and "".join(t["piece"] for t in tokens["tokens"]) == "Hello world"
    ids = [t["id"] for t in tokens["tokens"]]
    assert raw("POST", "/detokenize", {"tokens": ids}) == (200, {"content": "Hello world"})
    assert raw("GET", "/health", key=None) == (200, {"status": "ok"})
    status, text = raw("GET", "/metrics")
    assert status == 200 and "plumb_requests_total" in text and "plumb_kv_blocks_free" in text


@check("errors")
def _():
    for bad, param in [
        ({"max_tokens": -1}, "max_tokens"),
        ({"temperature": 5}, "temperature"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ]:
        try:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, **{"max_tokens": 4, **bad})
        except openai.BadRequestError as err:
            assert err.body["param"] == param and param in err.body["message"], err.body
        else:
            raise AssertionError(f"{bad} was accepted")
    try:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, max_tokens=1)
    except openai.NotFoundError:
        pass
    else:
        raise AssertionError("an unknown model was accepted")


@check("the API key")
def _():
    wrong = OpenAI(base_url=BASE + "/v1", api_key="wrong-key", max_retries=0)
    try:
        wrong.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=1)
    except openai.AuthenticationError as err:
        assert err.status_code == 401 and err.body["type"] == "authentication_error", err.body
    else:
        raise AssertionError("a wrong key was accepted")
    assert [m.id for m in wrong.models.list().data] == [MODEL]
    assert raw("POST", "/v1/completions", {"prompt": "a"}, key=None)[0] == 401


print(f"openai compatibility: {len(checks)} passed, 0 failed")
sys.exit(0)
