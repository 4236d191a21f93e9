"""llama-cpp-python's ``llama_cpp.llama_tokenizer``: the tokenizer interface
``Llama(tokenizer=...)`` accepts, the model's own tokenizer, and a wrapper for
a Hugging Face tokenizer."""
from __future__ import annotations

import abc
from typing import Any, List, Optional

from ._tokenizer import LlamaTokenizer

__all__ = ["BaseLlamaTokenizer", "LlamaTokenizer", "LlamaHFTokenizer"]


class BaseLlamaTokenizer(abc.ABC):
    """What a tokenizer given to ``Llama(tokenizer=...)`` provides."""

    @abc.abstractmethod
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        """Token ids of UTF-8 ``text``; ``special``: control-token texts become their tokens."""

    @abc.abstractmethod
    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        """The bytes of ``tokens``; with ``prev_tokens``, those that follow the text of ``prev_tokens``."""


# llamapy's model tokenizer has this interface (it is defined in _tokenizer.py, next to the native vocabulary).
BaseLlamaTokenizer.register(LlamaTokenizer)


class LlamaHFTokenizer(BaseLlamaTokenizer):
    """A Hugging Face ``transformers`` tokenizer behind llama-cpp-python's
    tokenizer interface. As in llama-cpp-python, ``special`` is passed on as
    ``add_special_tokens`` and ``add_bos`` is left to the tokenizer."""

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf_tokenizer = hf_tokenizer

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.hf_tokenizer.encode(text.decode("utf-8", errors="ignore"), add_special_tokens=special)

    def detokenize(self, tokens: List[int], prev_tokens: Optional[List[int]] = None,
                   special: bool = False) -> bytes:
        def text(ids: List[int]) -> bytes:
            return self.hf_tokenizer.decode(ids, skip_special_tokens=not special).encode("utf-8", errors="ignore")

        if prev_tokens is None:
            return text(list(tokens))
        # Decoding depends on the neighbours (leading spaces, merged bytes): decode
        # with the previous tokens and keep what they do not account for.
        return text(list(prev_tokens) + list(tokens))[len(text(list(prev_tokens))):]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path: str) -> "LlamaHFTokenizer":
        try:
            from transformers import AutoTokenizer  # type: ignore[import-not-found]
        except ImportError as e:
            raise ImportError("LlamaHFTokenizer needs transformers: pip install transformers") from e
        return cls(AutoTokenizer.from_pretrained(pretrained_model_name_or_path=pretrained_model_name_or_path))
