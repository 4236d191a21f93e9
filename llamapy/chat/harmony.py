"""gpt-oss's harmony replies: messages on channels, taken apart as they stream.

After the prompt's ``<|start|>assistant`` gpt-oss writes one or more
messages, each a header, ``<|message|>``, a body and an end marker, back to
back (the line breaks below are only for reading)::

    <|channel|>analysis<|message|>thinking...<|end|>
    <|start|>assistant<|channel|>final<|message|>the answer<|return|>

or, calling a tool::

    <|channel|>analysis<|message|>thinking...<|end|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
    <|message|>{"city": "Rome"}<|call|>

The recipient ``to=...`` may also stand before ``<|channel|>``
(``<|start|>assistant to=functions.x<|channel|>commentary json<|message|>``).
A message to a recipient (``functions.NAME``: the tool NAME) is a tool call,
the analysis channel is reasoning, everything else (the final channel,
commentary to no one: preambles) is content. ``<|return|>`` and ``<|call|>``
end the generation (``STOP``; the model's vocabulary also marks them
end-of-generation), so a reply's last message has no end marker.

Not here: the prompt side (the model's chat template writes it); the choice of
this syntax for a model (``reasoning.py``).
"""
from __future__ import annotations

import json
import logging
import re
from typing import Any, List, Optional, Tuple

from .tools import make_call, partial_marker_len

logger = logging.getLogger("llamapy")

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, RETURN, CALL = "<|end|>", "<|return|>", "<|call|>"
STOP = (RETURN, CALL)  # the stop strings of a harmony chat; <|end|> only ends a message
# What ends a message body: an end marker, or the header of a next message written without one.
_BODY_ENDS = (END, RETURN, CALL, START, CHANNEL)
_HEADER_STARTS = (CHANNEL, START, " to=")
_RECIPIENT = re.compile(r"\bto=([^\s<]+)")
_CHANNEL_NAME = re.compile(r"<\|channel\|>\s*([^\s<]+)")

Piece = Tuple[str, Any]  # ("reasoning" | "content", text) or ("call", an OpenAI tool call)


def header_kind(header: str) -> Tuple[str, Optional[str]]:
    """What the message with this header is: ("call", the tool's name),
    ("reasoning", None) or ("content", None)."""
    to = _RECIPIENT.search(header)
    if to and to.group(1) != "assistant":
        name = to.group(1)
        return "call", name[len("functions."):] if name.startswith("functions.") else name
    channel = _CHANNEL_NAME.search(header)
    if channel and channel.group(1) == "analysis":
        return "reasoning", None
    return "content", None


class HarmonySplitter:
    """``push(text)`` -> the pieces that text completes; ``finish()`` -> the
    rest. A tool call is one piece, given when its message ends. A reply that
    does not begin with a header is plain content."""

    def __init__(self) -> None:
        self.state = "start"  # start | header | body | between (after an end marker) | plain
        self.buf = ""         # text not yet given out: a header, or what may begin a marker
        self.kind: str = "content"
        self.name: Optional[str] = None
        self.args = ""        # the body of a tool-call message so far

    def push(self, text: str) -> List[Piece]:
        self.buf += text
        out: List[Piece] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> List[Piece]:
        out: List[Piece] = []
        if self.state == "body":
            self._body(out, self.buf)
            self._end(out)
        elif self.state in ("start", "plain") and self.buf:
            out.append(("content", self.buf))
        elif self.state == "header":
            logger.warning("llamapy: the reply ended inside a harmony message header; dropped %r", self.buf[:200])
        self.buf, self.state = "", "between"
        return out

    def _step(self, out: List[Piece]) -> bool:
        """One move of the state machine; False when it needs more text."""
        if self.state in ("start", "between"):
            if self.state == "between":
                self.buf = self.buf.lstrip()
            buf = self.buf
            if not buf or any(len(buf) < len(m) and m.startswith(buf) for m in _HEADER_STARTS):
                return False
            if buf.startswith(_HEADER_STARTS):
                self.state = "header"
            elif self.state == "start":
                self.state = "plain"
            else:  # text after an end marker with no header: more of the answer
                self.state, self.kind = "body", "content"
            return True
        if self.state == "plain":
            if self.buf:
                out.append(("content", self.buf))
                self.buf = ""
            return False
        if self.state == "header":
            i = self.buf.find(MESSAGE)
            if i < 0:
                return False
            self.kind, self.name = header_kind(self.buf[:i])
            self.buf, self.state, self.args = self.buf[i + len(MESSAGE):], "body", ""
            return True
        hits = [(i, m) for i, m in ((self.buf.find(m), m) for m in _BODY_ENDS) if i >= 0]
        if hits:
            i, marker = min(hits)
            self._body(out, self.buf[:i])
            self._end(out)
            if marker in (START, CHANNEL):
                self.buf, self.state = self.buf[i:], "header"
            else:
                self.buf, self.state = self.buf[i + len(marker):], "between"
            return True
        keep = partial_marker_len(self.buf, _BODY_ENDS)
        self._body(out, self.buf[: len(self.buf) - keep])
        self.buf = self.buf[len(self.buf) - keep:]
        return False

    def _body(self, out: List[Piece], text: str) -> None:
        if not text:
            return
        if self.kind == "call":
            self.args += text
        else:
            out.append((self.kind, text))

    def _end(self, out: List[Piece]) -> None:
        if self.kind == "call":
            args = self.args.strip() or "{}"
            try:
                json.loads(args)
                out.append(("call", make_call(self.name or "", args)))
            except ValueError:  # malformed or cut short: no call, the text stays (issue 35)
                logger.warning("llamapy: a harmony call of %r whose arguments are not JSON is kept as text",
                               self.name)
                out.append(("content", self.args))
            self.args = ""
        self.kind, self.name = "content", None
