"""The named intermediate tensors of a forward pass, for debugging.

The engine can hand every named intermediate of its forward passes to a
callback (``_engine.Context.set_tensor_callback``). Names are llama.cpp's
graph names, so a dump can be diffed against llama.cpp's eval callback:
``inp_embd``, ``attn_norm-<il>``, ``Qcur-<il>``, ``Kcur-<il>``,
``Vcur-<il>``, ``kqv_out-<il>`` (attention output before the output
projection), ``attn_out-<il>``, ``ffn_inp-<il>`` (``sa_out-<il>`` for Gemma),
``ffn_norm-<il>``, ``ffn_out-<il>``, ``l_out-<il>``, ``result_norm``,
``result_output`` (encoders: ``inp_norm-0`` and ``result_embd``). Each is a
float32 array of shape (rows, cols). With no callback set the engine pays a
null check per name, nothing more.

    from llamapy import Llama
    from llamapy.debug import TensorDump, collect_tensors

    llm = Llama(model_path="model.gguf")
    tensors = collect_tensors(llm, llm.tokenize(b"Hello"))
    tensors["attn_norm-0"].shape        # (n_tokens, n_embd)

    with TensorDump(llm, names=lambda s: s.startswith("l_out")) as dump:
        llm("Hello", max_tokens=4)
    dump.calls                           # [(name, array), ...] in evaluation order

Rows: a pass evaluates one micro-batch; ``TensorDump.tensors`` joins the
rows of successive calls under one name. The last layer continues with the
rows whose outputs are kept only (from ``attn_out-<last>`` on), as in
llama.cpp.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

import numpy as np

NameFilter = Union[None, Iterable[str], Callable[[str], bool]]


def _context(target: Any) -> Any:
    """The engine context of a Llama, or the context itself."""
    ctx = getattr(target, "_ctx", target)
    if ctx is None or not hasattr(ctx, "set_tensor_callback"):
        raise ValueError("tensor dumps need a Llama with a context (not vocab_only) or an _engine.Context")
    return ctx


class TensorDump:
    """Records the named intermediates while active (a context manager).

    names: None (all), a collection of names, or a predicate on the name.
    ``calls`` keeps every (name, array) in order; ``tensors`` (and
    ``dump[name]``) the rows of all calls of a name, concatenated.
    """

    def __init__(self, target: Any, names: NameFilter = None) -> None:
        self._ctx = _context(target)
        if names is None or callable(names):
            self._want = names
        else:
            wanted = set(names)
            self._want = wanted.__contains__
        self.calls: List[Tuple[str, np.ndarray]] = []

    def _record(self, name: str, array: np.ndarray) -> None:
        if self._want is None or self._want(name):
            self.calls.append((name, array))

    def __enter__(self) -> "TensorDump":
        self._ctx.set_tensor_callback(self._record)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._ctx.set_tensor_callback(None)

    @property
    def tensors(self) -> Dict[str, np.ndarray]:
        parts: Dict[str, List[np.ndarray]] = {}
        for name, a in self.calls:
            parts.setdefault(name, []).append(a)
        return {k: v[0] if len(v) == 1 else np.concatenate(v) for k, v in parts.items()}

    def __getitem__(self, name: str) -> np.ndarray:
        return self.tensors[name]

    def names(self) -> List[str]:
        """Distinct names in order of first appearance."""
        return list(dict.fromkeys(name for name, _ in self.calls))


def collect_tensors(llama: Any, tokens: Iterable[int], names: NameFilter = None) -> Dict[str, np.ndarray]:
    """Evaluates tokens with ``llama.eval`` (after what it already holds; call
    ``llama.reset()`` first for a fresh sequence) and returns the named
    intermediates of that evaluation."""
    with TensorDump(llama, names) as dump:
        llama.eval(list(tokens))
    return dump.tensors


def set_tensor_callback(llama: Any, fn: Optional[Callable[[str, np.ndarray], None]]) -> None:
    """Installs fn(name, array) on the context of a Llama (None removes it)."""
    _context(llama).set_tensor_callback(fn)
