"""The sampling options of one request as one value, parsed and checked once.

``Llama.sample`` / ``generate`` / ``create_completion`` / chat keep
llama-cpp-python's keyword spellings (users depend on them); each turns them
into a ``SamplingParams`` right away, and everything below (the sampler chain,
the completion loop, a server slot) takes that value. Its checks are the only
ones: an option that cannot work raises here, naming it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, Mapping, Optional

from . import _engine


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    tfs_z: float = 1.0                 # accepted; tail-free sampling is gone from llama.cpp (a warning says so)
    mirostat_mode: int = 0             # 0 off, 1 Mirostat, 2 Mirostat 2.0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    logit_bias: Optional[Mapping[int, float]] = field(default=None, hash=False, compare=False)
    grammar: Any = field(default=None, hash=False, compare=False)  # a LlamaGrammar (or its native object)

    def __post_init__(self) -> None:
        for f in ("temperature", "top_p", "min_p", "typical_p", "repeat_penalty", "frequency_penalty",
                  "presence_penalty", "tfs_z", "mirostat_tau", "mirostat_eta"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{f} must be a finite number, got {v!r}")
            object.__setattr__(self, f, float(v))
        for f in ("top_k", "mirostat_mode"):
            v = getattr(self, f)
            if isinstance(v, bool):
                raise ValueError(f"{f} must be an int, got {v!r}")
            if not isinstance(v, int):
                try:
                    v = int(v.__index__())  # numpy integers
                except (AttributeError, TypeError):
                    raise ValueError(f"{f} must be an int, got {v!r}") from None
            object.__setattr__(self, f, int(v))
        if not -2 ** 31 <= self.top_k < 2 ** 31:  # the engine's C int
            raise ValueError(f"top_k is {self.top_k}; it must be between {-2 ** 31} and {2 ** 31 - 1}")
        if self.mirostat_mode not in (0, 1, 2):
            raise ValueError(f"mirostat_mode must be 0 (off), 1 or 2, got {self.mirostat_mode}")
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, Mapping):
                raise TypeError(f"logit_bias must be a dict of token id -> bias, got {type(self.logit_bias).__name__}")
            bias: Dict[int, float] = {}
            for k, v in self.logit_bias.items():
                try:
                    key, val = int(k), float(v)
                except (TypeError, ValueError):
                    raise ValueError(f"logit_bias entry {k!r}: {v!r} is not token id -> number") from None
                if math.isnan(val):
                    raise ValueError(f"logit_bias[{key}] is NaN")
                bias[key] = val
            object.__setattr__(self, "logit_bias", bias or None)

    @classmethod
    def names(cls) -> tuple:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def of(cls, obj: Any) -> "SamplingParams":
        """The sampling options among obj's attributes (a request object
        whose fields use these names; missing ones take the defaults)."""
        return cls(**{n: getattr(obj, n) for n in cls.names() if hasattr(obj, n)})

    @classmethod
    def take(cls, kw: Dict[str, Any], **defaults: Any) -> "SamplingParams":
        """The sampling options among the keywords ``kw`` (removed from it);
        ``defaults`` for missing ones where a caller's differ (chat's temperature)."""
        return cls(**{**defaults, **{n: kw.pop(n) for n in cls.names() if n in kw}})

    def as_kwargs(self) -> Dict[str, Any]:
        """The options as llama-cpp-python's keywords (create_completion's)."""
        return {n: getattr(self, n) for n in self.names()}


def native_sampler(p: SamplingParams, n_vocab: int, *, penalty_last_n: int, seed: int,
                   grammar_vocab: Callable[[], Any], min_keep: int = 1) -> Any:
    """The engine's sampler chain for these options (Llama's requests and
    _internals.LlamaSampler's stages alike). ``seed`` is llama.cpp's uint32_t
    (0xFFFFFFFF: a random one); ``grammar_vocab`` is called only when a grammar
    is set (building the token texts costs a pass over the vocabulary)."""
    # The engine reads the options it knows from p by name (bind_sampling.cpp).
    s = _engine.Sampler(n_vocab, p, penalty_last_n=int(penalty_last_n), min_keep=int(min_keep),
                        seed=int(seed) & 0xFFFFFFFF)
    if p.logit_bias:
        s.set_logit_bias(list(p.logit_bias.items()))
    if p.grammar is not None:
        s.set_grammar(getattr(p.grammar, "native", p.grammar), grammar_vocab())
    return s


def grammar_vocab(tokenizer: Any, n_vocab: int) -> Any:
    """Token texts for grammar matching (control tokens have no text, so a
    grammar can only end them via the end-of-generation ids)."""
    piece = tokenizer.token_to_piece
    return _engine.GrammarVocab([piece(i, False) for i in range(n_vocab)], tokenizer.eog_ids)
