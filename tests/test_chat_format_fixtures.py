"""llamapy's chat prompts against llama-cpp-python's, byte for byte.

tests/data/chat_format_fixtures.json holds prompts recorded from
llama-cpp-python 0.3.36 (tools/record_chat_format_fixtures.py): every
registered named format over a set of conversations, and real Jinja
templates through Jinja2ChatFormatter and hf_tokenizer_config_to_chat_formatter.

Where llama-cpp-python leaves messages out of a prompt (the recorder marks
them), llamapy keeps them (llamapy/chat/named_formats.py): such a case must
render the recorded prompt for the conversation without those messages, and
its full render must hold every message's text.
"""
from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any, Dict, List

import pytest

from chat_helpers import ScriptedLlama
from llamapy import llama_chat_format as lcf

DATA = json.loads((Path(__file__).parent / "data" / "chat_format_fixtures.json").read_text(encoding="utf-8"))
CONVERSATIONS: Dict[str, List[Dict[str, Any]]] = DATA["conversations"]
NAMED = DATA["named"]
FORMAT_NAMES = sorted({c["format"] for c in NAMED})


def _reduced(case: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The conversation without what llama-cpp-python left out of this case's prompt."""
    out = []
    for i, m in enumerate(CONVERSATIONS[case["conversation"]]):
        if i in case["dropped"]:
            continue
        m = {k: v for k, v in m.items() if not (k == "tool_calls" and i in case["calls_dropped"])}
        out.append(dict(m, content=None) if i in case["emptied"] else m)
    return out


def _texts(messages: List[Dict[str, Any]]) -> List[str]:
    texts = []
    for m in messages:
        content = m.get("content")
        parts = content if isinstance(content, list) else [{"text": content}]
        texts += [p["text"] for p in parts if p.get("text")]
    return texts


def test_fixtures_cover_every_registered_format():
    assert DATA["llama_cpp_python"] == "0.3.36"
    assert len(FORMAT_NAMES) == 23 and len(NAMED) == 23 * len(CONVERSATIONS)
    assert all("prompt" in c for c in NAMED)
    exact = sum("reduced_ok" not in c for c in NAMED)
    assert exact >= 450  # most cases drop nothing, and must match as they are


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_named_formatters_match_llama_cpp_python(fmt):
    for case in (c for c in NAMED if c["format"] == fmt):
        formatter = getattr(lcf, case["function"])
        messages = CONVERSATIONS[case["conversation"]]
        where = f"{fmt} / {case['conversation']}"
        full = formatter(messages=copy.deepcopy(messages))
        assert full.stop == case["stop"] and full.added_special == case["added_special"], where
        if "reduced_ok" not in case:
            assert full.prompt == case["prompt"], where
            continue
        assert case["reduced_ok"], where
        assert formatter(messages=_reduced(case)).prompt == case["prompt"], where
        # What llama-cpp-python drops, llamapy keeps.
        assert all(t in full.prompt for t in _texts(messages)), where


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_chat_handler_prompts_match_llama_cpp_python(fmt):
    """Through Llama.create_chat_completion's path: the text of the prompt's
    tokens is BOS + the recorded prompt."""
    for case in (c for c in NAMED if c["format"] == fmt):
        messages = _reduced(case) if "reduced_ok" in case else CONVERSATIONS[case["conversation"]]
        if not messages:  # everything was dropped; a chat request needs a message
            continue
        llm = ScriptedLlama("ok", chat_format=fmt)
        llm.create_chat_completion(copy.deepcopy(messages), max_tokens=4)
        text = llm.detokenize(llm.calls[-1]["prompt"], special=True).decode()
        assert text == "<bos>" + case["prompt"], f"{fmt} / {case['conversation']}"


def _jinja_formatter(case: Dict[str, Any]) -> Any:
    source = DATA["templates"][case["template"]]
    if case["kind"] == "jinja":
        return lcf.Jinja2ChatFormatter(source, eos_token=case["eos_token"], bos_token=case["bos_token"],
                                       **case["init"])
    config = {"chat_template": source, "bos_token": case["bos_token"], "eos_token": case["eos_token"]}
    return lcf.hf_tokenizer_config_to_chat_formatter(config, **case["init"])


@pytest.fixture
def recording_day(monkeypatch):
    """The clock of the chat templates (strftime_now) set to the day the
    fixtures were recorded: Llama 3.x templates print today's date."""
    import llamapy.chat.template as T

    day = datetime.date.fromisoformat(DATA["recorded_on"])

    class _Clock(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return cls(day.year, day.month, day.day, 12, 0, 0, tzinfo=tz)

    monkeypatch.setattr(T, "datetime", _Clock)
    return day


@pytest.mark.parametrize("template", sorted(DATA["templates"]))
def test_jinja_formatters_match_llama_cpp_python(template, recording_day):
    cases = [c for c in DATA["jinja"] if c["template"] == template]
    assert cases
    for case in cases:
        formatter = _jinja_formatter(case)
        messages = copy.deepcopy(CONVERSATIONS[case["conversation"]])
        where = f"{template} / {case['kind']} {case['init']} {case['call']} / {case['conversation']}"
        if "error" in case:
            # llama-cpp-python raised (raise_exception, a template's own type
            # error, an undefined name): llamapy raises a ValueError.
            with pytest.raises(ValueError):
                formatter(messages=messages, **case["call"])
            continue
        r = formatter(messages=messages, **case["call"])
        assert (r.prompt, r.stop, r.added_special) == (case["prompt"], case["stop"], case["added_special"]), where


def test_jinja_fixture_counts():
    ok = [c for c in DATA["jinja"] if "prompt" in c]
    assert len(ok) >= 550 and {c["kind"] for c in ok} == {"jinja", "hf_tokenizer_config"}


@pytest.mark.parametrize("name", ["CHATML_CHAT_TEMPLATE", "MISTRAL_INSTRUCT_CHAT_TEMPLATE",
                                  "MIXTRAL_INSTRUCT_CHAT_TEMPLATE", "LLAMA3_INSTRUCT_CHAT_TEMPLATE"])
def test_known_templates_select_their_named_format(name):
    """The template constants are llama-cpp-python's texts; a GGUF carrying one
    is chatted with the named format, as llama-cpp-python does."""
    assert getattr(lcf, name) == DATA["templates"][name]
    expected = {"CHATML": "chatml", "MISTRAL": "mistral-instruct", "MIXTRAL": "mistral-instruct",
                "LLAMA3": "llama-3"}[name.split("_")[0]]
    assert lcf.guess_chat_format_from_gguf_metadata({"tokenizer.chat_template": getattr(lcf, name)}) == expected
    llm = ScriptedLlama("ok", metadata={"general.architecture": "llama", "tokenizer.chat_template": getattr(lcf, name)})
    messages = CONVERSATIONS["multi_turn_spaces"][1:]
    llm.create_chat_completion(copy.deepcopy(messages), max_tokens=2)
    case = next(c for c in NAMED if c["format"] == expected and c["conversation"] == "multi_turn_spaces")
    reference = getattr(lcf, case["function"])(messages=messages).prompt
    assert llm.detokenize(llm.calls[-1]["prompt"], special=True).decode() == "<bos>" + reference
