"""Reasoning in chat replies: where a model's thinking ends and its answer begins.

Reasoning models write their thinking before the answer in one of two
syntaxes, which chat replies take apart into ``reasoning_content`` and
``content`` (as llama-server's default ``reasoning_format`` does):

- think tags (Qwen3, DeepSeek-R1/V3.1, GLM-4.5/4.6): ``<think>thinking</think>answer``,
  where the generation prompt may already have opened ``<think>``;
- Gemma 4's thought channel: ``<|channel>thought\nthinking<channel|>answer`` (the same
  splitter with other markers; a further channel block in the answer is thinking too, a
  stray ``<channel|>`` is dropped, as llama-server's Gemma 4 parser consumes them);
- harmony (gpt-oss): messages on channels (``harmony.py``), tool calls included.

``template_syntax`` tells a chat template's syntax from its text and
``reply_syntax`` the syntax of the reply to one rendered prompt: the one
place that decides. ``reply_splitter`` gives the splitter for a syntax: it
takes the reply piece by piece as it streams (``push``) and says what each
piece is, ("reasoning", text), ("content", text) or ("call", tool call),
holding back only what may be the start of a marker; ``finish`` gives the
rest. ``split_reply`` runs one over a whole reply, so a streamed reply and a
whole one are split by the same code.

Not here: tool calls written in the content (``tools.py``); chunks and
messages (``completion.py``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional, Tuple, Union

from .harmony import CHANNEL, END, MESSAGE, START, HarmonySplitter, Piece
from .tools import ToolCall, partial_marker_len

THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
GEMMA4_OPEN, GEMMA4_CLOSE = "<|channel>thought", "<channel|>"

# Control tokens whose text a reply of each syntax must show (llama-server's "preserved
# tokens"): detokenized without them the markers vanish and thinking runs into the answer.
# gpt-oss's are marked by the vocabulary itself (vendor/engine/vocab/vocab.cpp).
SHOWN_TOKENS = {"gemma4": ("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>')}

# llama-server's --reasoning-format values that llamapy takes: "auto" and
# "deepseek" put the reasoning into reasoning_content, "none" leaves the raw
# text in content.
REASONING_FORMATS = ("auto", "deepseek", "none")


def check_reasoning_format(value: Any) -> str:
    if value not in REASONING_FORMATS:
        raise ValueError(f"reasoning_format must be one of {', '.join(REASONING_FORMATS)}, not {value!r}")
    return value


def template_syntax(source: str) -> Optional[str]:
    """The reasoning syntax of a chat template's model: "harmony" (the
    template writes ``<|channel|>``), "gemma4" (``<|channel>`` ... ``<channel|>``),
    "think" (it knows ``</think>``: it
    writes think blocks, or cuts them out of earlier answers, as
    DeepSeek-R1-Distill's first template does), else None."""
    if CHANNEL in source:
        return "harmony"
    if GEMMA4_CLOSE in source and "<|channel>" in source:
        return "gemma4"
    if THINK_CLOSE in source:
        return "think"
    return None


@dataclass(frozen=True)
class ThinkingBudget:
    """At most ``limit`` tokens of thinking: then the closing marker is
    appended to the reply and the answer follows (the completion loop does
    it: llamapy/_completion.py). ``opened``: the prompt opened the thinking."""

    limit: int
    open_text: str
    close_text: str
    opened: bool


def check_reasoning_budget(value: Any) -> Optional[int]:
    """A reasoning budget: None or -1 (no limit), else the tokens of thinking allowed (0: none)."""
    if value is None or value == -1:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"reasoning_budget must be -1 (no limit) or a number of tokens >= 0, not {value!r}")
    return value


def thinking_budget(syntax: Optional[str], limit: Optional[int]) -> Optional[ThinkingBudget]:
    """The budget for a reply of ``syntax`` (reply_syntax), None without a
    limit or for a reply with no thinking syntax."""
    if limit is None:
        return None
    if syntax in ("think", "think-open"):
        return ThinkingBudget(limit, THINK_OPEN, THINK_CLOSE, syntax == "think-open")
    if syntax == "gemma4":
        return ThinkingBudget(limit, GEMMA4_OPEN, GEMMA4_CLOSE, False)
    if syntax == "harmony":  # the analysis channel is the thinking; the final channel the answer
        return ThinkingBudget(limit, f"{CHANNEL}analysis{MESSAGE}", f"{END}{START}assistant{CHANNEL}final{MESSAGE}",
                              False)
    return None


def reply_syntax(template: Optional[str], prompt: str) -> Optional[str]:
    """The syntax of the reply to ``prompt``: the template's, "think"
    becoming "think-open" when the prompt ends inside a think block (its
    generation prompt opened one), "think-closed" when it ends with an empty
    block it closed itself (thinking turned off: GLM-4.6 and Qwen3 with
    enable_thinking false)."""
    if template == "think" and prompt.rstrip().endswith(THINK_OPEN):
        return "think-open"
    if template == "think" and prompt.rstrip().endswith(THINK_CLOSE):
        return "think-closed"
    return template


class PlainReply:
    """A reply with no reasoning syntax: all of it is content."""

    def push(self, text: str) -> List[Piece]:
        return [("content", text)] if text else []

    def finish(self) -> List[Piece]:
        return []


class ThinkSplitter:
    """``<think>reasoning</think>content``. The reasoning loses the
    whitespace around it, the content the whitespace before it. A reply that
    does not begin with ``<think>`` (after whitespace) is all content, unless
    the prompt opened the block (``opened``: a ``<think>`` the model writes
    again is dropped); a block never closed is all reasoning. ``closed``: the
    prompt closed an empty block, and the reply is content."""

    def __init__(self, opened: bool = False, marks: Tuple[str, str] = (THINK_OPEN, THINK_CLOSE),
                 reopen: bool = False, closed: bool = False) -> None:
        self.opened = opened
        self.open, self.close = marks
        # reopen: in the content, the opening marker starts more thinking and a stray closing
        # marker is dropped (Gemma 4); otherwise the content is the text as it is
        self.reopen = reopen
        self.state = "start"  # start | reasoning | content
        self.buf = ""         # text not yet given out
        self.lead = True      # the whitespace at the head of the current part is still to be dropped
        if closed:  # the prompt closed the block: all content, less the whitespace that follows the block
            self.state = "content"

    def push(self, text: str) -> List[Piece]:
        self.buf += text
        out: List[Piece] = []
        while True:
            if self.state == "start":
                head = self.buf.lstrip()
                if not head or (len(head) < len(self.open) and self.open.startswith(head)):
                    return out
                if head.startswith(self.open):
                    self.buf, self.state, self.lead = head[len(self.open):], "reasoning", True
                elif self.opened:
                    self.state = "reasoning"
                else:
                    self.state, self.lead = "content", False  # no think block: the text as it is
                continue
            if self.lead:
                self.buf = self.buf.lstrip()
                if not self.buf:
                    return out
                self.lead = False
            if self.state == "content":
                if not self.reopen:
                    _add(out, "content", self.buf)
                    self.buf = ""
                    return out
                at = [(i, m) for i, m in ((self.buf.find(m), m) for m in (self.open, self.close)) if i >= 0]
                if at:
                    i, m = min(at)
                    _add(out, "content", self.buf[:i])
                    self.buf = self.buf[i + len(m):]
                    if m == self.open:
                        self.state, self.lead = "reasoning", True
                    continue
                keep = partial_marker_len(self.buf, (self.open, self.close))
                _add(out, "content", self.buf[: len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep:]
                return out
            end = self.buf.find(self.close)
            if end >= 0:
                _add(out, "reasoning", self.buf[:end].rstrip())
                self.buf, self.state, self.lead = self.buf[end + len(self.close):], "content", True
                continue
            # Held back: what may begin the closing marker, and trailing whitespace (it may end the reasoning).
            keep = partial_marker_len(self.buf, (self.close,))
            sure = self.buf[: len(self.buf) - keep].rstrip()
            _add(out, "reasoning", sure)
            self.buf = self.buf[len(sure):]
            return out

    def finish(self) -> List[Piece]:
        out: List[Piece] = []
        if self.state == "reasoning":
            _add(out, "reasoning", (self.buf.lstrip() if self.lead else self.buf).rstrip())
        elif self.state == "start":
            _add(out, "reasoning" if self.opened else "content", self.buf.strip() if self.opened else self.buf)
        elif not self.lead:
            _add(out, "content", self.buf)
        self.buf = ""
        return out


def _add(out: List[Piece], kind: str, text: str) -> None:
    if text:
        out.append((kind, text))


Splitter = Union[PlainReply, ThinkSplitter, HarmonySplitter]


def reply_splitter(syntax: Optional[str]) -> Splitter:
    """The splitter for a reply of this syntax (``reply_syntax``; None: plain)."""
    if syntax == "harmony":
        return HarmonySplitter()
    if syntax in ("think", "think-open", "think-closed"):
        return ThinkSplitter(opened=syntax == "think-open", closed=syntax == "think-closed")
    if syntax == "gemma4":
        return ThinkSplitter(marks=(GEMMA4_OPEN, GEMMA4_CLOSE), reopen=True)
    return PlainReply()


def split_reply(syntax: Optional[str], text: str) -> Tuple[str, str, List[ToolCall]]:
    """A whole reply as (reasoning, content, tool calls of the syntax itself)."""
    splitter = reply_splitter(syntax)
    pieces = splitter.push(text) + splitter.finish()
    return ("".join(v for k, v in pieces if k == "reasoning"), "".join(v for k, v in pieces if k == "content"),
            [v for k, v in pieces if k == "call"])
