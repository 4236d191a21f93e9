"""llama-cpp-python's ``llama_cpp._internals``: the intermediate wrappers
``LlamaModel``, ``LlamaContext``, ``LlamaBatch`` and ``LlamaSampler`` that
code (and llama-cpp-python's own tests) drive by hand: load a model from a
``llama_model_params`` record, make a context from a
``llama_context_params`` record, fill a batch, ``decode`` it, sample from a
sampler chain.

Here they sit on llamapy's engine instead of llama.cpp's C API. What differs:
- ``LlamaModel.model`` / ``.vocab`` and ``LlamaContext.ctx`` are the engine's
  ``Model`` / ``Vocab`` / ``Context`` objects, not ctypes pointers (``Llama._model``
  is a ``LlamaModel`` over the Llama's own Model, as there);
  ``LlamaBatch.batch`` holds numpy arrays (``token``, ``pos``, ``seq_id``,
  ``logits``), not a ``llama_batch`` structure.
- ``get_logits*`` / ``get_embeddings*`` return ctypes float pointers as
  llama.cpp's do (index them, or ``np.ctypeslib.as_array``), valid until the
  next ``decode``.
- ``LlamaSampler`` runs its stages on the engine's sampler chain, whose order
  is llama-cpp-python's ``Llama.sample`` order: logit bias, penalties,
  grammar, top-k, typical, top-p, min-p, temperature, then one of dist /
  greedy / mirostat / mirostat 2 (for a seed, the tokens llama.cpp's chain
  draws from the same logits). Stages added in another order, and the
  stages that chain does not have (XTC, top-n-sigma, DRY, dynamic
  temperature, infill, lazy grammars, custom Python samplers), raise
  ``NotImplementedError`` when added.
- ``LlamaTokenDataArray``, ``CustomSampler``, ``LlamaSamplingParams`` and
  ``LlamaSamplingContext`` work on llama.cpp's ctypes candidate arrays and
  are not provided; the deprecated ``LlamaContext.sample_*`` methods raise
  ``NotImplementedError`` with llama-cpp-python's own messages.
"""
from __future__ import annotations

import ctypes
import os
import weakref
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from . import _engine
from . import llama_cpp as _c
from . import _params
from ._sampling import SamplingParams, grammar_vocab, native_sampler
from ._tokenizer import LlamaTokenizer
from .gguf_file import GGUFFile, metadata_strings

__all__ = ["LlamaModel", "LlamaContext", "LlamaBatch", "LlamaSampler", "normalize_embedding"]

_FLOAT_P = ctypes.POINTER(ctypes.c_float)

# tokenizer.ggml.model -> llama_vocab_type (llama-vocab.cpp's choice per model name)
_VOCAB_TYPES = {"no_vocab": _c.LLAMA_VOCAB_TYPE_NONE, "none": _c.LLAMA_VOCAB_TYPE_NONE,  # type: ignore[attr-defined]
                "llama": _c.LLAMA_VOCAB_TYPE_SPM, "bert": _c.LLAMA_VOCAB_TYPE_WPM,  # type: ignore[attr-defined]
                "gpt2": _c.LLAMA_VOCAB_TYPE_BPE, "hybriddna": _c.LLAMA_VOCAB_TYPE_BPE,  # type: ignore[attr-defined]
                "whitespace": _c.LLAMA_VOCAB_TYPE_BPE, "gemma4": _c.LLAMA_VOCAB_TYPE_BPE,  # type: ignore[attr-defined]
                "t5": _c.LLAMA_VOCAB_TYPE_UGM, "rwkv": _c.LLAMA_VOCAB_TYPE_RWKV,  # type: ignore[attr-defined]
                "plamo2": _c.LLAMA_VOCAB_TYPE_PLAMO2}  # type: ignore[attr-defined]


def _engine_model_params(path: str, params: Any) -> Any:
    """The engine's ModelParams for a ``llama_model_params`` record."""
    load_mode = getattr(params, "load_mode", _c.LLAMA_LOAD_MODE_AUTO)  # type: ignore[attr-defined]
    mapped = (_c.LLAMA_LOAD_MODE_MMAP, _c.LLAMA_LOAD_MODE_MMAP_MLOCK)  # type: ignore[attr-defined]
    vocab_only = bool(getattr(params, "vocab_only", False))
    # AUTO keeps llamapy's default (read into memory where it fits, else map)
    use_mmap = None if load_mode == _c.LLAMA_LOAD_MODE_AUTO else load_mode in mapped  # type: ignore[attr-defined]
    return _engine.ModelParams(vocab_only=vocab_only, kv_overrides=getattr(params, "kv_overrides", None),
                               **_params.load_options(path, use_mmap, vocab_only))


# llama.h keeps the GPU placement in the model's params; the engine, in the context's.
_PLACEMENT = ("n_gpu_layers", "split_mode", "main_gpu", "tensor_split")


def _engine_context_params(params: Any, model_params: Any, verbose: bool) -> Any:
    """The engine's ContextParams for a ``llama_context_params`` record: every field
    the two share by name (llama.h's -1 for a YaRN factor means the model's value,
    the engine's default), flash_attn_type as flash_attn, and the placement of the
    model's record."""
    cp = _engine.ContextParams()
    for name, value in vars(params).items():
        if hasattr(_engine.ContextParams, name) and name not in _PLACEMENT \
                and not (name.startswith("yarn_") and name != "yarn_ext_factor" and value < 0):
            setattr(cp, name, value)
    cp.flash_attn = getattr(params, "flash_attn_type", _c.LLAMA_FLASH_ATTN_TYPE_AUTO)  # type: ignore[attr-defined]
    cp.n_seq_max = max(1, int(getattr(params, "n_seq_max", 1) or 1))
    for name in _PLACEMENT:
        value = getattr(model_params, name, None)
        if value is not None:
            setattr(cp, name, _params.gpu_layers_value(value) if name == "n_gpu_layers" else value)
    _params.place_on_gpu(cp, verbose, bool(getattr(model_params, "vocab_only", False)),
                         getattr(model_params, "split_mode", 1), None)
    return cp


class LlamaModel:
    """A loaded GGUF model and its vocabulary (llama-cpp-python's
    ``_internals.LlamaModel``; ``Llama._model`` is one). ``.model`` is the
    engine's Model; its other attributes (``arch``, ``n_layer``,
    ``weights_in_memory``, ...) read through. ``Llama`` is the API to prefer."""

    def __init__(self, *, path_model: str, params: Any, verbose: bool = True) -> None:
        self._setup(path_model, params, verbose)
        if not os.path.exists(path_model):
            raise ValueError(f"Model path does not exist: {path_model}")
        mp = _engine_model_params(_params.model_file(path_model), params)
        self._model_params = mp
        self.model = _engine.Model(path_model, mp)
        self._vocab = _engine.Vocab.from_file(path_model, kv_overrides=mp.kv_overrides or None)

    def _setup(self, path_model: str, params: Any, verbose: bool) -> None:
        self.path_model = path_model
        self.params = params
        self.verbose = verbose
        self.sampler = None  # llama-cpp-python's cleanup code reads these
        self.custom_samplers: List[Any] = []
        self.model: Any = None
        self._vocab: Any = None
        self._model_params: Any = None
        self._contexts: "weakref.WeakSet[LlamaContext]" = weakref.WeakSet()

    @classmethod
    def _of(cls, model: Any, path: str, model_params: Any, vocab: Any = None, verbose: bool = False) -> "LlamaModel":
        """The wrapper of a model Llama has loaded (vocab None: read when first needed)."""
        self = cls.__new__(cls)
        self._setup(path, _c.llama_model_default_params(), verbose)
        self._model_params = model_params
        self.model = model
        self._vocab = vocab
        return self

    @property
    def vocab(self) -> Any:
        """The engine's Vocab of the model (llama-cpp-python: the llama_vocab pointer)."""
        if self._vocab is None and self.model is not None:
            self._vocab = _engine.Vocab.from_file(self.path_model, kv_overrides=self._model_params.kv_overrides or None)
        return self._vocab

    @property
    def _tokenizer(self) -> LlamaTokenizer:
        tok = self.__dict__.get("_tokenizer_")
        if tok is None:
            tok = self.__dict__["_tokenizer_"] = LlamaTokenizer(self.vocab)
        return tok

    def __getattr__(self, name: str) -> Any:
        # the engine Model's own attributes (arch, n_layer, weights_in_memory, ...)
        model = self.__dict__.get("model")
        if model is None or name.startswith("_"):
            raise AttributeError(name)
        return getattr(model, name)

    def _grammar_vocab(self) -> Any:
        """Token texts for grammar matching, built once per model."""
        gv = self.__dict__.get("_gvocab")
        if gv is None:
            gv = self.__dict__["_gvocab"] = grammar_vocab(self._tokenizer, self.n_vocab())
        return gv

    def close(self) -> None:
        """Frees the model; its contexts are closed first (as llama.cpp's must be)."""
        for ctx in list(self.__dict__.get("_contexts", ())):
            ctx.close()
        self.model = None
        self._vocab = None
        self.__dict__.pop("_tokenizer_", None)
        self.__dict__.pop("_gvocab", None)

    def __del__(self) -> None:
        self.close()

    def _open(self) -> Any:
        if self.model is None:
            raise ValueError("this LlamaModel has been closed")
        return self.model

    # model facts
    def vocab_type(self) -> int:
        self._open()
        return _VOCAB_TYPES.get(str(self.vocab.model), _c.LLAMA_VOCAB_TYPE_NONE)  # type: ignore[attr-defined]

    def n_vocab(self) -> int:
        self._open()
        return int(self.vocab.n_vocab)

    def n_ctx_train(self) -> int:
        return int(self._open().n_ctx_train)

    def n_embd(self) -> int:
        return int(self._open().n_embd)

    def rope_freq_scale_train(self) -> float:
        """1 / the GGUF's rope scaling factor (1.0 without one), as llama.cpp reads it."""
        arch = str(self._open().arch)
        meta = GGUFFile(self.path_model).metadata
        factor = meta.get(f"{arch}.rope.scaling.factor", meta.get(f"{arch}.rope.scale_linear", 0.0))
        return 1.0 if not factor else 1.0 / float(factor)

    def desc(self) -> str:
        return str(self._open().desc())

    def size(self) -> int:
        return int(self._open().size_bytes)

    def n_params(self) -> int:
        return int(self._open().n_params)

    def get_tensor(self, name: str) -> Any:
        raise NotImplementedError("get_tensor is not implemented in llama.cpp")  # llama-cpp-python's own answer

    # vocabulary
    def token_get_text(self, token: int) -> str:
        self._open()
        return bytes(self.vocab.token_text(int(token))).decode("utf-8")

    def token_get_score(self, token: int) -> float:
        self._open()
        return float(self.vocab.token_score(int(token)))

    def token_get_attr(self, token: int) -> int:
        self._open()
        return int(self.vocab.token_attr(int(token)))

    def _special(self, name: str) -> int:
        self._open()
        return int(getattr(self.vocab, name))

    def token_bos(self) -> int:
        return self._special("bos")

    def token_eos(self) -> int:
        return self._special("eos")

    def token_cls(self) -> int:
        return self._special("bos")  # llama.cpp's llama_vocab_cls is its BOS

    def token_sep(self) -> int:
        return self._special("sep")

    def token_nl(self) -> int:
        return self._special("nl")

    def token_prefix(self) -> int:
        return self._special("fim_pre")

    def token_middle(self) -> int:
        return self._special("fim_mid")

    def token_suffix(self) -> int:
        return self._special("fim_suf")

    def token_eot(self) -> int:
        return self._special("eot")

    def add_bos_token(self) -> bool:
        self._open()
        return bool(self.vocab.add_bos)

    def add_eos_token(self) -> bool:
        self._open()
        return bool(self.vocab.add_eos)

    # tokenization
    def tokenize(self, text: bytes, add_bos: bool, special: bool) -> List[int]:
        self._open()
        return self._tokenizer.tokenize(text, add_bos, special)

    def token_to_piece(self, token: int, special: bool = False) -> bytes:
        """The piece's bytes (llama-cpp-python returns them padded with NULs to 32 bytes)."""
        self._open()
        return self._tokenizer.token_to_piece(token, special)

    def detokenize(self, tokens: List[int], special: bool = False) -> bytes:
        self._open()
        return self._tokenizer.detokenize(tokens, special=special)

    def metadata(self) -> Dict[str, str]:
        self._open()
        return metadata_strings(GGUFFile(self.path_model), self._model_params.kv_overrides)

    @staticmethod
    def default_params() -> Any:
        return _c.llama_model_default_params()


class _VocabOnlyContext:
    """The context of a model loaded with ``vocab_only=True``. llama.cpp makes
    one (its decode then fails); this one knows its sizes and says why it
    cannot evaluate anything."""

    def __init__(self, n_ctx: int, n_batch: int, n_ubatch: int) -> None:
        self.n_ctx, self.n_batch, self.n_ubatch = n_ctx, n_batch, n_ubatch
        self.n_outputs = 0

    @property
    def ctx(self) -> "_VocabOnlyContext":
        return self

    def __getattr__(self, name: str) -> Any:
        # An AttributeError (so hasattr() answers False) that names the reason.
        raise AttributeError(f"{name}: the model was loaded with vocab_only=True; its context cannot evaluate")


class LlamaContext:
    """A context (KV cache, outputs) on a ``LlamaModel`` (llama-cpp-python's
    ``_internals.LlamaContext``)."""

    def __init__(self, *, model: LlamaModel, params: Any, verbose: bool = True) -> None:
        self.model = model
        self.params = params
        self.verbose = verbose
        self.sampler = None
        self.ctx: Any = None
        engine_cp = _engine_context_params(params, model.params, verbose)
        if model._open().vocab_only:
            resolved = engine_cp.resolved(model.model)
            self.ctx = _VocabOnlyContext(int(resolved.n_ctx), int(resolved.n_batch), int(resolved.n_ubatch))
        else:
            self.ctx = _engine.Context(model.model, engine_cp)
        self.memory = self.ctx
        self._rows: Optional[np.ndarray] = None  # output row of each index of the last batch (-1: none)
        self._held: List[Any] = []  # what the returned pointers point into
        model._contexts.add(self)

    def close(self) -> None:
        self.ctx = None
        self.memory = None
        self._held = []

    def __del__(self) -> None:
        self.close()

    def _open(self) -> Any:
        if self.ctx is None:
            raise ValueError("this LlamaContext has been closed")
        return self.ctx

    def n_ctx(self) -> int:
        return int(self._open().n_ctx)

    def pooling_type(self) -> int:
        return int(self._open().pooling_type)

    # KV cache
    def kv_cache_clear(self) -> None:
        self._open().kv_clear()

    def kv_cache_seq_rm(self, seq_id: int, p0: int, p1: int) -> bool:
        self._open().kv_seq_rm(seq_id if seq_id >= 0 else 0, p0, p1)
        return True

    def kv_cache_seq_cp(self, seq_id_src: int, seq_id_dst: int, p0: int, p1: int) -> None:
        self._open().kv_seq_cp(seq_id_src, seq_id_dst, p0, p1)

    def kv_cache_seq_keep(self, seq_id: int) -> None:
        self._open().kv_seq_keep(seq_id)

    def kv_cache_seq_shift(self, seq_id: int, p0: int, p1: int, shift: int) -> None:
        raise NotImplementedError("kv_cache_seq_shift: llamapy's KV cache does not shift positions in place "
                                  "(Llama handles context shifts itself)")

    def get_state_size(self) -> int:
        return len(self._open().state_get())

    # evaluation
    def decode(self, batch: "LlamaBatch") -> None:
        ctx = self._open()
        n = batch.n_tokens()
        if n <= 0:
            raise RuntimeError("llama_decode: the batch is empty")
        b = batch.batch
        want = b.logits[:n].astype(bool)
        if (b.n_seq_id[:n] == 1).all():
            seq_ids: Any = b.seq_id[:n, 0]
        else:
            seq_ids = [b.seq_id[i, :b.n_seq_id[i]].tolist() for i in range(n)]
        self._held = []
        self._rows = None
        try:
            ctx.decode(tokens=b.token[:n], pos=b.pos[:n], seq_ids=seq_ids, logits=want)
        except ValueError as e:  # llama-cpp-python raises RuntimeError for a failed llama_decode
            raise RuntimeError(f"llama_decode failed: {e}") from e
        rows = np.full(n, -1, dtype=np.int64)
        kept = np.flatnonzero(want)
        rows[kept] = np.arange(len(kept))
        self._rows = rows

    def encode(self, batch: "LlamaBatch") -> None:
        self.decode(batch)

    def set_n_threads(self, n_threads: int, n_threads_batch: int) -> None:
        raise NotImplementedError("set_n_threads: a llamapy context keeps the thread counts it was made with")

    def _row(self, i: int) -> int:
        if self._rows is None:
            raise ValueError("nothing has been decoded yet")
        n_out = int(self._open().n_outputs)
        if i < 0:
            if -i > n_out:
                raise ValueError(f"output index {i} is out of range ({n_out} outputs)")
            return n_out + i
        if i >= len(self._rows) or self._rows[i] < 0:
            raise ValueError(f"batch index {i} has no output (its logits flag was not set)")
        return int(self._rows[i])

    def _pointer(self, arr: np.ndarray) -> Any:
        arr = np.ascontiguousarray(arr, dtype=np.single)
        self._held.append(arr)
        return arr.ctypes.data_as(_FLOAT_P)

    def _logits_row(self, i: int) -> np.ndarray:
        return self._open().get_logits(self._row(i))

    def get_logits(self) -> Any:
        return self._pointer(self._open().get_logits_all())

    def get_logits_ith(self, i: int) -> Any:
        return self._pointer(self._logits_row(i))

    def get_embeddings(self) -> Any:
        return self._pointer(self._open().get_embeddings_all())

    def get_embeddings_ith(self, i: int) -> Any:
        return self._pointer(self._open().get_embeddings(self._row(i)))

    def get_embeddings_seq(self, seq_id: int) -> Any:
        return self._pointer(self._open().get_embeddings_seq(seq_id))

    def reset_timings(self) -> None:
        """Nothing to reset: timings are ``Llama``'s (``verbose=True`` prints them)."""

    def print_timings(self) -> None:
        """Nothing to print: timings are ``Llama``'s (``verbose=True`` prints them)."""

    @staticmethod
    def default_params() -> Any:
        return _c.llama_context_default_params()


def _deprecated(name: str) -> Any:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{name} is deprecated, use LlamaSampler instead")

    method.__name__ = name
    return method


for _name in ("set_rng_seed", "sample_repetition_penalties", "sample_softmax", "sample_top_k", "sample_top_p",
              "sample_min_p", "sample_typical", "sample_temp", "sample_grammar", "sample_token_mirostat",
              "sample_token_mirostat_v2", "sample_token_greedy", "sample_token", "grammar_accept_token"):
    setattr(LlamaContext, _name, _deprecated(_name))


class _Batch:
    """The fields of a llama_batch, as numpy arrays."""

    def __init__(self, n_tokens: int, embd: int, n_seq_max: int) -> None:
        self.n_tokens = 0
        self.token = np.zeros(n_tokens, dtype=np.int32)
        self.embd = np.zeros((n_tokens, embd), dtype=np.single) if embd else None
        self.pos = np.zeros(n_tokens, dtype=np.int32)
        self.n_seq_id = np.zeros(n_tokens, dtype=np.int32)
        self.seq_id = np.zeros((n_tokens, n_seq_max), dtype=np.int32)
        self.logits = np.zeros(n_tokens, dtype=np.int8)


class LlamaBatch:
    """Up to ``n_tokens`` tokens with positions, sequence ids and output flags
    (llama-cpp-python's ``_internals.LlamaBatch``)."""

    def __init__(self, *, n_tokens: int, embd: int, n_seq_max: int, verbose: bool = True) -> None:
        if n_tokens < 1 or n_seq_max < 1 or embd < 0:
            raise ValueError(f"LlamaBatch needs n_tokens >= 1, n_seq_max >= 1, embd >= 0 (got {n_tokens}, "
                             f"{n_seq_max}, {embd})")
        if embd:
            raise NotImplementedError("LlamaBatch with embd > 0: batches of embeddings are not supported here "
                                      "(Llama's multimodal handlers pass image embeddings)")
        self._n_tokens = n_tokens
        self.embd = embd
        self.n_seq_max = n_seq_max
        self.verbose = verbose
        self.sampler = None
        self.batch: Optional[_Batch] = _Batch(n_tokens, embd, n_seq_max)

    def close(self) -> None:
        self.batch = None

    def __del__(self) -> None:
        self.close()

    def n_tokens(self) -> int:
        return int(self.batch.n_tokens) if self.batch is not None else 0

    def reset(self) -> None:
        self.batch.n_tokens = 0

    def _fill(self, at: int, tokens: Sequence[int], pos0: int, seq_id: int, logits_all: bool) -> None:
        n = len(tokens)
        if n == 0:
            return
        if at + n > self._n_tokens:
            raise ValueError(f"the batch holds {self._n_tokens} tokens; {at + n} do not fit")
        b = self.batch
        b.token[at:at + n] = tokens
        b.pos[at:at + n] = np.arange(pos0, pos0 + n)
        b.seq_id[at:at + n, 0] = seq_id
        b.n_seq_id[at:at + n] = 1
        b.logits[at:at + n] = bool(logits_all)
        b.logits[at + n - 1] = True
        b.n_tokens = at + n

    def set_batch(self, batch: Sequence[int], n_past: int, logits_all: bool) -> None:
        self._fill(0, batch, n_past, 0, logits_all)

    def add_sequence(self, batch: Sequence[int], seq_id: int, logits_all: bool) -> None:
        self._fill(self.batch.n_tokens, batch, 0, seq_id, logits_all)


def normalize_embedding(embedding: Any) -> Any:
    norm = float(np.linalg.norm(embedding))
    if norm == 0.0:
        return embedding
    return [v / norm for v in embedding]


# The engine sampler's stage order (llama-cpp-python's Llama.sample order).
_ORDER = ("logit_bias", "penalties", "grammar", "top_k", "typical", "top_p", "min_p", "temp")
_FINAL = ("dist", "greedy", "mirostat", "mirostat_v2")


class LlamaSampler:
    """A sampler chain (llama-cpp-python's ``_internals.LlamaSampler``): add
    stages, then ``sample(ctx, idx)`` picks a token from the logits of
    output ``idx`` of the context's last decode and accepts it."""

    def __init__(self) -> None:
        self.custom_samplers: List[Any] = []
        self._stages: List[tuple] = []
        self._engine: Any = None
        self._history: List[int] = []
        self._closed = False

    @property
    def sampler(self) -> Optional["LlamaSampler"]:
        """The chain (llama-cpp-python: its native handle, None once closed)."""
        return None if self._closed else self

    def close(self) -> None:
        self._engine = None
        self._closed = True

    def __del__(self) -> None:
        self.close()

    def _add(self, kind: str, **args: Any) -> None:
        kinds = [k for k, _ in self._stages]
        if any(k in _FINAL for k in kinds):
            raise NotImplementedError(f"add_{kind}: the chain already ends in a selecting stage ({kinds[-1]}); "
                                      "llamapy's sampler chain has nothing after it")
        if kind in _ORDER:
            later = [k for k in kinds if k in _ORDER and _ORDER.index(k) >= _ORDER.index(kind)]
            if later:
                raise NotImplementedError(f"add_{kind} after {later[0]}: llamapy's sampler chain runs its stages in "
                                          f"the order {', '.join(_ORDER)}, then the selecting stage")
        if kind in ("mirostat", "mirostat_v2") and any(k in _ORDER[3:7] for k in kinds):
            raise NotImplementedError(f"add_{kind} after truncation stages: mirostat sees the whole distribution "
                                      "in llamapy's sampler chain")
        self._stages.append((kind, args))
        self._engine = None

    def add_greedy(self) -> None:
        self._add("greedy")

    def add_dist(self, seed: int) -> None:
        self._add("dist", seed=int(seed))

    def add_softmax(self) -> None:
        import warnings

        warnings.warn("add_softmax is deprecated; llama_sampler_init_dist now samples directly from logits",
                      DeprecationWarning, stacklevel=2)

    def add_top_k(self, k: int) -> None:
        self._add("top_k", k=int(k))

    def add_top_p(self, p: float, min_keep: int = 1) -> None:
        self._add("top_p", p=float(p), min_keep=int(min_keep))

    def add_min_p(self, p: float, min_keep: int = 1) -> None:
        self._add("min_p", p=float(p), min_keep=int(min_keep))

    def add_typical(self, p: float, min_keep: int = 1) -> None:
        self._add("typical", p=float(p), min_keep=int(min_keep))

    def add_temp(self, temp: float) -> None:
        self._add("temp", t=float(temp))

    def add_mirostat(self, n_vocab: int, seed: int, tau: float, eta: float, m: int) -> None:
        # llama.cpp's m (tokens used to estimate s_hat) is 100 there and here alike
        self._add("mirostat", seed=int(seed), tau=float(tau), eta=float(eta))

    def add_mirostat_v2(self, seed: int, tau: float, eta: float) -> None:
        self._add("mirostat_v2", seed=int(seed), tau=float(tau), eta=float(eta))

    def add_grammar(self, model: LlamaModel, grammar: Any) -> None:
        self._add("grammar", model=model, grammar=grammar)

    def add_penalties(self, n_vocab: int, penalty_last_n: int, penalty_repeat: float, penalty_freq: float,
                      penalty_present: float) -> None:
        self._add("penalties", last_n=int(penalty_last_n), repeat=float(penalty_repeat), freq=float(penalty_freq),
                  present=float(penalty_present))

    def add_logit_bias(self, n_vocab: int, logit_bias: Dict[int, float]) -> None:
        self._add("logit_bias", bias=[(int(t), float(b)) for t, b in logit_bias.items()])

    def _absent(self, what: str) -> None:
        raise NotImplementedError(f"{what}: llamapy's sampler chain has no such stage")

    def add_temp_ext(self, t: float, delta: float, exponent: float) -> None:
        self._absent("add_temp_ext (dynamic temperature)")

    def add_xtc(self, p: float, t: float, min_keep: int, seed: int) -> None:
        self._absent("add_xtc")

    def add_top_n_sigma(self, n: float) -> None:
        self._absent("add_top_n_sigma")

    def add_grammar_lazy_patterns(self, model: LlamaModel, grammar: Any, trigger_patterns: List[str],
                                  trigger_tokens: List[int]) -> None:
        self._absent("add_grammar_lazy_patterns (lazy grammars)")

    def add_dry(self, model: LlamaModel, dry_multiplier: float, dry_base: float, dry_allowed_length: int,
                dry_penalty_last_n: int, seq_breakers: List[str]) -> None:
        self._absent("add_dry")

    def add_infill(self, model: LlamaModel) -> None:
        self._absent("add_infill")

    def add_custom(self, apply_func: Any) -> None:
        self._absent("add_custom (Python samplers on llama.cpp's candidate arrays)")

    def get_seed(self) -> int:
        for kind, args in self._stages:
            if "seed" in args:
                return int(args["seed"]) & 0xFFFFFFFF
        return _c.LLAMA_DEFAULT_SEED

    def _build(self, n_vocab: int) -> Any:
        stages = dict(self._stages)
        final = next((k for k, _ in self._stages if k in _FINAL), None)
        if final is None:
            raise ValueError("the sampler chain selects no token: add a dist, greedy or mirostat stage")
        keeps = {stages[k]["min_keep"] for k in ("typical", "top_p", "min_p") if k in stages}
        if len(keeps) > 1:
            raise NotImplementedError("different min_keep values per stage: llamapy's chain has one min_keep")
        pen = stages.get("penalties", {})
        fin = stages[final]
        temp = 0.0 if final == "greedy" else max(stages.get("temp", {}).get("t", 1.0), 0.0)  # temp <= 0: greedy
        p = SamplingParams(
            temperature=temp, top_k=stages.get("top_k", {}).get("k", 0), top_p=stages.get("top_p", {}).get("p", 1.0),
            min_p=stages.get("min_p", {}).get("p", 0.0), typical_p=stages.get("typical", {}).get("p", 1.0),
            repeat_penalty=pen.get("repeat", 1.0), frequency_penalty=pen.get("freq", 0.0),
            presence_penalty=pen.get("present", 0.0), mirostat_mode={"mirostat": 1, "mirostat_v2": 2}.get(final, 0),
            mirostat_tau=fin.get("tau", 5.0), mirostat_eta=fin.get("eta", 0.1),
            logit_bias=dict(stages.get("logit_bias", {}).get("bias", [])) or None,
            grammar=stages.get("grammar", {}).get("grammar"))
        model = stages.get("grammar", {}).get("model")
        s = native_sampler(p, n_vocab, penalty_last_n=pen.get("last_n", 64),
                           seed=fin.get("seed", _c.LLAMA_DEFAULT_SEED), min_keep=keeps.pop() if keeps else 1,
                           grammar_vocab=lambda: model._grammar_vocab())
        for token in self._history:  # a rebuilt or cloned chain: penalty history and grammar position
            s.accept(token)
        return s

    def sample(self, ctx: LlamaContext, idx: int = -1) -> int:
        if self._closed:
            raise ValueError("this LlamaSampler has been closed")
        logits = ctx._logits_row(idx)
        if self._engine is None:
            self._engine = self._build(int(logits.shape[0]))
        token = int(self._engine.sample(logits))
        self.accept(token)
        return token

    def accept(self, token: int) -> None:
        self._history.append(int(token))
        if self._engine is not None:
            self._engine.accept(int(token))

    def reset(self) -> None:
        """Back to the state after the last add_*: no history, the grammar at its start, seeds re-applied."""
        self._history = []
        self._engine = None

    def clone(self) -> "LlamaSampler":
        """A chain with the same stages and accepted tokens (penalty history, grammar
        position); a mirostat stage starts again from its initial mu."""
        c = LlamaSampler()
        c._stages = list(self._stages)
        c._history = list(self._history)
        return c
