"""JSON schema -> GBNF (llamapy.grammar.json_schema_to_gbnf), checked with
the `jsonschema` package as the oracle:
  - sentences drawn at random from each grammar (random derivations) are
    JSON and validate against the schema (formats included);
  - documents the schema rejects, made by mutating valid ones, are rejected
    by the grammar;
  - integer ranges exhaustively, calendar dates over centuries, and regex
    patterns against Python's `re`.
"""
from __future__ import annotations

import copy
import datetime
import json
import logging
import random
import re

import jsonschema
import pytest

from llamapy import _engine
from llamapy.grammar import json_schema_to_gbnf

FORMATS = jsonschema.Draft202012Validator.FORMAT_CHECKER

SCHEMAS = {
    "simple-object": {
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "ok": {"type": "boolean"},
                       "nothing": {"type": "null"}, "score": {"type": "number"}},
        "required": ["name", "age"],
    },
    "all-optional": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
    },
    "optional-before-required": {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}, "z": {"type": "string"},
                       "w": {"type": "null"}},
        "required": ["y", "w"],
    },
    "nested": {
        "type": "object",
        "properties": {
            "user": {"type": "object", "properties": {"id": {"type": "integer", "minimum": 1},
                                                      "tags": {"type": "array", "items": {"type": "string"}}},
                     "required": ["id"]},
            "items": {"type": "array", "items": {"type": "object", "properties": {"k": {"enum": ["a", "b"]}},
                                                  "required": ["k"]}, "maxItems": 4},
        },
        "required": ["user", "items"],
    },
    "enum-const": {
        "type": "object",
        "properties": {"color": {"enum": ["red", "green", 3, None, True, {"x": [1]}]},
                       "v": {"const": "fixed \"quoted\" \\ é"}, "t": {"type": "string", "enum": ["s", 1]}},
        "required": ["color", "v", "t"],
    },
    "any-of": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 3},
                         {"type": "array", "items": {"type": "boolean"}, "maxItems": 2}]},
    "one-of-objects": {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "n": {"type": "integer"}},
             "required": ["kind", "n"]},
            {"type": "object", "properties": {"kind": {"const": "b"}, "s": {"type": "string"}},
             "required": ["kind", "s"]},
        ],
    },
    "type-list-and-nullable": {
        "type": "object",
        "properties": {"a": {"type": ["string", "null"]}, "b": {"type": ["integer", "null"]},
                       "c": {"type": ["number", "boolean"]}},
        "required": ["a", "b", "c"],
    },
    "refs": {
        "$defs": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                            "required": ["x", "y"]},
                  "string": {"type": "string", "minLength": 2}},
        "definitions": {"color": {"enum": ["r", "g"]}},
        "type": "object",
        "properties": {"p": {"$ref": "#/$defs/point"}, "q": {"$ref": "#/$defs/point"},
                       "c": {"$ref": "#/definitions/color"}, "s": {"$ref": "#/$defs/string"}},
        "required": ["p", "c", "s"],
    },
    "recursive-tree": {
        "$defs": {"node": {"type": "object",
                           "properties": {"v": {"type": "integer"},
                                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                   "maxItems": 2}},
                           "required": ["v"]}},
        "$ref": "#/$defs/node",
    },
    "recursive-root": {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 4}, "child": {"$ref": "#"}},
        "required": ["name"],
    },
    "all-of": {
        "allOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"$ref": "#/$defs/b"},
            {"properties": {"a": {"minimum": 0, "maximum": 9}}},
        ],
        "$defs": {"b": {"type": "object", "properties": {"b": {"type": "string"}}, "required": ["b"]}},
    },
    "strings": {
        "type": "object",
        "properties": {
            "date": {"type": "string", "format": "date"},
            "time": {"type": "string", "format": "time"},
            "dt": {"type": "string", "format": "date-time"},
            "id": {"type": "string", "format": "uuid"},
            "short": {"type": "string", "minLength": 2, "maxLength": 4},
            "exact": {"type": "string", "minLength": 3, "maxLength": 3},
            "long": {"type": "string", "minLength": 5},
            "unknown-format": {"type": "string", "format": "hostname"},
        },
        "required": ["date", "time", "dt", "id", "short", "exact", "long"],
    },
    "integers": {
        "type": "object",
        "properties": {
            "pct": {"type": "integer", "minimum": 0, "maximum": 100},
            "neg": {"type": "integer", "minimum": -50, "maximum": -3},
            "span": {"type": "integer", "minimum": -1234, "maximum": 98765},
            "excl": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
            "ge": {"type": "integer", "minimum": 37},
            "le": {"type": "integer", "maximum": -999},
            "float-bounds": {"type": "integer", "minimum": 1.5, "maximum": 7.9},
        },
        "required": ["pct", "neg", "span", "excl", "ge", "le", "float-bounds"],
    },
    "arrays": {
        "type": "object",
        "properties": {
            "a": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4},
            "b": {"type": "array", "minItems": 1},
            "c": {"type": "array", "maxItems": 0},
            "tuple": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                      "items": False},
            "exact": {"type": "array", "items": {"const": 1}, "minItems": 3, "maxItems": 3},
        },
        "required": ["a", "b", "c", "tuple", "exact"],
    },
    "additional-true": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
                        "additionalProperties": True},
    "additional-schema": {"type": "object", "properties": {"id": {"type": "integer"}, "ida": {"type": "integer"}},
                          "additionalProperties": {"type": "string", "maxLength": 2}},
    "additional-only": {"type": "object", "additionalProperties": {"type": "integer"}},
    "closed": {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
    "patterns": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"},
            "quoted": {"type": "string", "pattern": "^\"[a-z]+\\\\[0-9]\"$"},
            "contains": {"type": "string", "pattern": "ab+c"},
            "mac": {"type": "string", "pattern": "^(?:[0-9a-f]{2}:){5}[0-9a-f]{2}$"},
            "not-lower": {"type": "string", "pattern": "^[^a-z]{1,5}$"},
        },
        "required": ["code", "quoted", "contains", "mac", "not-lower"],
    },
    "anything": {},
    "pydantic-style": {
        "title": "Person", "description": "A person", "type": "object",
        "properties": {"name": {"title": "Name", "type": "string", "description": "full name"},
                       "email": {"title": "Email", "anyOf": [{"type": "string"}, {"type": "null"}],
                                 "default": None},
                       "pets": {"title": "Pets", "type": "array", "items": {"$ref": "#/$defs/Pet"}}},
        "required": ["name", "pets"],
        "$defs": {"Pet": {"title": "Pet", "type": "object",
                          "properties": {"kind": {"title": "Kind", "enum": ["cat", "dog"], "type": "string"}},
                          "required": ["kind"]}},
    },
}

MUTATIONS = [1, -7, 1.5, "x", "", None, True, [], {}, [1, "a"], {"zz": 1}, 10**7, "2020-13-45", "zz-999"]


def validator(schema):
    return jsonschema.Draft202012Validator(schema, format_checker=FORMATS)


def paths(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from paths(v, prefix + (i,))


def mutate(value, rng):
    """A copy of a JSON value with one random change."""
    value = copy.deepcopy(value)
    path = rng.choice(list(paths(value)))
    if not path:
        return rng.choice(MUTATIONS)
    parent = value
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    roll = rng.random()
    if isinstance(parent, dict) and roll < 0.3:
        del parent[last]
    elif isinstance(parent, dict) and roll < 0.5:
        parent["extra-" + str(rng.randrange(100))] = rng.choice(MUTATIONS)
    elif isinstance(parent, list) and roll < 0.5:
        parent.append(copy.deepcopy(parent[last]) if rng.random() < 0.5 else rng.choice(MUTATIONS))
    else:
        parent[last] = rng.choice(MUTATIONS)
    return value


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_random_sentences_validate_and_mutants_are_rejected(name):
    schema = SCHEMAS[name]
    gbnf = json_schema_to_gbnf(schema)
    g = _engine.Grammar(gbnf)
    check = validator(schema)
    rng = random.Random(name)
    docs = []
    for seed in range(120):
        text = g.random_string(seed, 14)
        doc = json.loads(text)
        errors = [e.message for e in check.iter_errors(doc)]
        assert not errors, (text, errors, gbnf)
        assert g.matches(text)
        docs.append(doc)
    n_rejected = 0
    for doc in docs[:60]:
        for _ in range(5):
            bad = mutate(doc, rng)
            if not check.is_valid(bad):
                n_rejected += 1
                for text in (json.dumps(bad), json.dumps(bad, ensure_ascii=False, indent=1)):
                    assert not g.matches(text), (text, gbnf)
    assert n_rejected > 0 or name == "anything"


def test_json_text_and_prop_order():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
              "required": ["a", "b"]}
    g = _engine.Grammar(json_schema_to_gbnf(json.dumps(schema)))
    assert g.matches('{"a": 1, "b": 2}') and not g.matches('{"b": 2, "a": 1}')
    g = _engine.Grammar(json_schema_to_gbnf(schema, prop_order=["b"]))
    assert g.matches('{"b": 2, "a": 1}') and not g.matches('{"a": 1, "b": 2}')


def test_optional_properties_any_subset_in_order():
    schema = SCHEMAS["all-optional"]
    g = _engine.Grammar(json_schema_to_gbnf(schema))
    values = {"a": "1", "b": '"x"', "c": "true"}
    for mask in range(8):
        keys = [k for i, k in enumerate("abc") if mask >> i & 1]
        text = "{" + ", ".join(f'"{k}": {values[k]}' for k in keys) + "}"
        assert g.matches(text), text
    assert not g.matches('{"b": "x", "a": 1}')
    assert not g.matches('{, "a": 1}') and not g.matches('{"a": 1,}')


def test_additional_property_keys_exclude_declared_names():
    g = _engine.Grammar(json_schema_to_gbnf(SCHEMAS["additional-schema"]))
    assert g.matches('{"id": 1, "ok": "ab"}')
    assert g.matches('{"i": "a", "idx": "b", "idaa": "c", "": "d"}')
    assert not g.matches('{"id": "a"}') and not g.matches('{"ida": "a"}')
    assert not g.matches('{"ok": "abc"}')


@pytest.mark.parametrize("lo, hi", [(0, 100), (-50, -3), (-1234, 1000), (37, None), (None, -999), (7, 7),
                                    (-9, 9), (99, 101), (None, 5)])
def test_integer_ranges_exhaustively(lo, hi):
    schema = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    g = _engine.Grammar(json_schema_to_gbnf(schema))
    for x in range(-2100, 2100):
        assert g.matches(str(x)) == ((lo is None or x >= lo) and (hi is None or x <= hi)), x
    for text in ("007", "-0", "+5", "1.0", "00"):
        if text == "-0":
            continue
        assert not g.matches(text), text


def test_dates_are_real_calendar_dates():
    g = _engine.Grammar(json_schema_to_gbnf({"type": "string", "format": "date"}))
    d = datetime.date(1890, 1, 1)
    while d.year < 2110:
        assert g.matches(json.dumps(d.isoformat())), d
        d += datetime.timedelta(days=1)
    for bad in ("2023-02-29", "1900-02-29", "2023-04-31", "0000-01-01", "2023-13-01", "2023-1-01", "23-01-01"):
        assert not g.matches(json.dumps(bad)), bad
    assert g.matches('"2000-02-29"') and g.matches('"2024-02-29"')


PATTERNS = [
    "^[A-Z]{2}-\\d{3}$", "^(foo|bar)+baz?$", "^\\w+@\\w+\\.(com|org)$", "ab", "^a", "z$",
    "^\"quoted\\\\path\"$", "^[^a-z]{1,5}$", "^.{3}$", "^\\S+\\s\\S+$", "^(?:[0-9a-f]{2}:){5}[0-9a-f]{2}$",
    "^\\u00e9+\\x41?$", "^a{2,}b{0,2}c??$", "^[\\d.-]+$", "^[\\]\\[x-]+$", "^(a|)b$", "^(?<word>[a-c]+)!$",
    "^\\t\\n[\\x00-\\x1f]$", "^\\D\\W$", "^$", "^[😀-😂]é?$",
]


@pytest.mark.parametrize("pattern", PATTERNS)
def test_patterns_match_python_re(pattern):
    schema = {"type": "string", "pattern": pattern}
    g = _engine.Grammar(json_schema_to_gbnf(schema))
    rx = re.compile(pattern.replace("(?<w", "(?P<w"))  # Python 3.11 spells named groups (?P<...>)
    for seed in range(150):
        text = g.random_string(seed, 10)
        value = json.loads(text)
        assert rx.search(value), (pattern, text)


def test_pattern_rejects_non_matching_strings():
    g = _engine.Grammar(json_schema_to_gbnf({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"}))
    assert g.matches('"AB-123"')
    for bad in ('"ab-123"', '"AB-12"', '"AB-1234"', '"AB123"', "AB-123"):
        assert not g.matches(bad), bad
    g = _engine.Grammar(json_schema_to_gbnf({"type": "string", "pattern": "^\"q\"$"}))
    assert g.matches('"\\"q\\""') and not g.matches('"q"')


@pytest.mark.parametrize("pattern, words", [
    ("^(a)\\1$", "backreferences"), ("^(?=a)a$", "lookaround"), ("^a\\bb$", "word boundaries"),
    ("^a^b$", "anchor"), ("^a|b", "anchor"), ("^a|b$", "anchors around"), ("^[[:alpha:]]$", "POSIX"),
    ("^a++$", "possessive"),
])
def test_unsupported_patterns_raise_not_implemented(pattern, words):
    with pytest.raises(NotImplementedError, match=words):
        json_schema_to_gbnf({"type": "string", "pattern": pattern})


def test_bad_schemas_raise_clear_errors(caplog):
    with pytest.raises(ValueError, match="matches nothing"):
        json_schema_to_gbnf(False)
    with pytest.raises(NotImplementedError, match="only references inside"):
        json_schema_to_gbnf({"$ref": "https://example.com/schema.json"})
    with pytest.raises(ValueError, match="does not resolve"):
        json_schema_to_gbnf({"$ref": "#/$defs/missing"})
    with pytest.raises(ValueError, match="unknown type"):
        json_schema_to_gbnf({"type": "decimal"})
    with pytest.raises(ValueError, match="no integer"):
        json_schema_to_gbnf({"type": "integer", "minimum": 5, "maximum": 4})
    with pytest.raises(ValueError, match="nothing in common"):
        json_schema_to_gbnf({"allOf": [{"type": "string"}, {"type": "integer"}]})
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        json_schema_to_gbnf({"type": "array", "uniqueItems": True})
        json_schema_to_gbnf({"type": "number", "minimum": 0.5})
    assert "uniqueItems" in caplog.text and "not enforced" in caplog.text


def test_bare_object_type_is_any_object():
    g = _engine.Grammar(json_schema_to_gbnf({"type": "object"}))
    assert g.matches('{"a": [1, {"b": null}]}') and g.matches("{}") and not g.matches("[]")
    g = _engine.Grammar(json_schema_to_gbnf({"type": "object", "properties": {}}))
    assert g.matches("{}") and not g.matches('{"a": 1}')


def test_openapi_nullable():
    g = _engine.Grammar(json_schema_to_gbnf({"type": "integer", "nullable": True}))
    assert g.matches("null") and g.matches("12") and not g.matches('"x"')


def test_property_names_needing_escapes():
    schema = {"type": "object", "properties": {'say "hi"': {"type": "integer"}, "back\\slash": {"type": "null"},
                                               "ünï": {"type": "boolean"}},
              "required": ['say "hi"', "back\\slash", "ünï"]}
    g = _engine.Grammar(json_schema_to_gbnf(schema))
    assert g.matches(json.dumps({'say "hi"': 1, "back\\slash": None, "ünï": True}, ensure_ascii=False))
    for seed in range(20):
        validator(schema).validate(json.loads(g.random_string(seed, 10)))
