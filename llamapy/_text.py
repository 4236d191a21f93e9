"""Streaming text helpers: incremental UTF-8 decoding and stop-string matching.

Generation produces bytes token by token; a multi-byte character may be split
across tokens, and a stop string may be split across chunks. These two small
state machines make sure a stream never shows a garbled character and never
shows any part of a stop string.
"""
from __future__ import annotations

import codecs
import re
from typing import Dict, List, Optional, Sequence, Tuple

# Invalid bytes decoded with errors="surrogateescape" become U+DC80..U+DCFF;
# valid UTF-8 never decodes to a lone surrogate, so these mark exactly them.
_INVALID = re.compile("[\udc80-\udcff]+")


def drop_invalid(text: str) -> str:
    """``text`` without the invalid-byte marks of ``Utf8Stream.feed_marked``."""
    return text if text.isascii() else _INVALID.sub("", text)


class Utf8Stream:
    """Incremental UTF-8 decoder: feed bytes, get the complete characters.

    Bytes of an unfinished character are held back until the rest arrives.
    Bytes that cannot be part of a valid character are dropped, as
    ``bytes.decode(errors="ignore")`` (what llama-cpp-python shows), so the
    text never contains a U+FFFD that the model did not write.

    ``feed_marked`` keeps each dropped byte as a lone surrogate instead: stop
    strings are then matched on text in which an invalid byte still separates
    its neighbours (llama-cpp-python matches stops on the raw bytes), and
    ``drop_invalid`` removes the marks before the text is shown.
    ``n_chars`` counts the valid characters decoded so far (text offsets).
    """

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self.n_chars = 0

    def _count(self, out: str) -> str:
        self.n_chars += len(out) if out.isascii() else len(drop_invalid(out))
        return out

    def feed_marked(self, data: bytes) -> str:
        return self._count(self._dec.decode(data, final=False))

    def flush_marked(self) -> str:
        """The end of the input: an unfinished character is invalid now."""
        return self._count(self._dec.decode(b"", final=True))

    def feed(self, data: bytes) -> str:
        return drop_invalid(self.feed_marked(data))

    def flush(self) -> str:
        return drop_invalid(self.flush_marked())


class StopMatcher:
    """Finds the first stop string in a growing text and holds back any tail
    that could still become one.

    ``push(text)`` returns ``(safe, stopped)``: ``safe`` is new text that can
    be shown now; ``stopped`` is True once a stop string was found (everything
    from it on is dropped, and later pushes return nothing).
    Work per push is proportional to the new text and the stop lengths, not to
    the whole generated text.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops: List[str] = [s for s in stops if s]
        self._max = max((len(s) for s in self.stops), default=0)
        self._pending = ""   # text not yet released (may start a stop string)
        self.stopped = False
        self.matched: Optional[str] = None

    def push(self, text: str) -> Tuple[str, bool]:
        if self.stopped:
            return "", True
        if not self.stops:
            return text, False
        buf = self._pending + text
        # Earliest complete stop string in the buffer (ties: the longer one).
        first = -1
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (first < 0 or i < first or (i == first and len(s) > len(self.matched or ""))):
                first, self.matched = i, s
        if first >= 0:
            self.stopped = True
            self._pending = ""
            return buf[:first], True
        # Hold back the longest tail that is a prefix of some stop string.
        hold = 0
        for k in range(min(len(buf), self._max - 1), 0, -1):
            tail = buf[-k:]
            if any(s.startswith(tail) for s in self.stops):
                hold = k
                break
        self._pending = buf[len(buf) - hold:] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        """Releases held-back text at the end of generation (no stop matched)."""
        out, self._pending = ("" if self.stopped else self._pending), ""
        return out


def gpt2_byte_chars() -> Dict[int, str]:
    """GPT-2's reversible byte -> printable character map: how byte-level BPE
    vocabularies spell the 256 byte values."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out
