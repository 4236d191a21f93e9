"""Chat templates: real models' templates render known-good prompts, and
hostile templates are stopped with clear errors.

The templates under tests/data/chat_templates are the models' own (see the
README there); each ``*.expected.txt`` was written by hand from the model's
documented prompt format.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from llamapy.chat.completion import normalize_messages
from llamapy.chat.template import (ChatTemplate, ChatTemplateError, ChatTemplateLimitError, ChatTemplateSecurityError,
                                   RenderLimits)

DATA = Path(__file__).parent / "data" / "chat_templates"

# bos/eos texts from each model's tokenizer_config.json
TOKENS = {
    "llama-3.1-8b-instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "qwen2.5-7b-instruct": ("", "<|im_end|>"),
    "gemma-3-it": ("<bos>", "<eos>"),
    "mistral-7b-instruct-v0.3": ("<s>", "</s>"),
    "phi-3-mini-4k-instruct": ("<s>", "<|endoftext|>"),
    "deepseek-r1-distill-qwen-32b": ("<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                                     "<\uff5cend\u2581of\u2581sentence\uff5c>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def _tool_round(call_id: str = "call_1"):
    return [{"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": "22 C, sunny"}]


CONVERSATIONS = {
    "system_user": dict(messages=[SYSTEM, {"role": "user", "content": "What is the capital of France?"}]),
    "user_only": dict(messages=[{"role": "user", "content": "What is the capital of France?"}]),
    "multi_turn": dict(messages=[SYSTEM, {"role": "user", "content": "Hi!"},
                                 {"role": "assistant", "content": "Hello! How can I help?"},
                                 {"role": "user", "content": "What is 2+2?"}]),
    "no_generation_prompt": dict(messages=[{"role": "user", "content": "Hi!"},
                                           {"role": "assistant", "content": "Hello! How can I help?"}],
                                 add_generation_prompt=False),
    "reasoning_history": dict(messages=[{"role": "user", "content": "Hi!"},
                                        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHello!"},
                                        {"role": "user", "content": "What is 2+2?"}]),
    "tools": dict(messages=[SYSTEM] + _tool_round(), tools=[WEATHER_TOOL]),
    "tools_mistral": dict(messages=[SYSTEM] + _tool_round("call9abcd"), tools=[WEATHER_TOOL]),
}

CASES = sorted(p.name[: -len(".expected.txt")] for p in DATA.glob("*.expected.txt"))


def render_case(model: str, case: str) -> str:
    conv = dict(CONVERSATIONS["tools_mistral" if (case == "tools" and model.startswith("mistral")) else case])
    bos, eos = TOKENS[model]
    template = ChatTemplate((DATA / f"{model}.jinja").read_text(encoding="utf-8"))
    messages = normalize_messages(conv.pop("messages"), tools_as_text=False)
    return template.render(messages, bos_token=bos, eos_token=eos, **conv)


def test_every_model_has_cases():
    for model in TOKENS:
        assert (DATA / f"{model}.jinja").exists()
        assert sum(c.rsplit(".", 1)[0] == model for c in CASES) >= 2, model


@pytest.mark.parametrize("name", CASES)
def test_real_template_renders_expected(name):
    model, case = name.rsplit(".", 1)
    expected = (DATA / f"{name}.expected.txt").read_text(encoding="utf-8")
    assert render_case(model, case) == expected


def test_template_sees_tools_as_none_when_absent():
    # Llama 3.1 checks "tools is not none": an empty list must not switch tool mode on.
    t = ChatTemplate((DATA / "llama-3.1-8b-instruct.jinja").read_text(encoding="utf-8"))
    out = t.render([{"role": "user", "content": "Hi"}], tools=[], bos_token="<|begin_of_text|>")
    assert "Environment: ipython" not in out


def test_raise_exception_reports_template_message():
    t = ChatTemplate((DATA / "gemma-3-it.jinja").read_text(encoding="utf-8"))
    with pytest.raises(ChatTemplateError, match="Conversation roles must alternate"):
        t.render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_tojson_is_hf_style():
    t = ChatTemplate("{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ x | tojson(separators=(',', ':')) }}")
    out = t.render([], x={"city": "Zürich", "<tag>": [1, 2]})
    assert out == ('{"city": "Zürich", "<tag>": [1, 2]}|{\n  "city": "Zürich",\n  "<tag>": [\n    1,\n    2\n  ]\n}|'
                   '{"city":"Zürich","<tag>":[1,2]}')


def test_trim_blocks_lstrip_blocks_loopcontrols_generation_tag():
    src = ("{% for m in messages %}\n    {% if m.role == 'skip' %}{% continue %}{% endif %}\n"
           "{% generation %}[{{ m.content }}]{% endgeneration %}\n{% if loop.index == 3 %}{% break %}{% endif %}\n"
           "{% endfor %}")
    msgs = [{"role": "user", "content": "a"}, {"role": "skip", "content": "b"}, {"role": "user", "content": "c"},
            {"role": "user", "content": "d"}]
    # block tags eat their newline and the indentation before them, as in transformers
    assert ChatTemplate(src).render(msgs) == "[a][c]"


def test_strftime_now_and_extra_variables():
    out = ChatTemplate("{{ strftime_now('%Y') }} {{ date_string }} {{ enable_thinking }}").render(
        [], date_string="26 Jul 2024", enable_thinking=False)
    assert out == f"{time.strftime('%Y')} 26 Jul 2024 False"


def test_syntax_error_is_clear():
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")


SECURITY = [
    "{{ ''.__class__ }}",
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ cycler.__init__.__globals__ }}",
    "{{ joiner.__init__.__globals__['os'] }}",
    "{{ namespace.__init__ }}",
    "{{ self.__init__ }}",
    "{{ messages.__class__ }}",
    "{{ ''|attr('__class__') }}",
    "{{ (1).__class__ }}",
    "{{ messages.append(1) }}",
    "{{ {}.update(a=1) }}",
]


@pytest.mark.parametrize("src", SECURITY)
def test_internals_are_forbidden(src):
    with pytest.raises(ChatTemplateSecurityError, match="sandbox"):
        ChatTemplate(src).render([{"role": "user", "content": "hi"}])


def test_security_error_is_a_jinja_security_error_and_a_value_error():
    from jinja2.sandbox import SecurityError

    assert issubclass(ChatTemplateSecurityError, SecurityError)
    assert issubclass(ChatTemplateSecurityError, ValueError)


FAST = RenderLimits(max_seconds=0.5)
BOMBS = [
    "{% for i in range(10**9) %}x{% endfor %}",
    "{{ 'a' * 10**9 }}",
    "{{ ['a'] * 10**9 }}",
    "{{ 2 ** 1000000 }}",
    "{% set s = 'ab' %}" + "{% set s = s ~ s %}" * 40 + "{{ s|length }}",
    "{% set s = 'ab' %}" + "{% set s = s + s %}" * 40 + "{{ s|length }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
    "{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% set xs = range(100000)|list %}{% for a in xs %}{% for b in xs %}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
    "{{ 'x'|center(10**9) }}",
    "{{ '%1000000000d' % 1 }}",
    "{{ '{:>1000000000}'.format(1) }}",
    "{{ range(100000)|join('x' * 10000000) }}",
    "{{ ('a' * 1000)|replace('a', 'b' * 100000) }}",
    "{{ [1]|batch(10**9, 0)|list }}",
    "{{ lipsum(10**9) }}",
    "{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}",
]


@pytest.mark.parametrize("src", BOMBS)
def test_resource_bombs_are_stopped(src):
    start = time.monotonic()
    with pytest.raises(ChatTemplateLimitError):
        ChatTemplate(src, RenderLimits(max_chars=1_000_000, max_seconds=0.5)).render([])
    assert time.monotonic() - start < 3.0


def test_time_budget_message():
    src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(ChatTemplateLimitError, match="time budget of 0.5 s"):
        ChatTemplate(src, FAST).render([])


def test_limits_do_not_get_in_the_way_of_real_templates():
    t = ChatTemplate((DATA / "qwen2.5-7b-instruct.jinja").read_text(encoding="utf-8"))
    long = "word " * 200_000  # a 1 MB message
    out = t.render([{"role": "user", "content": long}])
    assert long in out


def test_budget_is_per_render_and_per_thread():
    slow = ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", FAST)
    fast = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}")
    errors, results = [], []

    def run_slow():
        try:
            slow.render([])
        except ChatTemplateLimitError as e:
            errors.append(e)

    th = threading.Thread(target=run_slow)
    th.start()
    for _ in range(50):
        results.append(fast.render([{"role": "user", "content": "ok"}]))
    th.join()
    assert len(errors) == 1 and results == ["ok"] * 50
    assert fast.render([{"role": "user", "content": "after"}]) == "after"
