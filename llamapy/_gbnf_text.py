"""Writing GBNF text from Python: literals, character classes, and the JSON
encoding of "one character from this set" (used by the JSON-schema and regex
converters). Character sets are sorted lists of inclusive (lo, hi) code point
ranges. Nothing here parses GBNF; that is the native engine's job.
"""
from __future__ import annotations

from typing import Iterable, List, Sequence, Tuple

Ranges = List[Tuple[int, int]]

MAX_CP = 0x10FFFF
# Decoded characters JSON cannot hold raw inside a string (they need an escape);
# U+007F is legal raw but, as in llama.cpp's grammars, is kept escaped.
_JSON_NEEDS_ESCAPE: Ranges = [(0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F)]
_SHORT_ESCAPES = {0x08: "b", 0x09: "t", 0x0A: "n", 0x0C: "f", 0x0D: "r"}


def normalize(ranges: Iterable[Tuple[int, int]]) -> Ranges:
    out: Ranges = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def complement(ranges: Sequence[Tuple[int, int]]) -> Ranges:
    out: Ranges = []
    nxt = 0
    for lo, hi in normalize(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CP:
        out.append((nxt, MAX_CP))
    return out


def subtract(ranges: Sequence[Tuple[int, int]], minus: Sequence[Tuple[int, int]]) -> Ranges:
    keep = complement(minus)
    out: Ranges = []
    for lo, hi in normalize(ranges):
        for klo, khi in keep:
            a, b = max(lo, klo), min(hi, khi)
            if a <= b:
                out.append((a, b))
    return normalize(out)


def contains(ranges: Sequence[Tuple[int, int]], cp: int) -> bool:
    return any(lo <= cp <= hi for lo, hi in ranges)


def _escape_cp(cp: int, in_class: bool) -> str:
    ch = chr(cp)
    if ch == "\\":
        return "\\\\"
    if ch == '"':
        return '\\"'
    if in_class and ch in "[]^-":
        return "\\" + ch
    if ch == "\n":
        return "\\n"
    if ch == "\r":
        return "\\r"
    if ch == "\t":
        return "\\t"
    if cp < 0x20 or cp == 0x7F:
        return "\\x%02X" % cp
    if cp > 0x7E and (in_class or not ch.isprintable()):
        return "\\u%04X" % cp if cp <= 0xFFFF else "\\U%08X" % cp
    return ch


def literal(text: str) -> str:
    """A GBNF literal matching exactly `text`."""
    return '"' + "".join(_escape_cp(ord(c), False) for c in text) + '"'


def char_class(ranges: Sequence[Tuple[int, int]]) -> str:
    """A GBNF character class for the (non-empty) set, negated when shorter."""
    ranges = normalize(ranges)
    neg = complement(ranges)
    shorter = 0 < len(neg) and (len(neg) < len(ranges) or (len(neg) == len(ranges) and ranges[-1][1] == MAX_CP))
    body, negate = (neg, True) if shorter else (ranges, False)
    parts = []
    for lo, hi in body:
        if lo == hi:
            parts.append(_escape_cp(lo, True))
        elif hi == lo + 1:
            parts.append(_escape_cp(lo, True) + _escape_cp(hi, True))
        else:
            parts.append(_escape_cp(lo, True) + "-" + _escape_cp(hi, True))
    return "[" + ("^" if negate else "") + "".join(parts) + "]"


def json_char(ranges: Sequence[Tuple[int, int]]) -> str:
    """GBNF for one character of a JSON string's *content* whose decoded value
    is in `ranges`: raw where JSON allows it, else its escape sequence."""
    ranges = normalize(ranges)
    if not ranges:
        raise ValueError("empty character set")
    alts = []
    raw = subtract(ranges, _JSON_NEEDS_ESCAPE)
    if raw:
        alts.append(char_class(raw))
    if contains(ranges, 0x22):
        alts.append(literal('\\"'))
    if contains(ranges, 0x5C):
        alts.append(literal("\\\\"))
    controls = [c for c in list(range(0x20)) + [0x7F] if contains(ranges, c)]
    if len(controls) == 33:
        alts.append('"\\\\" [bfnrt]')
        alts.append('"\\\\u00" [01] [0-9a-fA-F]')
        alts.append(literal("\\u007f"))
    else:
        for c in controls:
            alts.append(literal("\\" + _SHORT_ESCAPES[c]) if c in _SHORT_ESCAPES else literal("\\u%04x" % c))
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"
