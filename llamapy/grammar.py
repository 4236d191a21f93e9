"""Grammars for constrained generation: llama-cpp-python's ``LlamaGrammar``.

A ``LlamaGrammar`` holds GBNF text and its parsed native grammar
(``llamapy._engine.Grammar``); sampling applies it natively (the sampler
checks the drawn token and filters the vocabulary only when it is rejected).
Malformed grammars raise ``GrammarError`` (a ``ValueError``) naming the line
and column.

Also here: ``json_schema_to_gbnf`` (llamapy/_json_schema.py), the built-in
JSON grammars, and ``grammar_for_response_format`` for OpenAI-style
``response_format`` arguments.

    grammar = LlamaGrammar.from_json_schema(json.dumps(schema))
    llm.create_completion(prompt, grammar=grammar)
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Union

from . import _engine
from ._engine import GrammarError
from ._json_schema import json_grammar, json_schema_to_gbnf

LLAMA_GRAMMAR_DEFAULT_ROOT = "root"

#: A JSON object (the top level), as llama-cpp-python's JSON_GBNF.
JSON_GBNF = json_grammar("object")
#: Any JSON value.
JSON_VALUE_GBNF = json_grammar("value")
#: A JSON array.
JSON_ARR_GBNF = json_grammar("array")


class LlamaGrammar:
    """A parsed GBNF grammar. Build it with ``from_string``, ``from_file`` or
    ``from_json_schema``; it is immutable and can be reused across calls."""

    def __init__(self, *args: Any, _grammar: str, _root: str = LLAMA_GRAMMAR_DEFAULT_ROOT, **kwargs: Any) -> None:
        self._grammar = _grammar
        self._root = _root
        self._native = _engine.Grammar(_grammar, _root)

    @classmethod
    def from_string(cls, grammar: str, verbose: bool = True) -> "LlamaGrammar":
        """Parse GBNF text. ``verbose`` is accepted for compatibility."""
        if not isinstance(grammar, str):
            raise TypeError(f"grammar must be a str, not {type(grammar).__name__}")
        return cls(_grammar=grammar)

    @classmethod
    def from_file(cls, file: Union[str, Path], verbose: bool = True) -> "LlamaGrammar":
        """Read and parse a GBNF file (UTF-8)."""
        text = Path(file).read_text(encoding="utf-8")
        if not text.strip():
            raise ValueError(f"grammar file {str(file)!r} is empty")
        return cls.from_string(text, verbose=verbose)

    @classmethod
    def from_json_schema(cls, json_schema: Union[str, Mapping[str, Any]], verbose: bool = True) -> "LlamaGrammar":
        """A grammar for JSON documents valid against ``json_schema`` (its JSON
        text, as llama-cpp-python takes it, or a dict)."""
        schema = json.loads(json_schema) if isinstance(json_schema, (str, bytes)) else dict(json_schema)
        return cls.from_string(json_schema_to_gbnf(schema), verbose=verbose)

    @property
    def grammar(self) -> str:
        """The GBNF text."""
        return self._grammar

    @property
    def native(self) -> Any:
        """The parsed grammar (``llamapy._engine.Grammar``), for a sampler's ``set_grammar``."""
        return self._native

    def matches(self, text: Union[str, bytes]) -> bool:
        """Whether ``text`` is a whole sentence of the grammar."""
        return self._native.matches(text)

    def __repr__(self) -> str:
        return f"LlamaGrammar({self._native.n_rules} rules, root={self._root!r})"


def grammar_for_response_format(response_format: Optional[Mapping[str, Any]]) -> Optional[LlamaGrammar]:
    """The grammar an OpenAI-style ``response_format`` asks for, or None:
    ``{"type": "json_object"}`` (any object, or ``"schema"`` if given) and
    ``{"type": "json_schema", "json_schema": {"schema": ...}}``."""
    if not response_format:
        return None
    kind = response_format.get("type")
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        schema = response_format.get("schema")
        return LlamaGrammar.from_json_schema(schema) if schema else LlamaGrammar.from_string(JSON_GBNF)
    if kind == "json_schema":
        spec: Dict[str, Any] = dict(response_format.get("json_schema") or {})
        schema = spec.get("schema", response_format.get("schema"))
        if schema is None:
            return LlamaGrammar.from_string(JSON_GBNF)
        return LlamaGrammar.from_json_schema(schema)
    raise ValueError(f"response_format type {kind!r} is not supported (use 'text', 'json_object' or 'json_schema')")


__all__ = [
    "GrammarError",
    "JSON_ARR_GBNF",
    "JSON_GBNF",
    "JSON_VALUE_GBNF",
    "LLAMA_GRAMMAR_DEFAULT_ROOT",
    "LlamaGrammar",
    "grammar_for_response_format",
    "json_schema_to_gbnf",
]
