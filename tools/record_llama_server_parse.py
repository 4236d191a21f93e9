"""Records how llama-server's chat parser splits model replies into content,
reasoning_content and tool_calls, for tests/test_chat_parse_llama_server.py.

This script is a fixture generator, not part of llamapy. It compiles
tools/record_llama_server_parse.cpp (also a fixture generator) with g++ against a
build of the llama.cpp that llama-cpp-python's 0.3.36 sdist vendors, runs it over
the cases below and writes the answers, with each template's SHA-256, to
tests/data/chat_parse/llama_server_parse.json.

Usage (from the repo root):

    python tools/record_llama_server_parse.py --sdist SDIST/vendor/llama.cpp --libs BUILD/bin \
        [--out tests/data/chat_parse/llama_server_parse.json]

--libs is a folder holding libllama-common.so, libllama.so, libggml.so and
libggml-base.so built from that same sdist (shared libraries; any CPU flags).

Each case is a reply as a model of one family writes it after its chat template's
generation prompt (the template is the real one from the sdist's models/templates):
plain answers, reasoning and answer, one and two tool calls, calls after reasoning,
call-like text inside the reasoning, malformed calls, replies cut at max_tokens and
empty replies. The C++ side follows llama-server's request path (see its header);
where llama-server's parser throws, the case records {"error": message}: the server
answers such a request with a 500, where llamapy keeps the text (issue 35).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import pathlib
import subprocess
import sys
import tempfile

LLAMA_CPP_PYTHON_VERSION = "0.3.36"

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city name."}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the local time somewhere.",
    "parameters": {"type": "object", "properties": {
        "place": {"type": "string"},
        "format": {"type": "string", "enum": ["12h", "24h"]},
        "with_seconds": {"type": "boolean"}},
        "required": ["place"]}}}
TOOLS = [WEATHER, TIME]

# family -> (template file in models/templates, BOS text, EOS text), from each model's tokenizer_config.json
FAMILIES = {
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", "", "<|im_end|>"),
    "qwen3.5": ("Qwen3.5-4B.jinja", "", "<|im_end|>"),
    "qwen3-coder": ("Qwen3-Coder.jinja", "", "<|im_end|>"),
    "gpt-oss": ("openai-gpt-oss-120b.jinja", "<|startoftext|>", "<|return|>"),
    "mistral-small-3.2": ("Mistral-Small-3.2-24B-Instruct-2506.jinja", "<s>", "</s>"),
    "mistral-nemo": ("mistralai-Mistral-Nemo-Instruct-2407.jinja", "<s>", "</s>"),
    "llama3.1": ("meta-llama-Llama-3.1-8B-Instruct.jinja", "<|begin_of_text|>", "<|eot_id|>"),
    "deepseek-r1": ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", "<\uff5cbegin\u2581of\u2581sentence\uff5c>",
                    "<\uff5cend\u2581of\u2581sentence\uff5c>"),
    "hermes2pro": ("NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", "<|begin_of_text|>", "<|im_end|>"),
    "qwen2.5": ("Qwen-Qwen2.5-7B-Instruct.jinja", "", "<|im_end|>"),
    "glm-4.6": ("GLM-4.6.jinja", "", "<|endoftext|>"),
    "gemma4": ("google-gemma-4-31B-it.jinja", "<bos>", "<eos>"),
}

W = '{"city": "Paris"}'
T = '{"place": "Tokyo", "format": "24h"}'


def hermes(name: str, args: str) -> str:
    return '<tool_call>\n{"name": "%s", "arguments": %s}\n</tool_call>' % (name, args)


def xml(name: str, params: dict) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def glm(name: str, params: dict) -> str:
    body = "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in params.items())
    return f"<tool_call>{name}\n{body}</tool_call>"


def ds(name: str, args: str) -> str:
    return ("<\uff5ctool\u2581call\u2581begin\uff5c>function<\uff5ctool\u2581sep\uff5c>" + name +
            "\n```json\n" + args + "\n```<\uff5ctool\u2581call\u2581end\uff5c>")


def ds_calls(*calls: str) -> str:
    return "<\uff5ctool\u2581calls\u2581begin\uff5c>" + "\n".join(calls) + "<\uff5ctool\u2581calls\u2581end\uff5c>"


def g4(name: str, args: str) -> str:
    return f"<|tool_call>call:{name}{{{args}}}<tool_call|>"


Q = '<|"|>'
THINK = "<think>\nThe user asks about the weather in Paris; I should check.\n</think>\n\n"
OPEN_THINK = "The user asks about the weather in Paris; I should check.\n</think>\n\n"  # the prompt opened <think>
HARMONY_A = "<|channel|>analysis<|message|>The user asks about Paris; I should check.<|end|><|start|>assistant"
G4_THOUGHT = "<|channel>thought\nThe user asks about Paris; I should check.<channel|>"


def family_cases() -> dict:
    """family -> {kind: (text, options)}; options: tools (default both), tool_choice, enable_thinking,
    reasoning_format."""
    hw, ht = hermes("get_weather", W), hermes("get_time", T)
    qx = xml("get_weather", {"city": "Paris"})
    qt = xml("get_time", {"place": "Tokyo", "format": "24h", "with_seconds": "true"})
    gw, gt = glm("get_weather", {"city": "Paris"}), glm("get_time", {"place": "Tokyo", "format": "24h"})
    none = {"tools": []}
    cases = {
        "qwen3": {
            "plain": ("It is sunny in Paris.", none),
            "plain_no_think": ("It is sunny in Paris.", {"enable_thinking": False}),
            "reasoning": (THINK + "It is sunny in Paris.", none),
            "reasoning_format_none": (THINK + "It is sunny in Paris.", {"reasoning_format": "none", "tools": []}),
            "call": (hw, {}),
            "two_calls": (hw + "\n" + ht, {}),
            "reasoning_call": (THINK + hw, {}),
            "text_then_call": ("Let me check.\n" + hw, {}),
            "call_in_reasoning": ("<think>\nMaybe " + hw + " but I know it.\n</think>\n\nIt is sunny.", {}),
            "malformed_json": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>', {}),
            "unknown_tool": (hermes("get_stock", '{"ticker": "X"}'), {}),
            "cut_mid_call": (THINK + '<tool_call>\n{"name": "get_weather", "arguments": {"ci', {}),
            "cut_in_reasoning": ("<think>\nThe user asks about", {}),
            "tools_none": (hw, {"tool_choice": "none"}),
            "empty": ("", {}),
        },
        "qwen3.5": {
            "plain": ("It is sunny in Paris.", {"enable_thinking": False, "tools": []}),
            "reasoning": (OPEN_THINK + "It is sunny in Paris.", none),
            "call": (OPEN_THINK + qx, {}),
            "call_no_think": (qx, {"enable_thinking": False}),
            "two_calls": (OPEN_THINK + qx + "\n" + qt, {}),
            "text_then_call": (OPEN_THINK + "Let me check.\n\n" + qx, {}),
            "call_in_reasoning": ("Maybe " + qx + " is needed.\n</think>\n\nIt is sunny.", {}),
            "malformed_unclosed_param": (OPEN_THINK + "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis"
                                         "\n</function>\n</tool_call>", {}),
            "cut_mid_call": (OPEN_THINK + "<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", {}),
            "cut_in_reasoning": ("The user asks about", {}),
            "empty": ("", {}),
        },
        "qwen3-coder": {
            "plain": ("It is sunny in Paris.", none),
            "call": (qx, {}),
            "two_calls": (qx + "\n" + qt, {}),
            "text_then_call": ("Let me check.\n" + qx, {}),
            "malformed_no_function": ("<tool_call>\n<parameter=city>\nParis\n</parameter>\n</tool_call>", {}),
            "cut_mid_call": ("<tool_call>\n<function=get_weather>\n<parameter=ci", {}),
            "empty": ("", {}),
        },
        "gpt-oss": {
            "plain": ("<|channel|>final<|message|>It is sunny in Paris.", none),
            "reasoning": (HARMONY_A + "<|channel|>final<|message|>It is sunny in Paris.", none),
            "call": (HARMONY_A + "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>" + W, {}),
            "call_recipient_first": (HARMONY_A + " to=functions.get_weather<|channel|>commentary json<|message|>" + W,
                                     {}),
            "preamble_call": ("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>"
                              "commentary to=functions.get_weather <|constrain|>json<|message|>" + W, {}),
            "call_in_reasoning": ("<|channel|>analysis<|message|>Maybe to=functions.get_weather " + W +
                                  "<|end|><|start|>assistant<|channel|>final<|message|>It is sunny.", {}),
            "malformed_json": (HARMONY_A + "<|channel|>commentary to=functions.get_weather <|constrain|>json"
                               "<|message|>{city: Paris}", {}),
            "cut_mid_call": (HARMONY_A + '<|channel|>commentary to=functions.get_weather <|constrain|>json'
                             '<|message|>{"ci', {}),
            "cut_in_reasoning": ("<|channel|>analysis<|message|>The user asks", {}),
            "empty": ("", {}),
        },
        "mistral-small-3.2": {
            "plain": ("It is sunny in Paris.", none),
            "call": ("[TOOL_CALLS]get_weather[ARGS]" + W, {}),
            "call_with_id": ("[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]" + W, {}),
            "two_calls_with_ids": ("[TOOL_CALLS]get_weather[CALL_ID]a1b2c3d4e[ARGS]" + W +
                                   "[TOOL_CALLS]get_time[CALL_ID]f5g6h7i8j[ARGS]" + T, {}),
            "two_calls": ("[TOOL_CALLS]get_weather[ARGS]" + W + "[TOOL_CALLS]get_time[ARGS]" + T, {}),
            "text_then_call": ("Let me check.[TOOL_CALLS]get_weather[ARGS]" + W, {}),
            "malformed_json": ("[TOOL_CALLS]get_weather[ARGS]{city: Paris}", {}),
            "cut_mid_call": ('[TOOL_CALLS]get_weather[ARGS]{"ci', {}),
            "empty": ("", {}),
        },
        "mistral-nemo": {
            "plain": ("It is sunny in Paris.", none),
            "call": ('[TOOL_CALLS][{"name": "get_weather", "arguments": ' + W + ', "id": "abcdef123"}]', {}),
            "two_calls": ('[TOOL_CALLS][{"name": "get_weather", "arguments": ' + W + ', "id": "abcdef123"}, '
                          '{"name": "get_time", "arguments": ' + T + ', "id": "abcdef456"}]', {}),
            "malformed_json": ('[TOOL_CALLS][{"name": "get_weather", "arguments": {city: Paris}}]', {}),
            "cut_mid_call": ('[TOOL_CALLS][{"name": "get_weather", "argu', {}),
            "empty": ("", {}),
        },
        "llama3.1": {
            "plain": ("It is sunny in Paris.", none),
            "call": ('{"name": "get_weather", "parameters": ' + W + '}', {}),
            "call_python_tag": ('<|python_tag|>{"name": "get_weather", "parameters": ' + W + '}', {}),
            "two_calls": ('{"name": "get_weather", "parameters": ' + W + '}; {"name": "get_time", "parameters": ' +
                          T + '}', {}),
            "json_answer_not_a_call": ('{"answer": 42}', {}),
            "malformed_json": ('{"name": "get_weather", "parameters": {city: Paris}}', {}),
            "cut_mid_call": ('{"name": "get_weather", "parameters": {"ci', {}),
            "empty": ("", {}),
        },
        "deepseek-r1": {  # its generation prompt opens <think> (FAMILY_OPTIONS)
            "plain": ("It is sunny in Paris.", {"tools": []}),
            "reasoning": (OPEN_THINK + "It is sunny in Paris.", none),
            "reasoning_retyped_open": (THINK + "It is sunny in Paris.", none),
            "call": (OPEN_THINK + ds_calls(ds("get_weather", W)), {}),
            "two_calls": (OPEN_THINK + ds_calls(ds("get_weather", W), ds("get_time", T)), {}),
            "text_then_call": (OPEN_THINK + "Let me check.\n" + ds_calls(ds("get_weather", W)), {}),
            "call_in_reasoning": ("Maybe " + ds_calls(ds("get_weather", W)) + "\n</think>\n\nIt is sunny.", {}),
            "malformed_json": (OPEN_THINK + ds_calls(ds("get_weather", "{city: Paris}")), {}),
            "cut_mid_call": (OPEN_THINK + "<\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>"
                             "function<\uff5ctool\u2581sep\uff5c>get_weather\n```json\n{\"ci", {}),
            "cut_in_reasoning": ("The user asks about", {}),
            "no_think": ("\n\nIt is sunny in Paris.", {"enable_thinking": False, "tools": []}),
            "empty": ("", {}),
        },
        "hermes2pro": {  # the tool_use template: it is the one used when tools are offered
            "plain": ("It is sunny in Paris.", {}),
            "call": (hw, {}),
            "two_calls": (hw + "\n" + ht, {}),
            "text_then_call": ("Let me check.\n" + hw, {}),
            "malformed_json": ('<tool_call>\n{"name": "get_weather", "arguments": {city: Paris}}\n</tool_call>', {}),
            "cut_mid_call": ('<tool_call>\n{"name": "get_weather", "argu', {}),
            "empty": ("", {}),
        },
        "qwen2.5": {
            "plain": ("It is sunny in Paris.", none),
            "call": (hw, {}),
            "two_calls": (hw + "\n" + ht, {}),
            "unclosed_call": ('<tool_call>\n{"name": "get_weather", "arguments": ' + W + '}', {}),
            "malformed_json": ('<tool_call>\n{"name": "get_weather", "arguments": {city: Paris}}\n</tool_call>', {}),
            "empty": ("", {}),
        },
        "glm-4.6": {
            "plain": ("\nIt is sunny in Paris.", {"enable_thinking": False, "tools": []}),
            "reasoning": ("<think>The user asks about Paris.</think>\nIt is sunny in Paris.", none),
            "call": ("<think>I should check.</think>\n" + gw, {}),
            "two_calls": ("<think>I should check.</think>\n" + gw + "\n" + gt, {}),
            "call_in_reasoning": ("<think>Maybe " + gw + " is needed.</think>\nIt is sunny.", {}),
            "malformed_unclosed": ("<think>I should check.</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n"
                                   "<arg_value>Paris</tool_call>", {}),
            "cut_mid_call": ("<think>I should check.</think>\n<tool_call>get_weather\n<arg_key>ci", {}),
            "empty": ("", {}),
        },
        "gemma4": {
            "plain": ("It is sunny in Paris.", none),
            "plain_no_think": ("It is sunny in Paris.", {"enable_thinking": False, "tools": []}),
            "call_no_think": (g4("get_weather", f"city:{Q}Paris{Q}"), {"enable_thinking": False}),
            "reasoning": (G4_THOUGHT + "It is sunny in Paris.", {"tools": []}),
            "call": (g4("get_weather", f"city:{Q}Paris{Q}"), {}),
            "two_calls": (g4("get_weather", f"city:{Q}Paris{Q}") + g4("get_time", f"place:{Q}Tokyo{Q},with_seconds:true"),
                          {}),
            "reasoning_call": (G4_THOUGHT + g4("get_weather", f"city:{Q}Paris{Q}"), {}),
            "call_in_reasoning": ("<|channel>thought\nMaybe " + g4("get_weather", f"city:{Q}Paris{Q}") +
                                  "<channel|>It is sunny.", {}),
            "malformed_args": (f"<|tool_call>call:get_weather{{city:{Q}Paris}}<tool_call|>", {}),
            "cut_mid_call": (f"<|tool_call>call:get_weather{{city:{Q}Par", {}),
            "empty": ("", {}),
        },
    }
    return cases


# options every case of a family has unless it says otherwise
# (templates that read an unset enable_thinking as off, where llama-server passes true by default and
# llamapy, as transformers, leaves it unset: the cases set it, so both render the same prompt)
FAMILY_OPTIONS = {"deepseek-r1": {"enable_thinking": True}, "gemma4": {"enable_thinking": True}}


def build_cases(templates: pathlib.Path) -> list:
    out = []
    for family, kinds in family_cases().items():
        file, bos, eos = FAMILIES[family]
        for kind, (text, opts) in kinds.items():
            opts = {**FAMILY_OPTIONS.get(family, {}), **opts}
            case = {"id": f"{family}/{kind}", "family": family, "template": file, "bos": bos, "eos": eos,
                    "tools": opts.get("tools", TOOLS), "tool_choice": opts.get("tool_choice", "auto"),
                    "reasoning_format": opts.get("reasoning_format", "auto"), "text": text}
            if "enable_thinking" in opts:
                case["enable_thinking"] = opts["enable_thinking"]
            out.append(case)
    return out


def build_program(sdist: pathlib.Path, libs: pathlib.Path, workdir: pathlib.Path) -> pathlib.Path:
    exe = workdir / "record_llama_server_parse"
    src = pathlib.Path(__file__).with_suffix(".cpp")
    cmd = ["g++", "-std=c++17", "-O1", *(f"-I{sdist / p}" for p in ("common", "include", "ggml/include", "vendor")),
           str(src), f"-L{libs}", "-lllama-common", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{libs}",
           "-o", str(exe)]
    subprocess.run(cmd, check=True)
    return exe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sdist", required=True, type=pathlib.Path, help="the sdist's vendor/llama.cpp folder")
    ap.add_argument("--libs", required=True, type=pathlib.Path, help="folder with llama.cpp's shared libraries")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("tests/data/chat_parse/llama_server_parse.json"))
    args = ap.parse_args()
    templates = args.sdist / "models" / "templates"
    cases = build_cases(templates)
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        exe = build_program(args.sdist, args.libs, work)
        feed = [dict(c, template_path=str(templates / c["template"])) for c in cases]
        (work / "cases.json").write_text(json.dumps({"cases": feed}, ensure_ascii=False), encoding="utf-8")
        subprocess.run([str(exe), str(work / "cases.json"), str(work / "out.json")], check=True)
        answers = {r.pop("id"): r for r in json.loads((work / "out.json").read_text(encoding="utf-8"))}
    used = sorted({c["template"] for c in cases})
    record = {
        "generator": "tools/record_llama_server_parse.py",
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "templates": {f: hashlib.sha256((templates / f).read_bytes()).hexdigest() for f in used},
        "cases": [dict(c, llama_server=answers[c["id"]]) for c in cases],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    n_err = sum("error" in c["llama_server"] for c in record["cases"])
    print(f"{len(cases)} cases ({n_err} where llama-server's parser throws) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
