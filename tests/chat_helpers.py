"""A scripted stand-in for ``Llama`` for chat-layer tests that need no model.

``ScriptedLlama`` has the parts of ``Llama`` that ``llamapy.chat`` and
``llamapy._completion`` use: a byte-level tokenizer with special tokens, and a
"model" whose ``generate`` yields a fixed reply and then EOS. Its
``create_completion`` runs llamapy's real completion code (stop strings,
streaming, usage), so chat tests exercise everything above the engine.
Grammars are recorded, not applied (the scripted reply is what it is).

``gemma_speaking`` is the other way: a real ``Llama`` (Gemma 3 270M's vocabulary, a chat
template of another model) whose ``generate`` is scripted.
"""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence

import numpy as np

from llamapy._completion import CompletionRequest, run_completion, stream_completion

SPECIALS = ["<pad>", "<s>", "</s>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<|im_start|>",
            "<|im_end|>", "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
N_BYTE_BASE = len(SPECIALS)


class ScriptedTokenizer:
    """Special tokens get ids 0..len(SPECIALS)-1; every other byte b is N_BYTE_BASE + b."""

    def __init__(self, bos: str, eos: str, add_bos: bool, eog: Sequence[str]) -> None:
        self.ids = {t: i for i, t in enumerate(SPECIALS)}
        self.bos, self.eos, self.add_bos = self.ids[bos], self.ids[eos], add_bos
        self.eog = {self.ids[t] for t in eog} | {self.eos}
        self.n_vocab = N_BYTE_BASE + 256

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        if isinstance(text, str):
            text = text.encode("utf-8")
        s = text.decode("utf-8")
        out = [self.bos] if add_bos and self.add_bos else []
        i = 0
        while i < len(s):
            hit = next((t for t in sorted(self.ids, key=len, reverse=True) if special and s.startswith(t, i)), None)
            if hit is not None:
                out.append(self.ids[hit])
                i += len(hit)
            else:
                out.extend(N_BYTE_BASE + b for b in s[i].encode("utf-8"))
                i += 1
        return out

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        if token < N_BYTE_BASE:
            return SPECIALS[token].encode() if special else b""
        return bytes([token - N_BYTE_BASE])

    def detokenize(self, tokens: Sequence[int], prev_tokens: Any = None, special: bool = False) -> bytes:
        return b"".join(self.token_to_piece(t, special) for t in tokens)

    def is_eog(self, token: int) -> bool:
        return token in self.eog


class ScriptedSequence:
    """The parts of llamapy._sequence.Sequence that _completion.py reads."""

    def __init__(self, llm: "ScriptedLlama", n_ctx: int) -> None:
        self.llm = llm
        self.seed = 1234
        self.lock = threading.RLock()
        self.perf = None
        self.n_ctx = n_ctx

    def ensure_usable(self) -> None:
        return None

    def evaluated(self) -> np.ndarray:
        return self.llm.input_ids[: self.llm.n_tokens]

    def last_logits(self) -> np.ndarray:
        logits = np.zeros(self.llm.tokenizer_.n_vocab, dtype=np.single)
        if self.llm.n_tokens:
            logits[self.llm._next] = 5.0
        return logits


class ScriptedLlama:
    """Replies with ``reply`` (a str: its bytes are the tokens; or a list of
    token ids) to any prompt, then EOS."""

    def __init__(self, reply: Any = "", *, bos: str = "<bos>", eos: str = "<eos>", add_bos: bool = True,
                 eog: Sequence[str] = ("<end_of_turn>", "<|im_end|>", "<|eot_id|>"),
                 metadata: Optional[Dict[str, Any]] = None, chat_format: Optional[str] = None,
                 chat_handler: Any = None, n_ctx: int = 4096) -> None:
        self.tokenizer_ = ScriptedTokenizer(bos, eos, add_bos, eog)
        self.reply = reply
        self.metadata = dict(metadata or {"general.architecture": "gemma3"})
        self.chat_format = chat_format
        self.chat_handler = chat_handler
        self.verbose = False
        self.model_path = "scripted.gguf"
        self.cache = None
        self.sequence = ScriptedSequence(self, n_ctx)
        self._n_ctx = n_ctx
        self.input_ids = np.zeros(n_ctx, dtype=np.intc)
        self.n_tokens = 0
        self.calls: List[Dict[str, Any]] = []  # every create_completion call: prompt tokens and keywords

    # the Llama surface used by the chat layer and _completion.py
    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        return self.tokenizer_.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Any = None, special: bool = False) -> bytes:
        return self.tokenizer_.detokenize(tokens, special=special)

    def token_bos(self) -> int:
        return self.tokenizer_.bos

    def token_eos(self) -> int:
        return self.tokenizer_.eos

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_vocab(self) -> int:
        return self.tokenizer_.n_vocab

    def set_seed(self, seed: int) -> None:
        self.sequence.seed = seed

    def reply_tokens(self) -> List[int]:
        if isinstance(self.reply, str):
            return [N_BYTE_BASE + b for b in self.reply.encode("utf-8")]
        return list(self.reply)

    def generate(self, tokens: Sequence[int], **kwargs: Any) -> Iterator[int]:
        self.n_tokens = 0
        for t in list(tokens) + self.reply_tokens() + [self.tokenizer_.eos]:
            self._next = t
            if self.n_tokens >= len(tokens):
                yield t
            self.input_ids[self.n_tokens] = t
            self.n_tokens += 1

    def create_completion(self, prompt: Any, stream: bool = False, grammar: Any = None, **kwargs: Any) -> Any:
        self.calls.append(dict(kwargs, prompt=list(prompt), stream=stream, grammar=grammar))
        req = CompletionRequest.of(prompt, grammar=grammar, **kwargs)
        return stream_completion(self, req) if stream else run_completion(self, req)

    def create_chat_completion(self, *args: Any, **kwargs: Any) -> Any:
        # Llama's method (its signature declares the chat keywords and their defaults) on this stand-in.
        from llamapy import Llama

        return Llama.create_chat_completion(self, *args, **kwargs)


def sdist_template(sdist: Any, name: str) -> str:
    """A chat template from llama.cpp's models/templates in llama-cpp-python's sdist."""
    return (Path(sdist) / "vendor" / "llama.cpp" / "models" / "templates" / name).read_text(encoding="utf-8")


@contextlib.contextmanager
def gemma_speaking(gemma_path: str, template: str, reply: Dict[str, str], n_ctx: int = 2048) -> Iterator[Any]:
    """A Llama on Gemma 3 270M with ``template`` as its chat template whose generate yields
    the tokens of ``reply["text"]`` (read at each call), then EOS: the chat layer, the
    completion loop and the tokenizer are real, the model's choice is scripted."""
    import pytest

    from llamapy.llama import Llama

    def generate(self, tokens, **kwargs):
        yield from self.tokenize(reply["text"].encode("utf-8"), add_bos=False, special=False) + [self.token_eos()]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Llama, "generate", generate)
        m = Llama(model_path=gemma_path, n_ctx=n_ctx, verbose=False, kv_overrides={"tokenizer.chat_template": template})
        try:
            yield m
        finally:
            m.close()
