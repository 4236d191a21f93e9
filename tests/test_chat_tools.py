"""Tool calls: found in what models write, in each family's syntax, and held
back from the content stream."""
from __future__ import annotations

import json

import pytest

from llamapy.chat.tools import ToolCallStream, call_as_text, parse_tool_calls, tools_system_prompt

NAMES = ["get_weather", "get_time"]
PARIS = {"city": "Paris"}

# (model output, expected content, expected [(name, arguments)])
SAMPLES = {
    "qwen/hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                    None, [("get_weather", PARIS)]),
    "hermes with text first": ('Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
                               '</tool_call>', "Let me check.", [("get_weather", PARIS)]),
    "hermes parallel": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>',
                        None, [("get_weather", PARIS), ("get_time", {"tz": "CET"})]),
    "hermes unterminated": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}', None,
                            [("get_weather", PARIS)]),
    "mistral": ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]', None,
                [("get_weather", PARIS)]),
    "mistral, marker detokenized away": (' [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                                         '{"name": "get_time", "arguments": {}}]', None,
                                         [("get_weather", PARIS), ("get_time", {})]),
    "llama 3.1": ('{"name": "get_weather", "parameters": {"city": "Paris"}}', None, [("get_weather", PARIS)]),
    "llama 3.1 python_tag": ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', None,
                             [("get_weather", PARIS)]),
    "arguments as a JSON string": ('{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}', None,
                                   [("get_weather", PARIS)]),
    "deepseek r1": ('<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>function'
                    '<\uff5ctool\u2581sep\uff5c>get_weather\n```json\n{"city": "Paris"}\n```'
                    '<\uff5ctool\u2581call\u2581end\uff5c><\uff5ctool\u2581calls\u2581end\uff5c>', None,
                    [("get_weather", PARIS)]),
    "fenced json": ('```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```', None,
                    [("get_weather", PARIS)]),
    # Qwen3-Coder / Qwen3.5: XML-style functions and parameters inside <tool_call>
    "qwen3-coder xml": ('<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n'
                        '</tool_call>', None, [("get_weather", PARIS)]),
    "qwen3-coder xml after text, two calls": (
        'Checking both.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n'
        '</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n'
        '<parameter=hours>\n24\n</parameter>\n</function>\n</tool_call>',
        "Checking both.", [("get_weather", PARIS), ("get_time", {"tz": "CET", "hours": 24})]),
    "qwen3-coder xml multi-line value": ('<tool_call>\n<function=get_weather>\n<parameter=city>\nline one\nline two\n'
                                         '</parameter>\n</function>\n</tool_call>', None,
                                         [("get_weather", {"city": "line one\nline two"})]),
    "qwen3-coder xml unterminated": ('<tool_call>\n<function=get_weather>\n<parameter=city>\nParis', None,
                                     [("get_weather", PARIS)]),
    # Mistral Small 3.2 / Devstral: the name, an optional call id, then [ARGS] and the JSON arguments
    "mistral named": ('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}', None, [("get_weather", PARIS)]),
    "mistral named, call ids, two calls": (
        'Checking.[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]{"city": "Paris"}'
        '[TOOL_CALLS]get_time[CALL_ID]f5g6h7i8j[ARGS]{"tz": "CET"}', "Checking.",
        [("get_weather", PARIS), ("get_time", {"tz": "CET"})]),
    # GLM-4.5 / 4.6: the name, then key / value tags; a value left unclosed ends at </tool_call>
    "glm": ('<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>', None,
            [("get_weather", PARIS)]),
    "glm two calls, no arguments": ('<tool_call>get_time\n</tool_call>\n<tool_call>get_weather\n<arg_key>city'
                                    '</arg_key>\n<arg_value>Paris</tool_call>', None,
                                    [("get_time", {}), ("get_weather", PARIS)]),
}

NOT_CALLS = [
    "The weather in Paris is sunny.",
    '{"name": "not_a_tool", "arguments": {}}',       # bare JSON must name a declared tool
    '{"city": "Paris"}',                              # JSON, but not a call
    '[1, 2, 3]',
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": \n</tool_call>',  # broken JSON
    '{"name": "get_weather", "arguments": {}} and then some prose',
    '[TOOL_CALLS]get_weather[ARGS]{"city": "Par',                               # cut inside the JSON
    '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"} and prose',
    '<tool_call>\n<function=get_weather>\n<parameter=ci',                       # cut inside a tag
    '<tool_call>get_weather\n<arg_key>ci',
    '<tool_call>\nJust some words\n</tool_call>',                               # not a declared tool's name
]


@pytest.mark.parametrize("key", sorted(SAMPLES))
def test_parse_tool_calls(key):
    text, content, expected = SAMPLES[key]
    got_content, calls = parse_tool_calls(text, NAMES)
    assert got_content == content
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == expected
    for c in calls:
        assert c["type"] == "function" and c["id"].startswith("call_") and len(c["id"]) > 10
        assert isinstance(c["function"]["arguments"], str)


def test_xml_values_follow_the_tools_schema():
    """A parameter the schema calls a string stays the text the model wrote
    (a zip code of digits); numbers, booleans and objects are parsed."""
    from llamapy.chat.tools import tool_schemas

    tools = [{"type": "function", "function": {"name": "book", "parameters": {"type": "object", "properties": {
        "zip": {"type": "string"}, "nights": {"type": "integer"}, "pets": {"type": "boolean"},
        "guests": {"type": "array"}, "note": {"type": "string"}}}}}]
    text = ("<tool_call>\n<function=book>\n<parameter=zip>\n75001\n</parameter>\n<parameter=nights>\n3\n"
            "</parameter>\n<parameter=pets>\ntrue\n</parameter>\n<parameter=guests>\n[\"ann\", \"bo\"]\n"
            "</parameter>\n<parameter=note>\n{not json}\n</parameter>\n</function>\n</tool_call>")
    _, calls = parse_tool_calls(text, tool_schemas(tools))
    assert json.loads(calls[0]["function"]["arguments"]) == {"zip": "75001", "nights": 3, "pets": True,
                                                             "guests": ["ann", "bo"], "note": "{not json}"}
    stream = ToolCallStream(tool_schemas(tools))
    assert "".join(stream.push(text[i:i + 7]) for i in range(0, len(text), 7)) == ""
    rest, streamed = stream.finish()
    assert rest == "" and streamed[0]["function"]["arguments"] == calls[0]["function"]["arguments"]


def test_ids_are_unique_and_model_ids_kept():
    _, calls = parse_tool_calls(SAMPLES["hermes parallel"][0], NAMES)
    assert calls[0]["id"] != calls[1]["id"]
    _, calls = parse_tool_calls('[TOOL_CALLS] [{"name": "get_time", "arguments": {}, "id": "a1b2c3d4e"}]', NAMES)
    assert calls[0]["id"] == "a1b2c3d4e"


@pytest.mark.parametrize("text", NOT_CALLS)
def test_text_that_is_not_a_call(text):
    assert parse_tool_calls(text, NAMES) == (text, [])


def _stream(pieces, names=NAMES):
    s = ToolCallStream(names)
    shown = "".join(s.push(p) for p in pieces)
    rest, calls = s.finish()
    return shown, rest, calls


def test_stream_releases_plain_text_at_once():
    s = ToolCallStream(NAMES)
    assert s.push("Hello") == "Hello"
    assert s.push(" world") == " world"
    assert s.finish() == ("", [])


def test_stream_holds_a_possible_marker_then_releases_it():
    shown, rest, calls = _stream(["It is <to", "day> fine"])
    assert shown + rest == "It is <today> fine" and calls == []


def test_stream_holds_calls_after_text():
    text = SAMPLES["hermes with text first"][0]
    pieces = [text[i:i + 3] for i in range(0, len(text), 3)]
    shown, rest, calls = _stream(pieces)
    assert (shown + rest).strip() == "Let me check." and "<tool" not in shown
    assert [c["function"]["name"] for c in calls] == ["get_weather"]


def test_stream_holds_leading_json_to_the_end():
    text = SAMPLES["llama 3.1"][0]
    shown, rest, calls = _stream([text[i:i + 4] for i in range(0, len(text), 4)])
    assert shown == "" and rest == "" and len(calls) == 1
    shown, rest, calls = _stream(["[1, ", "2]"])
    assert shown + rest == "[1, 2]" and calls == []


def test_tools_prompt_and_history_round_trip():
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    prompt = tools_system_prompt([tool])
    assert json.dumps(tool) in prompt and "<tool_call>" in prompt
    text = call_as_text({"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}})
    assert parse_tool_calls(text, NAMES)[1][0]["function"]["arguments"] == '{"city": "Paris"}'
