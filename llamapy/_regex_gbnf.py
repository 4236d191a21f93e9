"""JSON-schema `pattern` (a regular expression) -> GBNF for the content of a
JSON string.

The regex constrains the *decoded* string; the grammar produces the JSON text
between the quotes, so every character is matched raw where JSON allows it and
as its escape otherwise (a `"` in the pattern becomes `\\"`).

Supported: literals and escapes (\\n \\t \\xHH \\uHHHH, escaped punctuation),
classes [...] and [^...], `.`, \\d \\w \\s and their negations, groups ( ),
(?: ), (?<name> ), alternation, quantifiers * + ? {m} {m,} {m,n} (lazy forms
too), and ^ / $ at the ends. A pattern without ^ (or $) may have any text
before (or after) its match, as JSON Schema's unanchored search means.
Anything else (backreferences, lookaround, \\b, anchors inside the pattern)
raises NotImplementedError.

Negated shorthands (\\D \\W \\S) are limited to ASCII, and \\d \\w \\s to their
ASCII members, so what is produced matches both ECMA-262 and Python `re`.
"""
from __future__ import annotations

from typing import List, Optional, Tuple

from ._gbnf_text import Ranges, complement, json_char, literal, normalize, subtract

_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE: Ranges = [(0x09, 0x0D), (0x20, 0x20)]
_ASCII: Ranges = [(0x00, 0x7F)]
# Whitespace to either engine (Python's \s adds \x1c-\x1f and Unicode spaces).
_ANY_SPACE: Ranges = normalize(_SPACE + [(0x1C, 0x1F), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680),
                                         (0x2000, 0x200A), (0x2028, 0x2029), (0x202F, 0x202F),
                                         (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
_LINE_BREAKS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_SHORTHANDS = {
    "d": _DIGIT, "w": _WORD, "s": _SPACE,
    "D": subtract(_ASCII, _DIGIT), "W": subtract(_ASCII, _WORD), "S": subtract(_ASCII, _ANY_SPACE),
}
_CONTROL_ESCAPES = {"n": 0x0A, "t": 0x09, "r": 0x0D, "f": 0x0C, "v": 0x0B, "0": 0x00}


class _Parser:
    def __init__(self, pattern: str) -> None:
        self.p = pattern
        self.i = 0

    def fail(self, what: str) -> None:
        raise NotImplementedError(f"pattern {self.p!r}: {what} (at offset {self.i}) is not supported")

    def peek(self) -> str:
        return self.p[self.i] if self.i < len(self.p) else ""

    # alternation := sequence ('|' sequence)*
    def alternation(self) -> Tuple[str, int]:
        seqs = [self.sequence()]
        while self.peek() == "|":
            self.i += 1
            seqs.append(self.sequence())
        if len(seqs) == 1:
            return seqs[0], 1
        return "(" + " | ".join(seqs) + ")", len(seqs)

    # sequence := (atom quantifier?)*  — adjacent plain characters merge into one literal
    def sequence(self) -> str:
        items: List[str] = []
        text: List[str] = []  # pending plain characters (decoded)

        def flush() -> None:
            if text:
                items.append(literal(_json_escape("".join(text))))
                text.clear()

        while self.i < len(self.p) and self.peek() not in "|)":
            atom, plain = self.atom()
            quant = self.quantifier()
            if plain is not None and not quant:
                text.append(plain)
                continue
            flush()
            items.append(atom + quant)
        flush()
        return " ".join(items) if items else '""'

    def atom(self) -> Tuple[str, Optional[str]]:
        """(GBNF for one element, the character itself if it is a plain one)."""
        c = self.peek()
        if c == "(":
            self.i += 1
            if self.p.startswith("?:", self.i):
                self.i += 2
            elif self.p.startswith(("?<", "?P<"), self.i) and not self.p.startswith(("?<=", "?<!"), self.i):
                end = self.p.find(">", self.i)  # a named group: the name is dropped
                if end < 0:
                    raise ValueError(f"pattern {self.p!r}: unclosed group name")
                self.i = end + 1
            elif self.peek() == "?":
                self.fail("lookaround or inline flags")
            inner, _ = self.alternation()
            if self.peek() != ")":
                raise ValueError(f"pattern {self.p!r}: unbalanced parenthesis")
            self.i += 1
            return "(" + inner + ")", None
        if c == "[":
            return _group(json_char(self.char_class())), None
        if c == ".":
            self.i += 1
            return _group(json_char(complement(_LINE_BREAKS))), None
        if c == "\\":
            kind, value = self.escape()
            if kind == "set":
                return _group(json_char(value)), None
            return literal(_json_escape(chr(value))), chr(value)
        if c in "^$":
            self.fail("an anchor inside the pattern")
        if c in "*+?":
            raise ValueError(f"pattern {self.p!r}: nothing to repeat at offset {self.i}")
        if c == "{" and self._brace_quantifier() is not None:
            raise ValueError(f"pattern {self.p!r}: nothing to repeat at offset {self.i}")
        self.i += 1
        return literal(_json_escape(c)), c

    def escape(self) -> Tuple[str, object]:
        """After a backslash: ("set", ranges) or ("char", code point)."""
        self.i += 1
        c = self.peek()
        if not c:
            raise ValueError(f"pattern {self.p!r}: trailing backslash")
        self.i += 1
        if c in _SHORTHANDS:
            return "set", _SHORTHANDS[c]
        if c in _CONTROL_ESCAPES:
            return "char", _CONTROL_ESCAPES[c]
        if c in "xu":
            n = 2 if c == "x" else 4
            digits = self.p[self.i:self.i + n]
            if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
                self.fail(f"\\{c} without {n} hex digits")
            self.i += n
            return "char", int(digits, 16)
        if c in "bB":
            self.fail("word boundaries (\\b, \\B)")
        if c.isdigit():
            self.fail("backreferences")
        if c.isalnum():
            self.fail(f"the escape \\{c}")
        return "char", ord(c)

    def char_class(self) -> Ranges:
        start = self.i
        self.i += 1
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: Ranges = []
        first = True
        while True:
            c = self.peek()
            if not c:
                raise ValueError(f"pattern {self.p!r}: unterminated character class at offset {start}")
            if c == "]" and not first:
                self.i += 1
                break
            first = False
            lo = self._class_atom(ranges)
            if lo is None:
                continue
            if self.peek() == "-" and self.p[self.i + 1:self.i + 2] not in ("]", ""):
                self.i += 1
                hi = self._class_atom(ranges)
                if hi is None:
                    self.fail("a range ending in a class shorthand")
                if hi < lo:
                    raise ValueError(f"pattern {self.p!r}: bad character range")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        ranges = normalize(ranges)
        if negate:
            ranges = complement(ranges)
        if not ranges:
            self.fail("an empty character class")
        return ranges

    def _class_atom(self, ranges: Ranges) -> Optional[int]:
        """One class member: returns its code point, or None after adding a shorthand's set."""
        if self.peek() == "\\":
            kind, value = self.escape()
            if kind == "set":
                ranges.extend(value)  # type: ignore[arg-type]
                return None
            return value  # type: ignore[return-value]
        if self.peek() == "[" and self.p[self.i + 1:self.i + 2] == ":":
            self.fail("POSIX classes ([:alpha:])")
        c = self.peek()
        self.i += 1
        return ord(c)

    def _brace_quantifier(self) -> Optional[Tuple[int, Optional[int], int]]:
        """{m} {m,} {m,n} at self.i: (m, n or None, length), or None if not one."""
        end = self.p.find("}", self.i)
        if end < 0:
            return None
        body = self.p[self.i + 1:end]
        parts = body.split(",")
        if len(parts) > 2 or not parts[0].isdigit() or (len(parts) == 2 and parts[1] and not parts[1].isdigit()):
            return None
        lo = int(parts[0])
        hi: Optional[int] = lo if len(parts) == 1 else (int(parts[1]) if parts[1] else None)
        return lo, hi, end + 1 - self.i

    def quantifier(self) -> str:
        c = self.peek()
        if c in ("*", "+", "?"):
            self.i += 1
            out = c
        elif c == "{" and self._brace_quantifier() is not None:
            lo, hi, n = self._brace_quantifier()  # type: ignore[misc]
            self.i += n
            if hi is not None and hi < lo:
                raise ValueError(f"pattern {self.p!r}: repetition {{{lo},{hi}}} with max < min")
            out = "{%d}" % lo if hi == lo else ("{%d,}" % lo if hi is None else "{%d,%d}" % (lo, hi))
        else:
            return ""
        if self.peek() == "?":  # lazy: same language
            self.i += 1
        elif self.peek() == "+":
            self.fail("possessive quantifiers")
        return out


def _json_escape(text: str) -> str:
    """The JSON string-content encoding of `text`."""
    out = []
    for ch in text:
        cp = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif cp < 0x20 or cp == 0x7F:
            out.append({0x08: "\\b", 0x09: "\\t", 0x0A: "\\n", 0x0C: "\\f", 0x0D: "\\r"}.get(cp, "\\u%04x" % cp))
        else:
            out.append(ch)
    return "".join(out)


def _group(expr: str) -> str:
    return expr if expr.startswith("(") or expr.startswith("[") else "(" + expr + ")"


def pattern_to_gbnf(pattern: str, any_char: str) -> str:
    """GBNF (an expression, without the quotes) for JSON string contents whose
    decoded text matches `pattern`; `any_char` names a rule for one character
    of string content (used where the pattern is not anchored)."""
    body = pattern
    anchored_start = body.startswith("^")
    if anchored_start:
        body = body[1:]
    anchored_end = False
    if body.endswith("$"):
        n_backslashes = len(body[:-1]) - len(body[:-1].rstrip("\\"))
        if n_backslashes % 2 == 0:
            anchored_end = True
            body = body[:-1]
    parser = _Parser(body)
    expr, n_alts = parser.alternation()
    if parser.i != len(body):
        raise ValueError(f"pattern {pattern!r}: unbalanced parenthesis at offset {parser.i}")
    if n_alts > 1 and (anchored_start or anchored_end) and not (anchored_start and anchored_end):
        raise NotImplementedError(f"pattern {pattern!r}: an anchor on only one branch of a top-level '|'")
    if n_alts > 1 and anchored_start and anchored_end:
        # `^a|b$` means (^a)|(b$) in a regex; only the fully anchored reading is safe to assume when
        # every branch is meant whole, so refuse the ambiguous form.
        raise NotImplementedError(f"pattern {pattern!r}: anchors around a top-level '|' (write ^(a|b)$)")
    parts = []
    if not anchored_start:
        parts.append(any_char + "*")
    parts.append(expr)
    if not anchored_end:
        parts.append(any_char + "*")
    return " ".join(parts)
