"""llamapy's chat-reply parser held to llama-server's, on recorded model outputs (issue 35).

tests/data/chat_parse/llama_server_parse.json holds, per model family, replies as the model
writes them after its chat template's generation prompt (answers, reasoning, one and two tool
calls, call-like text inside the reasoning, malformed calls, replies cut at max_tokens, empty
replies) and what llama-server's parser (llama.cpp of the 0.3.36 sdist, through the server's
own request steps) made of each: content, reasoning_content, tool calls. It was recorded by
tools/record_llama_server_parse.py; nothing of llama.cpp runs here.

Each reply goes through create_chat_completion (whole, and streamed to the same answer) with the
family's real template (read from the
sdist, its SHA-256 checked against the recording) and a scripted model that writes the reply
(tests/chat_helpers.py): the same path as a real request (FormatHandler, the reply syntax from
the rendered prompt, the split, the tool-call parse). The answers must be llama-server's, except
for the cases in KNOWN_DIFFERENCES, where llama-server's answer is worse and llamapy's own is
asserted instead.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from chat_helpers import ScriptedLlama

DATA = Path(__file__).parent / "data" / "chat_parse" / "llama_server_parse.json"
RECORD = json.loads(DATA.read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in RECORD["cases"]}
USER = [{"role": "user", "content": "What is the weather in Paris?"}]

THINKING_OPENED = "The user asks about the weather in Paris; I should check."
KEPT = object()  # llamapy's content is the reply's text after its thinking (kept_text), as the model wrote it

# id -> (why llama-server's answer is not followed, llamapy's (reasoning, content, calls)):
# calls as [(name, arguments as a JSON value)]. Issue 35: malformed or cut model output never
# raises and stays text, and text that looks like a call inside the thinking is not a call.
KNOWN_DIFFERENCES = {
    # llama-server answers 500 ("does not match the expected format") for output it cannot
    # parse; llamapy returns the text as the answer, with no call.
    **{key: ("llama-server's parser throws on a call whose arguments are not JSON", ("", KEPT, []))
       for key in ("qwen3/malformed_json", "hermes2pro/malformed_json", "qwen2.5/malformed_json",
                   "mistral-nemo/malformed_json", "llama3.1/malformed_json", "mistral-small-3.2/malformed_json")},
    "gpt-oss/malformed_json": ("llama-server's parser throws on a call whose arguments are not JSON; "
                               "llamapy keeps the call's body as content",
                               ("The user asks about Paris; I should check.", "{city: Paris}", [])),
    "deepseek-r1/malformed_json": ("llama-server's parser throws on a call whose arguments are not JSON",
                                   (THINKING_OPENED, KEPT, [])),
    "qwen3/unknown_tool": ("llama-server throws on a call of a tool that was not offered; llamapy returns "
                           "the call as the model wrote it (the client, which knows its tools, answers it)",
                           ("", "", [("get_stock", {"ticker": "X"})])),
    "llama3.1/json_answer_not_a_call": ("llama-server throws on a JSON answer that is not a call",
                                        ("", KEPT, [])),
    "llama3.1/two_calls": ("llama-server throws on Llama 3.1's ';'-separated calls, which the model writes "
                           "when parallel calls are asked for",
                           ("", "", [("get_weather", {"city": "Paris"}),
                                     ("get_time", {"place": "Tokyo", "format": "24h"})])),
    "mistral-small-3.2/call": ("llama-server's Mistral Small 3.2 parser requires a [CALL_ID] the model "
                               "does not always write, and throws without it",
                               ("", "", [("get_weather", {"city": "Paris"})])),
    "mistral-small-3.2/call_with_id": ("llama-server's parser for this template expects [ARGS] both before and "
                                       "after [CALL_ID] (a bug of the 0.3.36 sdist), and throws",
                                       ("", "", [("get_weather", {"city": "Paris"})])),
    "mistral-small-3.2/two_calls_with_ids": ("as mistral-small-3.2/call_with_id", ("", "", [
        ("get_weather", {"city": "Paris"}), ("get_time", {"place": "Tokyo", "format": "24h"})])),
    "mistral-small-3.2/two_calls": ("as mistral-small-3.2/call", ("", "", [
        ("get_weather", {"city": "Paris"}), ("get_time", {"place": "Tokyo", "format": "24h"})])),
    "mistral-small-3.2/text_then_call": ("as mistral-small-3.2/call",
                                         ("", "Let me check.", [("get_weather", {"city": "Paris"})])),
    # A reply cut at max_tokens inside a call: llama-server returns the call with its arguments cut
    # (not JSON, so a client's json.loads fails); llamapy keeps the text, and no call.
    **{key: ("llama-server returns a call whose arguments are cut JSON", (reasoning, KEPT, []))
       for key, reasoning in (("qwen3/cut_mid_call", THINKING_OPENED),
                              ("qwen3-coder/cut_mid_call", ""), ("mistral-nemo/cut_mid_call", ""),
                              ("llama3.1/cut_mid_call", ""), ("deepseek-r1/cut_mid_call", THINKING_OPENED),
                              ("hermes2pro/cut_mid_call", ""), ("glm-4.6/cut_mid_call", "I should check."),
                              ("gemma4/cut_mid_call", ""), ("mistral-small-3.2/cut_mid_call", ""))},
    "gpt-oss/cut_mid_call": ("llama-server returns a call whose arguments are cut JSON; llamapy keeps the "
                             "call's body as content",
                             ("The user asks about Paris; I should check.", '{"ci', [])),
    # The XML syntaxes' values are text: a value cut short is kept as written (as llama-server
    # does), but llama-server's arguments are then cut JSON, llamapy's the JSON of what was written.
    "qwen3.5/cut_mid_call": ("llama-server's arguments are cut JSON ('{\"city\":\"Par')",
                             (THINKING_OPENED, "", [("get_weather", {"city": "Par"})])),
    # Malformed markup: llama-server reads the value on into the closing tags.
    "qwen3.5/malformed_unclosed_param": ("llama-server takes '</function></tool_call>' into the value of a "
                                         "parameter left unclosed; llamapy ends it at </function>",
                                         (THINKING_OPENED, "", [("get_weather", {"city": "Paris"})])),
    "glm-4.6/malformed_unclosed": ("llama-server takes '</tool_call>' into the value of an argument left "
                                   "unclosed; llamapy ends it at </tool_call>",
                                   ("I should check.", "", [("get_weather", {"city": "Paris"})])),
    "gemma4/malformed_args": ("llama-server takes '<tool_call|>' into an unterminated string; llamapy keeps "
                              "the malformed call as text", ("", KEPT, [])),
    "qwen3-coder/malformed_no_function": ("llama-server drops a <tool_call> block with no <function=...>: "
                                          "content and calls both empty; llamapy keeps the text",
                                          ("", KEPT, [])),
    # Issue 35: a call written inside the thinking is not a call.
    "qwen3.5/call_in_reasoning": ("llama-server's Qwen3.5 parser ends the thinking at <tool_call> and calls "
                                  "the tool; the model had not closed its thinking",
                                  ("Maybe " + "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n"
                                   "</parameter>\n</function>\n</tool_call> is needed.", "It is sunny.", [])),
    # The control token leaks into llama-server's content.
    "llama3.1/call_python_tag": ("llama-server leaves '<|python_tag|>' in the content",
                                 ("", "", [("get_weather", {"city": "Paris"})])),
    # The model wrote <think> again after the generation prompt opened it: llama-server keeps the
    # tag in the reasoning, llamapy drops the repeated tag.
    "deepseek-r1/reasoning_retyped_open": ("llama-server keeps the repeated <think> in the reasoning",
                                           (THINKING_OPENED, "It is sunny in Paris.", [])),
}


def test_recording_is_of_these_templates(llama_cpp_sdist):
    folder = Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates"
    assert RECORD["llama_cpp_python"] == "0.3.36"
    for name, digest in RECORD["templates"].items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name
    assert set(KNOWN_DIFFERENCES) <= set(CASES)
    assert len(CASES) >= 80 and len({c["family"] for c in CASES.values()}) >= 10


@pytest.fixture(scope="module")
def template_texts(llama_cpp_sdist):
    folder = Path(llama_cpp_sdist) / "vendor" / "llama.cpp" / "models" / "templates"
    return {name: (folder / name).read_text(encoding="utf-8") for name in RECORD["templates"]}


def llamapy_parse(case, template_text):
    """(reasoning, content, [(name, arguments as JSON)]) from create_chat_completion."""
    llm = ScriptedLlama(case["text"], metadata={"general.architecture": "llama",
                                                "tokenizer.chat_template": template_text})
    kwargs = {"reasoning_format": case["reasoning_format"]}
    if case["tools"]:
        kwargs.update(tools=case["tools"], tool_choice=case["tool_choice"])
    if "enable_thinking" in case:
        kwargs["chat_template_kwargs"] = {"enable_thinking": case["enable_thinking"]}
    message = llm.create_chat_completion(USER, **kwargs)["choices"][0]["message"]
    # the prompt the reply follows ends as llama-server's (its parser reads the reply after it)
    prompt = llm.detokenize(llm.calls[-1]["prompt"], special=True).decode("utf-8")
    assert prompt.endswith(case["llama_server"]["generation_prompt"]), prompt[-80:]
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])]
    whole = (message.get("reasoning_content") or "", message["content"] or "", calls)
    assert streamed(llm.create_chat_completion(USER, stream=True, **kwargs)) == whole
    return whole


def streamed(chunks):
    """A stream's (reasoning, content, calls), put together from its deltas."""
    reasoning = content = ""
    names, args = {}, {}
    for chunk in chunks:
        delta = chunk["choices"][0]["delta"]
        reasoning += delta.get("reasoning_content") or ""
        content += delta.get("content") or ""
        for tc in delta.get("tool_calls") or []:
            names[tc["index"]] = tc["function"].get("name") or names.get(tc["index"])
            args[tc["index"]] = args.get(tc["index"], "") + (tc["function"].get("arguments") or "")
    return reasoning, content, [(names[i], json.loads(args[i])) for i in sorted(names)]


def assert_same_text(ours, theirs, what):
    """llama-server's whitespace around the parts differs by family: it keeps the newline before
    </think> in Qwen3's reasoning and the newlines around a DeepSeek R1 think block, it keeps the
    newline between text and a following call, and trims all of these for gpt-oss, GLM and Gemma 4.
    llamapy trims the whitespace at every boundary (reasoning on both sides, content around the
    calls), as Qwen's and DeepSeek's templates trim it when the reply is rendered back. So the
    texts are compared without their surrounding whitespace, and exactly where llama-server's has
    none."""
    assert ours.strip() == theirs.strip(), what
    if theirs == theirs.strip():
        assert ours == theirs, what


@pytest.mark.parametrize("key", sorted(set(CASES) - set(KNOWN_DIFFERENCES)))
def test_same_split_as_llama_server(key, template_texts):
    case = CASES[key]
    server = case["llama_server"]
    assert "error" not in server, f"llama-server throws here ({server.get('error')}): list it in KNOWN_DIFFERENCES"
    reasoning, content, calls = llamapy_parse(case, template_texts[case["template"]])
    assert_same_text(reasoning, server["reasoning_content"], "reasoning_content")
    assert_same_text(content, server["content"], "content")
    assert calls == [(c["name"], json.loads(c["arguments"])) for c in server["tool_calls"]]


@pytest.mark.parametrize("key", sorted(KNOWN_DIFFERENCES))
def test_known_differences(key, template_texts):
    case = CASES[key]
    why, (reasoning, content, calls) = KNOWN_DIFFERENCES[key]
    server = case["llama_server"]
    ours = llamapy_parse(case, template_texts[case["template"]])
    # the difference is real: llama-server throws or answers otherwise
    theirs = (server.get("reasoning_content", "").strip(), server.get("content", "").strip(),
              [(c["name"], json_or_text(c["arguments"])) for c in server.get("tool_calls", [])])
    assert "error" in server or theirs != (ours[0].strip(), ours[1].strip(), ours[2]), why
    expected = (reasoning, kept_text(case["text"]) if content is KEPT else content, calls)
    assert ours == expected, why


def json_or_text(arguments):
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments  # cut or malformed: what llama-server gave


def kept_text(text):
    """The reply as the model wrote it, less a thinking block it closed (and the whitespace after it)."""
    head, closed, tail = text.partition("</think>")
    return tail.lstrip() if closed else text
