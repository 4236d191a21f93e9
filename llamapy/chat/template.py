"""Render Jinja2 chat templates safely.

``ChatTemplate`` compiles a chat template (a GGUF's ``tokenizer.chat_template``,
a ``tokenizer_config.json`` template, or any Jinja text) the way Hugging Face
transformers renders them: an immutable sandbox, ``trim_blocks`` and
``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}`` tag, ``tojson``
with ``ensure_ascii=False``, and the ``raise_exception`` / ``strftime_now``
globals. It does not tokenize or generate (``completion.py`` does).

Templates come from model files, that is, from strangers, so rendering is
bounded: touching Python internals (``''.__class__``, ``cycler.__init__``)
raises ``ChatTemplateSecurityError`` at once; every loop step, call, attribute
access and guarded operator checks a time budget; ``*``, ``+``, ``~``, ``%``,
``**``, filters and string methods may not build values past the size cap,
nor may the output. Breaking a limit raises ``ChatTemplateLimitError``.
"""
from __future__ import annotations

import functools
import json
import re
import time
import types
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.sandbox import ImmutableSandboxedEnvironment, SecurityError

__all__ = ["ChatTemplate", "ChatTemplateError", "ChatTemplateLimitError", "ChatTemplateSecurityError",
           "RenderLimits", "compile_template"]


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render, or called ``raise_exception``."""


class ChatTemplateSecurityError(SecurityError, ChatTemplateError):
    """A chat template reached for something the sandbox forbids."""


class ChatTemplateLimitError(ChatTemplateError):
    """A chat template ran too long or built too large a value."""


@dataclass(frozen=True)
class RenderLimits:
    max_chars: int = 16 * 1024 * 1024   # largest string/list a template may build, and the output size
    max_seconds: float = 5.0            # wall-clock budget of one render
    max_int_bits: int = 4096            # largest integer ``**`` may produce


class _Budget:
    """Per-render state, reached through a ContextVar (renders may run in many threads)."""

    __slots__ = ("limits", "deadline", "emitted")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.deadline = time.monotonic() + limits.max_seconds
        self.emitted = 0  # characters printed by {{ ... }} anywhere (macros and set blocks too)

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise ChatTemplateLimitError(
                f"chat template rendering exceeded its time budget of {self.limits.max_seconds:g} s")

    def check_size(self, n: int, what: str) -> None:
        if n > self.limits.max_chars:
            raise ChatTemplateLimitError(
                f"chat template tried to build {what} of {n} items (limit {self.limits.max_chars})")


_budget: ContextVar[Optional[_Budget]] = ContextVar("llamapy_chat_template_budget", default=None)


def _tick() -> Optional[_Budget]:
    b = _budget.get()
    if b is not None:
        b.tick()
    return b


def _sized(value: Any) -> Optional[int]:
    return len(value) if isinstance(value, (str, bytes, list, tuple)) else None


def _check_ints(b: _Budget, values: Iterable[Any]) -> None:
    for v in values:
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > b.limits.max_chars:
            raise ChatTemplateLimitError(f"chat template passed {v} where sizes are limited to {b.limits.max_chars}")


_PERCENT_SPEC = re.compile(r"%[^a-zA-Z%]*")
_BRACE_SPEC = re.compile(r"\{[^{}]*\}")
_DIGITS = re.compile(r"\d+")


def _check_format_string(b: _Budget, fmt: str, spec: "re.Pattern[str]") -> None:
    """Field widths and precisions inside a %- or {}-format string."""
    for m in spec.finditer(fmt):
        _check_ints(b, (int(d) for d in _DIGITS.findall(m.group())))


def _check_binop(b: _Budget, op: str, left: Any, right: Any) -> None:
    if op == "*":
        for seq, n in ((left, right), (right, left)):
            size = _sized(seq)
            if size is not None and isinstance(n, int):
                b.check_size(size * max(n, 0), "a repeated sequence")
    elif op == "+":
        ls, rs = _sized(left), _sized(right)
        if ls is not None and rs is not None:
            b.check_size(ls + rs, "a concatenation")
    elif op == "%" and isinstance(left, str):
        _check_format_string(b, left, _PERCENT_SPEC)
        _check_ints(b, right if isinstance(right, tuple) else (right,))
    elif op == "**" and isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
        if right * abs(left).bit_length() > b.limits.max_int_bits:
            raise ChatTemplateLimitError(f"chat template tried to compute {left} ** {right}")


def _check_join(b: _Budget, items: Sequence[Any], sep: Any) -> None:
    total = sum(len(x) for x in items if isinstance(x, (str, bytes)))
    b.check_size(total + len(str(sep)) * max(len(items) - 1, 0), "a joined string")


def _check_replace(b: _Budget, text: str, args: Sequence[Any]) -> None:
    if len(args) >= 2:
        old, new = str(args[0]), str(args[1])
        hits = text.count(old) if old else len(text) + 1
        b.check_size(len(text) + hits * max(len(new) - len(old), 0), "a replaced string")


def _check_method_call(b: _Budget, obj: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> None:
    """Bound methods of str/bytes/list whose result size depends on arguments."""
    wrapped = getattr(obj, "__wrapped__", None)  # the sandbox wraps str.format / format_map
    if wrapped is not None and isinstance(getattr(wrapped, "__self__", None), str):
        _check_format_string(b, wrapped.__self__, _BRACE_SPEC)
    owner = getattr(obj, "__self__", None)
    if not isinstance(obj, (types.BuiltinMethodType, types.MethodWrapperType)) or \
            not isinstance(owner, (str, bytes, list, tuple)):
        return
    _check_ints(b, list(args) + list(kwargs.values()))
    if obj.__name__ == "join" and args:
        _check_join(b, args[0] if isinstance(args[0], (list, tuple)) else list(args[0]), owner)
    elif obj.__name__ == "replace" and isinstance(owner, str):
        _check_replace(b, owner, args)


def _guard_filter(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a filter: budget tick, size-like arguments, join/replace/format
    results estimated before they are built, result size after."""
    n_lead = 2 if getattr(func, "jinja_pass_arg", None) is not None else 1  # [context,] value

    @functools.wraps(func)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        b = _tick()
        if b is not None and len(args) >= n_lead:
            value, rest = args[n_lead - 1], args[n_lead:]
            _check_ints(b, list(rest) + list(kwargs.values()))
            if name == "join":
                if not isinstance(value, (str, list, tuple)):
                    value = list(value)
                    args = args[: n_lead - 1] + (value,) + rest
                _check_join(b, value, rest[0] if rest else kwargs.get("d", ""))
            elif name == "replace" and isinstance(value, str):
                _check_replace(b, value, rest)
            elif name == "format" and isinstance(value, str):
                _check_format_string(b, value, _PERCENT_SPEC)
        result = func(*args, **kwargs)
        size = _sized(result)
        if b is not None and size is not None:
            b.check_size(size, f"a value (filter {name!r})")
        return result

    return guarded


class _GuardedCodeGenerator(CodeGenerator):
    """Compiles every for-loop's iterable as ``environment.loop_guard(...)``
    (each iteration checks the time budget) and ``~`` as
    ``environment.concat_guard(...)`` (size-checked)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loop_iters: set = set()

    def visit_For(self, node: nodes.For, frame: Any) -> None:
        self._loop_iters.add(id(node.iter))
        super().visit_For(node, frame)

    def visit(self, node: nodes.Node, *args: Any, **kwargs: Any) -> Any:
        if id(node) in self._loop_iters:
            self._loop_iters.discard(id(node))
            self.write("environment.loop_guard(")
            super().visit(node, *args, **kwargs)
            self.write(")")
            return None
        return super().visit(node, *args, **kwargs)

    def visit_Concat(self, node: nodes.Concat, frame: Any) -> None:  # the ``~`` operator
        self.write("environment.concat_guard((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` marks assistant text for
    training masks in transformers; here it renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> List[nodes.Node]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _SandboxEnvironment(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "+", "%", "**"})
    code_generator_class = _GuardedCodeGenerator

    def __init__(self, dialect: str = "transformers") -> None:
        super().__init__(trim_blocks=True, lstrip_blocks=True,
                         finalize=_finalize_none_empty if dialect == "transformers" else _finalize,
                         extensions=[jinja2.ext.loopcontrols, _GenerationTag])
        if dialect == "transformers":
            self.filters["tojson"] = tojson
            self.globals["raise_exception"] = raise_exception
            self.globals["strftime_now"] = strftime_now
        # "jinja", as llama-cpp-python's hf_tokenizer_config_to_chat_formatter
        # renders: Jinja's own tojson (HTML-escaped, sorted keys) and no
        # raise_exception / strftime_now (templates test ``strftime_now is defined``).
        self.filters = {name: _guard_filter(name, f) for name, f in self.filters.items()}

    def unsafe_undefined(self, obj: Any, attribute: str) -> Any:
        raise ChatTemplateSecurityError(
            f"chat template accessed attribute {attribute!r} of a {type(obj).__name__!r} object, "
            "which the sandbox forbids")

    def getattr(self, obj: Any, attribute: str) -> Any:
        _tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        _tick()
        return super().getitem(obj, argument)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        b = _tick()
        if b is not None:
            _check_binop(b, operator, left, right)
        return super().call_binop(context, operator, left, right)

    def call(self, context: Any, obj: Any, /, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        b = _tick()
        if not self.is_safe_callable(obj):
            raise ChatTemplateSecurityError(f"chat template called {obj!r}, which is not safely callable")
        if b is not None:
            _check_method_call(b, obj, args, kwargs)
            if obj is self.globals.get("lipsum"):
                _check_ints(b, list(args) + list(kwargs.values()))
        result = context.call(obj, *args, **kwargs)
        size = _sized(result)
        if b is not None and size is not None:
            b.check_size(size, "a value")
        return result

    def loop_guard(self, iterable: Any) -> Iterator[Any]:
        for item in iterable:
            _tick()
            yield item

    def concat_guard(self, parts: Sequence[Any]) -> str:
        texts = [str(p) for p in parts]
        b = _tick()
        if b is not None:
            b.check_size(sum(len(t) for t in texts), "a string (~)")
        return "".join(texts)


def _finalize(value: Any) -> Any:
    """Runs on every ``{{ ... }}`` output, including inside macros and set blocks."""
    b = _budget.get()
    if b is not None and isinstance(value, str):
        b.tick()
        b.emitted += len(value)
        if b.emitted > 4 * b.limits.max_chars:
            raise ChatTemplateLimitError(f"chat template printed more than {4 * b.limits.max_chars} characters")
    return value


def _finalize_none_empty(value: Any) -> Any:
    """transformers' dialect: ``{{ x }}`` of a None prints nothing, as the
    message key transformers 5 leaves out does (``{{ message.content }}`` of
    a tool call without content), where Jinja prints "None" (so does
    transformers for its other None values, ``{{ tools }}`` without tools)."""
    return "" if value is None else _finalize(value)


def raise_exception(message: str) -> None:
    raise ChatTemplateError(str(message))


def strftime_now(fmt: str) -> str:
    return datetime.now().strftime(str(fmt))


def tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
           separators: Optional[Sequence[str]] = None, sort_keys: bool = False) -> str:
    """``tojson`` as transformers defines it: no HTML escaping, non-ASCII kept."""
    seps = tuple(separators) if separators is not None else None
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=seps,  # type: ignore[arg-type]
                      sort_keys=sort_keys)


# A message's reasoning, under the names clients and templates use for it:
# OpenAI-style APIs and most templates say reasoning_content, gpt-oss's says thinking.
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


def template_messages(messages: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Messages as transformers (5.x) hands them to a template: keys whose
    value is None left out (templates test "is defined": ``tool_calls: null``
    is no tool calls), and a message's reasoning under both
    ``reasoning_content`` and ``thinking`` (gpt-oss's template reads the
    latter). A None content is kept, as transformers 4 kept it: templates
    of its time test ``content is none``."""
    out = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)
            continue
        m = {k: v for k, v in m.items() if v is not None or k == "content"}
        reasoning = next((m[k] for k in REASONING_KEYS if k in m), None)
        if reasoning is not None:
            m = {"thinking": reasoning, **m, "reasoning_content": reasoning}
        out.append(m)
    return out


def _empty_call(message: Any) -> bool:
    return isinstance(message, dict) and message.get("role") == "assistant" and \
        message.get("content", "") is None and bool(message.get("tool_calls"))


DIALECTS = ("transformers", "jinja")


@functools.lru_cache(maxsize=len(DIALECTS))
def _environment(dialect: str = "transformers") -> _SandboxEnvironment:
    return _SandboxEnvironment(dialect)


class ChatTemplate:
    """A compiled chat template. Rendering is thread-safe."""

    def __init__(self, source: str, limits: RenderLimits = RenderLimits(), dialect: str = "transformers") -> None:
        """``dialect``: "transformers" (its ``tojson``: no HTML escaping,
        keys in order) or "jinja" (Jinja's own ``tojson``)."""
        if not isinstance(source, str):
            raise TypeError("a chat template must be a str")
        if dialect not in DIALECTS:
            raise ValueError(f"dialect must be one of {DIALECTS}, not {dialect!r}")
        self.source = source
        self.limits = limits
        try:
            self._template = _environment(dialect).from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"chat template does not compile: {e} (line {e.lineno})") from e

    def render(self, messages: Sequence[Dict[str, Any]], *, add_generation_prompt: bool = True,
               tools: Optional[Sequence[Dict[str, Any]]] = None, documents: Optional[Sequence[Any]] = None,
               bos_token: str = "", eos_token: str = "", **extra: Any) -> str:
        """Render ``messages`` (OpenAI-shaped dicts), prepared as transformers'
        ``apply_chat_template`` prepares them (``template_messages``).
        ``tools`` and ``documents`` are passed as None when absent, as
        transformers does; ``extra`` variables (``enable_thinking``,
        ``date_string``, ...) reach the template as they are.

        An assistant's tool-call message often has no content (null from
        OpenAI clients). Templates written for it test ``content is none``
        (DeepSeek-R1-Distill's); others use it as a string (Qwen3's,
        gpt-oss's) and fail on None: for those it is rendered again with ""."""
        msgs = template_messages(messages)
        context = dict(extra, messages=msgs, add_generation_prompt=add_generation_prompt,
                       tools=list(tools) if tools else None, documents=list(documents) if documents else None,
                       bos_token=bos_token, eos_token=eos_token)
        try:
            return self.render_variables(context)
        except (ChatTemplateSecurityError, ChatTemplateLimitError):
            raise
        except ChatTemplateError:
            with_text = [dict(m, content="") if _empty_call(m) else m for m in msgs]
            if with_text == msgs:
                raise
            return self.render_variables(dict(context, messages=with_text))

    def render_variables(self, context: Dict[str, Any]) -> str:
        """Render with exactly these template variables (nothing added), for
        callers that must pass what another renderer passes."""
        budget = _Budget(self.limits)
        token = _budget.set(budget)
        out: List[str] = []
        size = 0
        try:
            for chunk in self._template.generate(context):
                size += len(chunk)
                if size > self.limits.max_chars:
                    raise ChatTemplateLimitError(f"chat template output exceeds {self.limits.max_chars} characters")
                out.append(chunk)
        except ChatTemplateError:
            raise
        except SecurityError as e:
            raise ChatTemplateSecurityError(str(e)) from e
        except (RecursionError, OverflowError, MemoryError) as e:
            raise ChatTemplateLimitError(f"chat template exceeded a limit: {type(e).__name__}: {e}") from e
        except Exception as e:
            raise ChatTemplateError(f"chat template failed: {type(e).__name__}: {e}") from e
        finally:
            _budget.reset(token)
        return "".join(out)


@functools.lru_cache(maxsize=64)
def compile_template(source: str) -> ChatTemplate:
    """A cached ChatTemplate for ``source`` (compiling a large template takes milliseconds)."""
    return ChatTemplate(source)
