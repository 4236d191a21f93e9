"""JSON schema -> GBNF: a grammar whose sentences are JSON documents that
validate against the schema (for the keywords listed below).

Enforced: type (one or a list), properties / required (optional properties
may be left out; properties come in declaration order, or `prop_order`),
additionalProperties (absent or false: no other keys, as llama.cpp does;
true or a schema: other keys after the declared ones; an object schema with
none of these three is any object), enum, const, anyOf /
oneOf, allOf (merged: properties and required are united), $ref into the
document (#/$defs/..., #/definitions/..., # itself; recursion is fine),
prefixItems / items / minItems / maxItems, minLength / maxLength, pattern
(llamapy/_regex_gbnf.py), format date / time / date-time / uuid, minimum /
maximum / exclusiveMinimum / exclusiveMaximum for integers, nullable (OpenAPI).
Annotations (title, description, default, ...) are ignored; other
constraints (uniqueItems, multipleOf, number bounds, not, if/then/else, ...)
are not enforced and are logged as warnings. Whitespace between tokens is
limited (`ws`) so a model cannot ramble.

Every value rule ends with `ws`; a rule body may hold a top-level `|` (rules
are only ever used by name).
"""
from __future__ import annotations

import json
import logging
import math
import re
from typing import Any, Dict, List, Optional, Sequence, Union

from ._gbnf_text import char_class, literal, subtract
from ._regex_gbnf import pattern_to_gbnf

logger = logging.getLogger("llamapy")

# Building blocks: name -> (body, rules it uses).
_PRIMITIVES: Dict[str, tuple] = {
    "ws": ('| " " | "\\n" [ \\t]{0,20}', ()),
    # One character of string content; a \u escape of a surrogate must be half of a pair.
    "char": (r'[^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" ([0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | '
             r'[dD] [0-7] [0-9a-fA-F]{2} | [dD] [89abAB] [0-9a-fA-F]{2} "\\u" [dD] [c-fC-F] [0-9a-fA-F]{2}))', ()),
    "string": ('"\\"" char* "\\"" ws', ("char", "ws")),
    "number": ('"-"? ("0" | [1-9] [0-9]{0,15}) ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws', ("ws",)),
    "integer": ('"-"? ("0" | [1-9] [0-9]{0,15}) ws', ("ws",)),
    "boolean": ('("true" | "false") ws', ("ws",)),
    "null": ('"null" ws', ("ws",)),
    "value": ("object | array | string | number | boolean | null",
              ("object", "array", "string", "number", "boolean", "null")),
    "object": ('"{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}" ws', ("string", "value", "ws")),
    "array": ('"[" ws (value ("," ws value)*)? "]" ws', ("value", "ws")),
    # Real calendar dates: days per month, 29 February in leap years only, no year 0000.
    "date": ('year "-" month-day | leap-year "-02-29"', ("year", "month-day", "leap-year")),
    "year": ('[1-9] [0-9]{3} | "0" [1-9] [0-9]{2} | "00" [1-9] [0-9] | "000" [1-9]', ()),
    "month-day": ('("0" [13578] | "1" [02]) "-" ("0" [1-9] | [12] [0-9] | "3" [01]) | '
                  '("0" [469] | "11") "-" ("0" [1-9] | [12] [0-9] | "30") | "02-" ("0" [1-9] | "1" [0-9] | "2" [0-8])',
                  ()),
    "leap-year": ('[0-9]{2} ([02468] [48] | [13579] [26] | [2468] "0") | ([02468] [48] | [13579] [26] | [2468] "0") "00"',
                  ()),
    "time": ('([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9] ":" [0-5] [0-9] ("." [0-9]{1,6})? '
             '("Z" | [+-] ([01] [0-9] | "2" [0-3]) ":" [0-5] [0-9])', ()),
    "date-time": ('date "T" time', ("date", "time")),
    "uuid": ('[0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12}', ()),
}
_FORMATS = ("date", "time", "date-time", "uuid")

_ANNOTATIONS = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "contentMediaType", "contentEncoding", "$defs", "definitions", "$anchor", "discriminator",
}
_NOT_ENFORCED = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "minProperties", "maxProperties", "uniqueItems", "contains", "minContains", "maxContains",
    "multipleOf", "unevaluatedProperties", "unevaluatedItems",
}
_RAW_KEY_CHAR = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0x7E), (0x80, 0x10FFFF)]  # JSON-raw, no escapes


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9-]+", "-", name).strip("-") or "x"


def _is_rule_name(expr: str) -> bool:
    return re.fullmatch(r"[a-zA-Z0-9-]+", expr) is not None


def _json_literal(value: Any) -> str:
    return literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _type_ok(value: Any, t: Union[str, List[str], None]) -> bool:
    if t is None:
        return True
    if isinstance(t, list):
        return any(_type_ok(value, x) for x in t)
    return {
        "string": isinstance(value, str), "boolean": isinstance(value, bool), "null": value is None,
        "integer": isinstance(value, int) and not isinstance(value, bool)
        or isinstance(value, float) and value.is_integer(),
        "number": isinstance(value, (int, float)) and not isinstance(value, bool),
        "object": isinstance(value, dict), "array": isinstance(value, list),
    }.get(t, False)


# ---------------------------------------------------------------------------
# Integer ranges as digit patterns
# ---------------------------------------------------------------------------
def _digits(lo: int, hi: int) -> str:
    return literal(str(lo)) if lo == hi else f"[{lo}-{hi}]"


def _any_digits(n: int) -> str:
    return "[0-9]" if n == 1 else f"[0-9]{{{n}}}"


def _same_width_range(a: str, b: str) -> str:
    """Digit strings of len(a) == len(b) between a and b (leading zeros allowed)."""
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    prefix = [literal(a[:i])] if i else []
    a, b = a[i:], b[i:]
    if not a:
        return " ".join(prefix)
    n = len(a) - 1
    if n == 0:
        return " ".join(prefix + [_digits(int(a), int(b))])
    alts = []
    lo_d, hi_d = int(a[0]), int(b[0])
    if a[1:] != "0" * n:
        alts.append(f"{literal(a[0])} {_group(_same_width_range(a[1:], '9' * n))}")
        lo_d += 1
    tail = None
    if b[1:] != "9" * n:
        tail = f"{literal(b[0])} {_group(_same_width_range('0' * n, b[1:]))}"
        hi_d -= 1
    if lo_d <= hi_d:
        alts.append(f"{_digits(lo_d, hi_d)} {_any_digits(n)}")
    if tail:
        alts.append(tail)
    body = alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"
    return " ".join(prefix + [body])


def _group(expr: str) -> str:
    """`expr` as one item of a sequence."""
    return expr if _is_rule_name(expr) or re.fullmatch(r'"[^"\\]*"|\[[^\]]*\]', expr) else f"({expr})"


def _uint_range(lo: int, hi: Optional[int]) -> str:
    """Non-negative integers in [lo, hi] (hi None: no bound), no leading zeros."""
    alts = []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    for width in range(len(str(lo)), len(str(top)) + 1):
        a = max(lo, 10 ** (width - 1) if width > 1 else 0)
        b = min(top, 10 ** width - 1)
        if a <= b:
            alts.append(_same_width_range(str(a), str(b)))
    if hi is None and len(str(lo)) < 16:
        alts.append(f"[1-9] [0-9]{{{len(str(lo))},15}}")  # more digits than lo
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"


def _int_range(lo: Optional[int], hi: Optional[int]) -> str:
    parts = []
    if lo is None or lo < 0:
        neg_lo = 1 if hi is None or hi >= 0 else -hi  # |x| bounds for the negative side
        neg_hi = None if lo is None else -lo
        parts.append(f'"-" {_uint_range(neg_lo, neg_hi)}')
    if hi is None or hi >= 0:
        parts.append(_uint_range(max(lo, 0) if lo is not None else 0, hi))
    return parts[0] if len(parts) == 1 else "(" + " | ".join(parts) + ")"


def _int_bounds(schema: Dict[str, Any]) -> tuple:
    lo = hi = None
    if "minimum" in schema:
        lo = math.ceil(schema["minimum"])
        if schema.get("exclusiveMinimum") is True and lo == schema["minimum"]:
            lo += 1
    if isinstance(schema.get("exclusiveMinimum"), (int, float)) and not isinstance(schema["exclusiveMinimum"], bool):
        e = math.floor(schema["exclusiveMinimum"]) + 1
        lo = e if lo is None else max(lo, e)
    if "maximum" in schema:
        hi = math.floor(schema["maximum"])
        if schema.get("exclusiveMaximum") is True and hi == schema["maximum"]:
            hi -= 1
    if isinstance(schema.get("exclusiveMaximum"), (int, float)) and not isinstance(schema["exclusiveMaximum"], bool):
        e = math.ceil(schema["exclusiveMaximum"]) - 1
        hi = e if hi is None else min(hi, e)
    return lo, hi


# ---------------------------------------------------------------------------
# The converter
# ---------------------------------------------------------------------------
class _Converter:
    def __init__(self, root: Any, prop_order: Optional[Sequence[str]]) -> None:
        self.root = root
        self.rules: Dict[str, Optional[str]] = {"root": None}  # None: name taken, body pending
        self.refs: Dict[str, str] = {"#": "root"}
        self.order = {k: i for i, k in enumerate(prop_order or [])}

    def grammar(self) -> str:
        self.rules["root"] = self.visit(self.root, "root")
        return "".join(f"{name} ::= {body}\n" for name, body in self.rules.items())

    # ---- rules
    def fresh(self, name: str) -> str:
        base = _sanitize(name)
        cand, i = base, 1
        while cand in self.rules or cand in _PRIMITIVES:
            i += 1
            cand = f"{base}{i}"
        return cand

    def add_rule(self, name: str, body: str) -> str:
        base = _sanitize(name)
        cand, i = base, 1
        while (cand in self.rules and self.rules[cand] != body) or cand in _PRIMITIVES:
            i += 1
            cand = f"{base}{i}"
        self.rules[cand] = body
        return cand

    def prim(self, name: str) -> str:
        if name not in self.rules:
            body, deps = _PRIMITIVES[name]
            self.rules[name] = body
            for d in deps:
                self.prim(d)
        return name

    def rule_for(self, schema: Any, name: str) -> str:
        expr = self.visit(schema, name)
        return expr if _is_rule_name(expr) else self.add_rule(name, expr)

    # ---- schemas
    def visit(self, schema: Any, name: str) -> str:
        if schema is True or schema == {}:
            return self.prim("value")
        if schema is False:
            raise ValueError(f"json schema at {name!r}: `false` matches nothing")
        if not isinstance(schema, dict):
            raise ValueError(f"json schema at {name!r}: expected an object or a boolean, got {schema!r}")
        for key in _NOT_ENFORCED.intersection(schema):
            if key == "uniqueItems" and not schema[key]:
                continue
            logger.warning("json_schema_to_gbnf: %r at %s is not enforced by the grammar", key, name)
        if schema.get("nullable") is True:
            rest = {k: v for k, v in schema.items() if k != "nullable"}
            return f"{self.rule_for(rest, name + '-value')} | {self.prim('null')}"
        if "$ref" in schema:
            rest = {k: v for k, v in schema.items() if k != "$ref" and k not in _ANNOTATIONS}
            if rest:
                return self.visit({"allOf": [{"$ref": schema["$ref"]}, rest]}, name)
            return self.ref(schema["$ref"])
        if "const" in schema:
            return f"{_json_literal(schema['const'])} {self.prim('ws')}"
        if "enum" in schema:
            values = [v for v in schema["enum"] if _type_ok(v, schema.get("type"))]
            if not values:
                raise ValueError(f"json schema at {name!r}: no enum value has the required type")
            return " | ".join(f"{_json_literal(v)} {self.prim('ws')}" for v in values)
        for key in ("anyOf", "oneOf"):
            if key in schema:
                rest = {k: v for k, v in schema.items() if k != key and k not in _ANNOTATIONS}
                alts = [self.merge([rest, alt]) if rest else alt for alt in schema[key]]
                return " | ".join(self.rule_for(alt, f"{name}-{i}") for i, alt in enumerate(alts))
        if "allOf" in schema:
            rest = {k: v for k, v in schema.items() if k != "allOf"}
            return self.visit(self.merge([rest] + list(schema["allOf"])), name)
        t = schema.get("type")
        if isinstance(t, list):
            if len(t) != 1:
                return " | ".join(self.rule_for({**schema, "type": x}, f"{name}-{x}") for x in t)
            t = t[0]
        if t is None:
            t = self.infer_type(schema)
        if t == "object":
            return self.object(schema, name)
        if t == "array":
            return self.array(schema, name)
        if t == "string":
            return self.string(schema, name)
        if t == "integer":
            return self.integer(schema, name)
        if t == "number":
            if any(k in schema for k in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")):
                logger.warning("json_schema_to_gbnf: bounds of a number at %s are not enforced", name)
            return self.prim("number")
        if t in ("boolean", "null"):
            return self.prim(t)
        if t == "any":
            return self.prim("value")
        raise ValueError(f"json schema at {name!r}: unknown type {t!r}")

    @staticmethod
    def infer_type(schema: Dict[str, Any]) -> Optional[str]:
        keys = set(schema)
        if keys & {"properties", "required", "additionalProperties"}:
            return "object"
        if keys & {"items", "prefixItems", "minItems", "maxItems"}:
            return "array"
        if keys & {"pattern", "format", "minLength", "maxLength"}:
            return "string"
        if keys & {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}:
            return "number"
        return "any"

    def ref(self, ref: str) -> str:
        if ref in self.refs:
            return self.refs[ref]
        name = self.fresh(ref.rsplit("/", 1)[-1])
        self.refs[ref] = name
        self.rules[name] = None
        self.rules[name] = self.visit(self.resolve(ref), name)
        return name

    def resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise NotImplementedError(f"$ref {ref!r}: only references inside the schema (#/...) are supported")
        node = self.root
        for part in ref[1:].split("/")[1:] if ref != "#" else []:
            part = part.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(part)] if isinstance(node, list) else node[part]
            except (KeyError, IndexError, ValueError, TypeError):
                raise ValueError(f"$ref {ref!r} does not resolve") from None
        return node

    def merge(self, schemas: List[Any]) -> Dict[str, Any]:
        """allOf, simplified: objects' properties and required lists are united,
        bounds tightened; other keywords: the last one given wins."""
        out: Dict[str, Any] = {}
        flat: List[Dict[str, Any]] = []
        todo = list(schemas)
        while todo:
            s = todo.pop(0)
            if s is True or s == {}:
                continue
            if not isinstance(s, dict):
                raise ValueError(f"allOf: cannot merge {s!r}")
            if "$ref" in s:
                rest = {k: v for k, v in s.items() if k != "$ref"}
                todo[:0] = [self.resolve(s["$ref"]), rest]
                continue
            if "allOf" in s:
                rest = {k: v for k, v in s.items() if k != "allOf"}
                todo[:0] = list(s["allOf"]) + [rest]
                continue
            flat.append(s)
        if sum(1 for s in flat if "anyOf" in s or "oneOf" in s) > 1:
            raise NotImplementedError("allOf with more than one anyOf/oneOf is not supported")
        for s in flat:
            for k, v in s.items():
                if k == "properties":
                    props = out.setdefault("properties", {})
                    for p, ps in v.items():
                        props[p] = {"allOf": [props[p], ps]} if p in props else ps
                elif k == "required":
                    out["required"] = list(dict.fromkeys(list(out.get("required", [])) + list(v)))
                elif k == "type" and "type" in out:
                    a = out["type"] if isinstance(out["type"], list) else [out["type"]]
                    b = v if isinstance(v, list) else [v]
                    both = [x for x in a if x in b or (x == "integer" and "number" in b)]
                    both += [x for x in b if x == "integer" and "number" in a and x not in both]
                    if not both:
                        raise ValueError(f"allOf: types {a} and {b} have nothing in common")
                    out["type"] = both if len(both) > 1 else both[0]
                elif k in ("minimum", "minLength", "minItems", "exclusiveMinimum") and k in out:
                    out[k] = max(out[k], v)
                elif k in ("maximum", "maxLength", "maxItems", "exclusiveMaximum") and k in out:
                    out[k] = min(out[k], v)
                elif k == "additionalProperties" and out.get(k) is False:
                    pass
                else:
                    out[k] = v
        return out

    def object(self, schema: Dict[str, Any], name: str) -> str:
        if not any(k in schema for k in ("properties", "required", "additionalProperties")):
            return self.prim("object")  # {"type": "object"} alone: any object, as in llama.cpp
        props: Dict[str, Any] = dict(schema.get("properties") or {})
        required = set(schema.get("required") or [])
        for r in schema.get("required") or []:
            props.setdefault(r, {})
        declared = list(props)
        names = sorted(declared, key=lambda k: (self.order.get(k, len(self.order)), declared.index(k)))
        ws = self.prim("ws")
        kv = {}
        for k in names:
            value = self.rule_for(props[k], f"{name}-{k}")
            kv[k] = self.add_rule(f"{name}-{k}-kv", f'{_json_literal(k)} {ws} ":" {ws} {value}')
        extra = schema.get("additionalProperties")
        extra_kv = None
        if extra is not None and extra is not False:
            value = self.rule_for(extra if isinstance(extra, dict) else {}, f"{name}-additional-value")
            key = self.key_excluding(names, f"{name}-additional-key")
            extra_kv = self.add_rule(f"{name}-additional-kv", f'{key} ":" {ws} {value}')

        if required:
            parts, started = [], False
            for k in names:
                if k in required:
                    parts.append(f'"," {ws} {kv[k]}' if started else kv[k])
                    started = True
                else:
                    parts.append(f'("," {ws} {kv[k]})?' if started else f'({kv[k]} "," {ws})?')
            if extra_kv:
                parts.append(f'("," {ws} {extra_kv})*')
            return f'"{{" {ws} {" ".join(parts)} "}}" {ws}'
        items = [kv[k] for k in names] + ([f'{extra_kv} ("," {ws} {extra_kv})*'] if extra_kv else [])
        if not items:
            return f'"{{" {ws} "}}" {ws}'
        # Any subset in order: the first item present, then each later one behind a comma.
        rest: List[Optional[str]] = [None] * (len(items) + 1)
        for i in range(len(items) - 1, 0, -1):
            tail = f" {rest[i + 1]}" if rest[i + 1] else ""
            rest[i] = self.add_rule(f"{name}-rest-{i}", f'("," {ws} {items[i]})?{tail}')
        firsts = [items[i] + (f" {rest[i + 1]}" if rest[i + 1] else "") for i in range(len(items))]
        return f'"{{" {ws} ({" | ".join(firsts)})? "}}" {ws}'

    def key_excluding(self, names: Sequence[str], rule: str) -> str:
        """A JSON key (no escapes) that is none of `names`."""
        safe = char_class(_RAW_KEY_CHAR)
        ws = self.prim("ws")
        raw_ok = lambda s: all(0x20 <= ord(c) and c not in '"\\' and ord(c) != 0x7F for c in s)  # noqa: E731
        excluded = sorted(n for n in names if raw_ok(n))
        counter = [0]

        def node(prefix: str) -> str:
            here = [n for n in excluded if n.startswith(prefix)]
            nexts = sorted({n[len(prefix)] for n in here if len(n) > len(prefix)})
            alts = [] if prefix in here else ['"\\""']
            for ch in nexts:
                alts.append(f"{literal(ch)} {node(prefix + ch)}")
            others = subtract(_RAW_KEY_CHAR, [(ord(c), ord(c)) for c in nexts])
            alts.append(f'{char_class(others)} {safe}* "\\""')
            counter[0] += 1
            return self.add_rule(f"{rule}-{counter[0]}", " | ".join(alts))

        return self.add_rule(rule, f'"\\"" {node("")} {ws}')

    def array(self, schema: Dict[str, Any], name: str) -> str:
        ws = self.prim("ws")
        prefix = schema.get("prefixItems")
        items = schema.get("items")
        if prefix is None and isinstance(items, list):
            prefix, items = items, schema.get("additionalItems")
        lo = int(schema.get("minItems", 0))
        hi = schema.get("maxItems")
        if hi is not None and int(hi) < lo:
            raise ValueError(f"json schema at {name!r}: maxItems < minItems")
        if prefix is not None:
            if lo > len(prefix):
                raise NotImplementedError(f"json schema at {name!r}: minItems beyond prefixItems")
            count = len(prefix) if hi is None else min(len(prefix), int(hi))
            elems = [self.rule_for(s, f"{name}-{i}") for i, s in enumerate(prefix[:count])]
            inner = f' "," {ws} '.join(elems)
            return f'"[" {ws} {inner} "]" {ws}' if elems else f'"[" {ws} "]" {ws}'
        if hi is not None and int(hi) == 0:
            return f'"[" {ws} "]" {ws}'
        item = self.rule_for(items if items is not None else {}, f"{name}-item")
        more_lo = max(lo - 1, 0)
        more_hi = None if hi is None else int(hi) - 1
        if more_hi is None:
            rep = "*" if more_lo == 0 else f"{{{more_lo},}}"
        elif more_hi == more_lo:
            rep = f"{{{more_lo}}}"
        else:
            rep = f"{{{more_lo},{more_hi}}}"
        seq = item if rep == "{0}" else f'{item} ("," {ws} {item}){rep}'
        if lo == 0:
            seq = f"({seq})?"
        return f'"[" {ws} {seq} "]" {ws}'

    def string(self, schema: Dict[str, Any], name: str) -> str:
        ws = self.prim("ws")
        if "pattern" in schema:
            if "minLength" in schema or "maxLength" in schema:
                logger.warning("json_schema_to_gbnf: minLength/maxLength next to a pattern at %s are not enforced",
                               name)
            return f'"\\"" {pattern_to_gbnf(schema["pattern"], self.prim("char"))} "\\"" {ws}'
        fmt = schema.get("format")
        if fmt in _FORMATS:
            return f'"\\"" {self.prim(fmt)} "\\"" {ws}'
        lo = int(schema.get("minLength", 0))
        hi = schema.get("maxLength")
        if lo == 0 and hi is None:
            return self.prim("string")
        if hi is not None and int(hi) < lo:
            raise ValueError(f"json schema at {name!r}: maxLength < minLength")
        rep = f"{{{lo},}}" if hi is None else (f"{{{lo}}}" if int(hi) == lo else f"{{{lo},{int(hi)}}}")
        return f'"\\"" {self.prim("char")}{rep} "\\"" {ws}'

    def integer(self, schema: Dict[str, Any], name: str) -> str:
        lo, hi = _int_bounds(schema)
        if lo is None and hi is None:
            return self.prim("integer")
        if lo is not None and hi is not None and lo > hi:
            raise ValueError(f"json schema at {name!r}: no integer lies between the bounds")
        return f"{_int_range(lo, hi)} {self.prim('ws')}"


def json_schema_to_gbnf(schema: Union[str, bytes, Dict[str, Any], bool],
                        prop_order: Optional[List[str]] = None) -> str:
    """GBNF text for JSON documents valid against `schema` (a dict, or its
    JSON text). `prop_order` lists property names to put first, in order."""
    if isinstance(schema, (str, bytes)):
        schema = json.loads(schema)
    return _Converter(schema, prop_order).grammar()


def json_grammar(root: str) -> str:
    """The generic JSON grammar with `root ::= <root>` (a primitive's name)."""
    conv = _Converter({}, None)
    conv.prim(root)
    rules = {"root": root}
    rules.update({k: v for k, v in conv.rules.items() if k != "root"})
    return "".join(f"{name} ::= {body}\n" for name, body in rules.items())
