"""The reasoning budget: at most N tokens of thinking, then the template's
closing marker is written for the model and its answer follows
(create_chat_completion's reasoning_budget, the server's --reasoning-budget
and per-request reasoning_budget, Anthropic's thinking.budget_tokens).

Gemma 3 270M's vocabulary spells the replies, with Qwen3's template (think
tags) and gpt-oss's (harmony channels) from the llama-cpp-python sdist. The
model is scripted: Llama.generate yields the tokens of a reply and, when the
completion loop sends it the closing marker, records what it was sent and
goes on with the answer, as a model would after reading the marker."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import needs

pytestmark = pytest.mark.model

THINK = "<think>\nFirst I add two and two, then I check the sum twice over.\n</think>\n\nThe answer is 4."
HARMONY = ("<|channel|>analysis<|message|>First I add two and two, then I check the sum twice over.<|end|>"
           "<|start|>assistant<|channel|>final<|message|>The answer is 4.")
ANSWER = "The answer is 4."
MSGS = [{"role": "user", "content": "What is 2 + 2?"}]
SCRIPT = {"reply": THINK}
SENT = []    # what the completion loop appended (the closing marker's tokens)
COUNT = []   # tokens sampled before the marker was sent


def _template(sdist, name):
    return (Path(sdist) / "vendor" / "llama.cpp" / "models" / "templates" / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def scripted():
    from llamapy.llama import Llama

    def generate(self, tokens, **kwargs):
        reply = self.tokenize(SCRIPT["reply"].encode("utf-8"), add_bos=False, special=True)
        answer = self.tokenize(ANSWER.encode("utf-8"), add_bos=False, special=True)
        i, n = 0, 0
        while i < len(reply):
            extra = yield reply[i]
            i, n = i + 1, n + 1
            if extra:
                SENT.append(list(extra))
                COUNT.append(n)
                for t in answer:
                    yield t
                break
        yield self.token_eos()

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Llama, "generate", generate)
        yield


@pytest.fixture(scope="module")
def qwen3(gemma_path, llama_cpp_sdist, scripted):
    from llamapy import Llama

    m = Llama(model_path=gemma_path, n_ctx=1024, verbose=False,
              kv_overrides={"tokenizer.chat_template": _template(llama_cpp_sdist, "Qwen-Qwen3-0.6B.jinja")})
    yield m
    m.close()


@pytest.fixture(autouse=True)
def reset():
    SCRIPT["reply"] = THINK
    SENT.clear()
    COUNT.clear()


def test_no_budget_keeps_the_whole_thinking(qwen3):
    msg = qwen3.create_chat_completion(messages=MSGS, max_tokens=200)["choices"][0]["message"]
    assert msg["reasoning_content"] == "First I add two and two, then I check the sum twice over."
    assert msg["content"] == ANSWER and not SENT


@pytest.mark.parametrize("budget", [1, 4, 9])
def test_budget_closes_the_thinking(qwen3, budget):
    msg = qwen3.create_chat_completion(messages=MSGS, max_tokens=200, reasoning_budget=budget)["choices"][0]["message"]
    close = qwen3.tokenize(b"</think>", add_bos=False, special=True)
    n_open = len(qwen3.tokenize(b"<think>", add_bos=False, special=True))  # 3 in Gemma's vocabulary
    assert SENT == [close]
    assert COUNT == [n_open + budget]  # <think>, then `budget` tokens of thinking
    thought = qwen3.tokenize(msg.get("reasoning_content", "").encode(), add_bos=False, special=True)
    assert len(thought) <= budget  # the budget's tokens (the whitespace around is trimmed)
    assert msg["content"] == ANSWER


def test_budget_streamed_like_whole(qwen3):
    whole = qwen3.create_chat_completion(messages=MSGS, max_tokens=200, reasoning_budget=4)["choices"][0]["message"]
    reasoning, content = "", ""
    for chunk in qwen3.create_chat_completion(messages=MSGS, max_tokens=200, reasoning_budget=4, stream=True):
        d = chunk["choices"][0]["delta"]
        reasoning += d.get("reasoning_content") or ""
        content += d.get("content") or ""
    assert reasoning.strip() == whole["reasoning_content"] and content.strip() == whole["content"]


def test_thinking_closed_by_the_model_in_time_is_left_alone(qwen3):
    qwen3.create_chat_completion(messages=MSGS, max_tokens=200, reasoning_budget=500)
    assert not SENT


def test_bad_budget(qwen3):
    with pytest.raises(ValueError, match="reasoning_budget"):
        qwen3.create_chat_completion(messages=MSGS, reasoning_budget=-3)


def test_harmony_budget(gemma_path, llama_cpp_sdist, scripted):
    from llamapy import Llama

    SCRIPT["reply"] = HARMONY
    m = Llama(model_path=gemma_path, n_ctx=2048, verbose=False,
              kv_overrides={"tokenizer.chat_template": _template(llama_cpp_sdist, "openai-gpt-oss-120b.jinja")})
    try:
        msg = m.create_chat_completion(messages=MSGS, max_tokens=200, reasoning_budget=3)["choices"][0]["message"]
        close = m.tokenize(b"<|end|><|start|>assistant<|channel|>final<|message|>", add_bos=False, special=True)
    finally:
        m.close()
    assert SENT == [close]
    assert msg["content"] == ANSWER
    assert msg["reasoning_content"] and len(msg["reasoning_content"]) < len("First I add two and two")


def test_server_flag_request_field_and_anthropic(gemma_path, llama_cpp_sdist, scripted):
    needs("fastapi")
    needs("uvicorn")
    httpx = needs("httpx")
    from server_helpers import LiveServer

    s = LiveServer(["-m", gemma_path, "-c", "1024", "-t", "2", "--reasoning-budget", "2",
                    "--chat-template", _template(llama_cpp_sdist, "Qwen-Qwen3-0.6B.jinja")]).start()
    try:
        r = httpx.post(s.url + "/v1/chat/completions", json={"messages": MSGS, "max_tokens": 100}, timeout=60)
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == ANSWER
        n_open = 3  # <think> in Gemma's vocabulary: "<", "think", ">"
        assert COUNT == [n_open + 2]  # the server's budget of 2
        r = httpx.post(s.url + "/v1/chat/completions",
                       json={"messages": MSGS, "max_tokens": 100, "reasoning_budget": -1}, timeout=60)
        assert COUNT == [n_open + 2] and r.json()["choices"][0]["message"]["reasoning_content"].endswith("twice over.")
        r = httpx.post(s.url + "/v1/messages", json={"messages": MSGS, "max_tokens": 100,
                                                      "thinking": {"type": "enabled", "budget_tokens": 5}}, timeout=60)
        assert r.status_code == 200, r.text
        assert COUNT == [n_open + 2, n_open + 5] and r.json()["content"][-1] == {"type": "text", "text": ANSWER}
        r = httpx.post(s.url + "/v1/chat/completions",
                       json={"messages": MSGS, "max_tokens": 100, "reasoning_budget": "lots"}, timeout=60)
        assert r.status_code == 400 and "reasoning_budget" in json.dumps(r.json())
    finally:
        s.stop()
