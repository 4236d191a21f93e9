"""``LlamaTokenizer``: the model's own tokenizer (SPM or byte-level BPE from
the GGUF metadata), with llama-cpp-python's ``LlamaTokenizer`` methods.

All work is native (``_engine.Vocab``); this class only adapts names and
argument types.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

from . import _engine


class LlamaTokenizer:
    """Tokenizer of a GGUF model. Build it with ``LlamaTokenizer.from_gguf``
    or ``from_ggml_file``; ``Llama.tokenizer()`` returns the model's one."""

    def __init__(self, vocab: Any) -> None:
        if isinstance(getattr(vocab, "tokenizer_", None), LlamaTokenizer):  # LlamaTokenizer(llama), as llama-cpp-python
            vocab = vocab.tokenizer_._vocab
        self._vocab = vocab
        self.n_vocab = int(vocab.n_vocab)
        self._eog = frozenset(int(t) for t in vocab.eog_ids)

    @classmethod
    def from_gguf(cls, gguf: Any) -> "LlamaTokenizer":
        return cls(_engine.Vocab.from_file(gguf.path))

    @classmethod
    def from_ggml_file(cls, path: str) -> "LlamaTokenizer":
        return cls(_engine.Vocab.from_file(path))

    # llama-cpp-python's BaseLlamaTokenizer interface ---------------------------
    def tokenize(self, text: Union[bytes, str], add_bos: bool = True, special: bool = True) -> List[int]:
        if isinstance(text, str):
            text = text.encode("utf-8")
        if not isinstance(text, (bytes, bytearray, memoryview)):
            raise TypeError(f"text must be bytes or str, not {type(text).__name__}")
        return list(self._vocab.tokenize(bytes(text), bool(add_bos), bool(special)))

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        """Bytes of ``tokens`` (pieces joined, as llama-cpp-python does; a
        leading space after a leading BOS is dropped). ``prev_tokens`` is
        accepted for compatibility: pieces do not depend on it here."""
        return bytes(self._vocab.detokenize([int(t) for t in tokens], bool(special)))

    def encode(self, text: str, add_bos: bool = True, special: bool = True) -> List[int]:
        return self.tokenize(text.encode("utf-8", errors="ignore"), add_bos=add_bos, special=special)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.detokenize(tokens).decode("utf-8", errors="ignore")

    # what the generation loop needs -------------------------------------------
    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        return bytes(self._vocab.token_to_piece(int(token), bool(special)))

    def is_eog(self, token: int) -> bool:
        return token in self._eog

    @property
    def eog_ids(self) -> List[int]:
        return sorted(self._eog)

    def token_bos(self) -> int:
        return int(self._vocab.bos)

    def token_eos(self) -> int:
        return int(self._vocab.eos)

    def token_nl(self) -> int:
        return int(self._vocab.nl)

    def special_token(self, name: str) -> int:
        """A special token's id by the engine's name for it (bos, eos, eot,
        sep, fim_pre, fim_suf, fim_mid, fim_rep, fim_sep ...), -1 if none."""
        return int(getattr(self._vocab, name))

    @property
    def add_bos(self) -> bool:
        return bool(self._vocab.add_bos)

    @property
    def add_eos(self) -> bool:
        return bool(self._vocab.add_eos)

    @property
    def native(self) -> Any:
        return self._vocab
