"""The ``Llama`` class: llama-cpp-python's public API on llamapy's engine.

Three layers, as in llama-cpp-python: the native engine (``_engine.Model``,
``_engine.Context``, ``_engine.Sampler``), this resource-owning wrapper, and
the OpenAI-shaped APIs (completions in ``_completion.py``). Generation is one
generator (``generate``); completion, streaming and chat consume it.

Not here: chat templates (``llamapy.chat``), embeddings pooling details (the
engine), tokenization (``_tokenizer.py``).
"""
from __future__ import annotations

import logging
import os
import sys
import time
from collections import deque
from typing import Any, Deque, Dict, Generator, List, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

from . import _engine
from ._embedding import embedding_context_options
from ._scores import LazyRows
from ._log import emit
from ._verbose import PerfCounters, load_report
from ._sampling import SamplingParams, grammar_vocab, native_sampler
from . import _sequence
from . import _params
from ._params import DEFAULT_SEED
from ._internals import LlamaModel, _VocabOnlyContext
from ._tokenizer import LlamaTokenizer
from .gguf_file import GGUFFile, metadata_strings
from .multimodal.chunks import ChunkedPrompt
from ._completion import CompletionRequest, run_completion, stream_completion
from . import _embedding
from . import _rerank
from ._units import format_bytes
from .chat import completion as _chat
from .debug import TensorDump
from .multimodal.evaluate import eval_chunked
from .multimodal.handlers import handler_for_mmproj
from .multimodal.mmproj import check_compatible, read_mmproj
from .memory_plan import plan_memory
from .system import memory_available
from .llama_cache import (
    BaseLlamaCache,
    LlamaState,
    LogitsProcessorList,
    StoppingCriteriaList,
    longest_token_prefix,
)

logger = logging.getLogger("llamapy")

# generate()'s marker for an image prompt evaluated after earlier rows (reset=False).
_NOT_RESTORABLE: Any = object()


def _context_memory_message(model_path: str, resolved: Any) -> str:
    """What an allocation failure of the context asked for, against what the machine has."""
    head = f"n_ctx={int(resolved.n_ctx)}: the context could not be allocated"
    try:
        plan = plan_memory(model_path, n_ctx=int(resolved.n_ctx), n_batch=int(resolved.n_batch),
                           n_ubatch=int(resolved.n_ubatch), embedding=bool(resolved.embeddings))
        head += (f": it needs about {format_bytes(plan.kv_bytes + plan.compute_bytes)} "
                 f"({format_bytes(plan.kv_bytes)} of KV cache)")
    except (ValueError, TypeError, OSError):
        pass
    avail = memory_available()
    if avail is not None:
        head += f", and this machine has {format_bytes(avail)} available"
    return head + "; lower n_ctx (or use a quantized KV cache: type_k / type_v)"


def _read_by_python(key: str) -> bool:
    """Metadata keys the Python layer reads itself (the engine never does)."""
    return key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template.")


class Llama(_sequence.SequenceAttributes):
    """Load a GGUF model and generate text with it.

    The constructor takes llama-cpp-python's keyword arguments. Options that
    only concern a GPU are accepted, and each one given a non-default value
    is reported by name (no backend runs the forward pass on a GPU yet); options for
    features llamapy does not have raise ``NotImplementedError`` naming the
    option; unknown keywords raise ``TypeError``.

    ``verbose=True`` (the default, as in llama-cpp-python) prints a load
    report and each completion's timings to stderr; ``verbose=False`` prints
    nothing, and notes go to the "llamapy" logger only (see _verbose.py).

    Debugging: ``with llm.tensor_dump() as dump: llm.eval(tokens)`` records
    the named intermediate tensors of the forward passes (llama.cpp's graph
    names, e.g. ``dump["attn_norm-0"]``); see llamapy/debug.py.
    """

    cache: Optional[BaseLlamaCache]  # set_cache

    def __init__(
        self,
        model_path: str,
        *,
        n_gpu_layers: int = 0,
        split_mode: int = 1,
        main_gpu: int = 0,
        tensor_split: Optional[List[float]] = None,
        vocab_only: bool = False,
        use_mmap: Optional[bool] = None,
        use_mlock: bool = False,
        kv_overrides: Optional[Dict[str, Union[bool, int, float, str]]] = None,
        seed: int = DEFAULT_SEED,
        n_ctx: int = 512,
        n_batch: int = 512,
        n_ubatch: int = 512,
        n_threads: Optional[int] = None,
        n_threads_batch: Optional[int] = None,
        rope_scaling_type: Optional[int] = -1,
        pooling_type: int = -1,
        attention_type: int = -1,
        rope_freq_base: float = 0.0,
        rope_freq_scale: float = 0.0,
        yarn_ext_factor: float = -1.0,
        yarn_attn_factor: float = 1.0,
        yarn_beta_fast: float = 32.0,
        yarn_beta_slow: float = 1.0,
        yarn_orig_ctx: int = 0,
        logits_all: bool = False,
        embedding: bool = False,
        offload_kqv: bool = True,
        flash_attn: Union[bool, str] = "auto",
        op_offload: Optional[bool] = None,
        swa_full: Optional[bool] = None,
        no_perf: bool = False,
        last_n_tokens_size: int = 64,
        lora_base: Optional[str] = None,
        lora_scale: float = 1.0,
        lora_path: Optional[str] = None,
        numa: Union[bool, int] = False,
        chat_format: Optional[str] = None,
        chat_handler: Optional[Any] = None,
        draft_model: Optional[Any] = None,
        tokenizer: Optional[Any] = None,
        type_k: Optional[int] = None,
        type_v: Optional[int] = None,
        spm_infill: bool = False,
        verbose: bool = True,
        **kwargs: Any,
    ) -> None:
        # The arguments as given, for pickling (__getstate__).
        self._init_options = {**{k: v for k, v in locals().items() if k not in ("self", "kwargs")}, **kwargs}
        t_start, self.verbose, self._closed = time.perf_counter(), verbose, True  # closed until built
        # Beyond llama-cpp-python's signature: ``mmproj=PATH``, a projector GGUF that picks the chat
        # handler; ``n_seq_max=N``, room for N sequences (the server's slots, sequence_view).
        mmproj: Optional[str] = kwargs.pop("mmproj", None)
        n_seq_max: int = kwargs.pop("n_seq_max", 1)
        # And llama.cpp's way of running a big mixture of experts on a small GPU: weights
        # kept in host memory, their products on the CPU, although their layer is on the GPU:
        # ``n_cpu_moe=N`` (the experts of the first N layers, its --n-cpu-moe) and
        # ``override_tensor="<regex>=CPU,..."`` (its -ot / --override-tensor).
        n_cpu_moe: int = kwargs.pop("n_cpu_moe", 0)
        override_tensor: Any = kwargs.pop("override_tensor", None)
        _params.refuse_unknown(kwargs, verbose)
        _params.python_options(verbose, vocab_only, lora_base, lora_path, lora_scale, numa, draft_model,
                               last_n_tokens_size)
        self.model_path = _params.model_file(model_path)
        # The engine's option carriers parse every engine option (bind_params.cpp).
        self.model_params = _engine.ModelParams(
            vocab_only=vocab_only, kv_overrides=kv_overrides,
            **_params.load_options(self.model_path, use_mmap, vocab_only))
        self.context_params = cp = _engine.ContextParams(
            n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_ubatch, n_seq_max=n_seq_max, n_threads=n_threads,
            n_threads_batch=n_threads_batch, type_k=type_k, type_v=type_v, flash_attn=flash_attn,
            embeddings=embedding, pooling_type=pooling_type, rope_scaling_type=rope_scaling_type,
            rope_freq_base=rope_freq_base, rope_freq_scale=rope_freq_scale, yarn_ext_factor=yarn_ext_factor,
            yarn_attn_factor=yarn_attn_factor, yarn_beta_fast=yarn_beta_fast, yarn_beta_slow=yarn_beta_slow,
            yarn_orig_ctx=yarn_orig_ctx, swa_full=swa_full, main_gpu=main_gpu,
            n_gpu_layers=_params.gpu_layers_value(n_gpu_layers),
            split_mode=split_mode, tensor_split=tensor_split, offload_kqv=offload_kqv, n_cpu_moe=n_cpu_moe,
            override_tensor=override_tensor)
        _params.place_on_gpu(cp, verbose, vocab_only, split_mode, op_offload)
        # Python's own: llama-cpp-python's seed rule (``seed or LLAMA_DEFAULT_SEED``: 0 and
        # the default keep 0xFFFFFFFF, which draws with a random seed, and from which
        # create_completion derives its per-call seeds as there), scores, sampling history.
        seed = _params.seed_value(seed) or _params.DEFAULT_SEED
        self._logits_all = bool(logits_all)
        self._embedding = bool(embedding)
        self.last_n_tokens_size = last_n_tokens_size
        self.lora_path, self.lora_scale, self.lora_base = lora_path, float(lora_scale), lora_base
        self.chat_format, self.chat_handler, self.draft_model = chat_format, chat_handler, draft_model
        self.spm_infill, self.cache = spm_infill, None
        self.stopped_by: Optional[str] = None  # the stop string that ended the last completion, if one did
        model = self._load_model(tokenizer)
        self._make_context(model, seed)
        # llama-cpp-python's flags (llama.cpp's llm_arch_is_recurrent / _is_hybrid): every
        # layer recurrent (state-space models), or recurrent layers beside attention layers
        # (Qwen3.5, LFM2, Granite hybrids). Their prefix reuse resumes from state checkpoints.
        rec = list(model.recurrent_layers)
        self._is_recurrent = bool(rec) and all(rec)
        self._is_hybrid = any(rec) and not all(rec)
        self._closed = False
        self._attach_chat(mmproj)
        # Load time: from the constructor's start to a usable context (llama.cpp
        # stops its clock at the first decode; ours does not wait for one).
        self._perf = PerfCounters(t_load_ms=(time.perf_counter() - t_start) * 1e3)
        if verbose:
            print(load_report(self), file=sys.stderr, flush=True)

    def _attach_chat(self, mmproj: Optional[str]) -> None:
        """The projector's chat handler (mmproj), and chat_format checked."""
        self.mmproj = mmproj
        if mmproj is not None:
            # Beyond llama-cpp-python: the projector picks its chat handler (llamapy.multimodal.handlers).
            if not mmproj or not os.path.exists(mmproj):
                raise ValueError(f"mmproj path does not exist: {mmproj}")
            if self.chat_handler is None:
                self.chat_handler = handler_for_mmproj(self, mmproj, self.chat_format)
            else:
                check_compatible(read_mmproj(mmproj), self.n_embd())
        name = self.chat_format
        if name is not None and self.chat_handler is None and name not in _chat.PROJECTOR_CHAT_FORMATS:
            # An unknown name fails here, not at the first chat (a multimodal
            # format is known: its handler may still be set, else the chat says
            # it needs a projector).
            _chat.get_chat_completion_handler(name, self.metadata, _chat.token_text(self, self.token_eos()))

    def _load_model(self, tokenizer: Optional[Any]) -> Any:
        """The engine Model, the tokenizer and the metadata, as the model params say."""
        mp = self.model_params
        self._gguf = GGUFFile(self.model_path)
        overrides = mp.kv_overrides or None
        model = _engine.Model(self.model_path, mp)
        self.tokenizer_ = (tokenizer if tokenizer is not None
                           else LlamaTokenizer(_engine.Vocab.from_file(self.model_path, kv_overrides=overrides)))
        # llama-cpp-python's Llama._model (an _internals.LlamaModel: token_get_text, token_eos, ...);
        # its .model is the engine's Model, which everything else uses.
        self._model = LlamaModel._of(model, self.model_path, mp, getattr(self.tokenizer_, "_vocab", None),
                                     self.verbose)
        if overrides:
            # A key neither the model loader nor the tokenizer reads changes nothing: say so.
            unread = set(model.unread_overrides)
            if tokenizer is None:
                unread &= set(self.tokenizer_._vocab.unread_overrides)
            # Chat templates are read on the Python side (self.metadata, by llamapy.chat).
            unread = {k for k in unread if not _read_by_python(k)}
            if unread:
                emit(self.verbose, logging.WARNING, "kv_overrides keys not used by this model: %s",
                     ", ".join(sorted(unread)))
        self._n_vocab = int(self.tokenizer_.n_vocab if tokenizer is None else model.n_vocab)
        # Effective values, so that e.g. an overridden tokenizer.chat_template is the one used.
        self.metadata = metadata_strings(self._gguf, mp.kv_overrides)
        return model

    def _make_context(self, model: Any, seed: int) -> None:
        """The engine Context (none with vocab_only), the LoRA adapter and sequence 0."""
        cp = self.context_params
        # The engine resolves what the options leave to the model (n_ctx 0, batch caps).
        resolved = cp.resolved(model)
        n_seq_max, cp.pooling_type = embedding_context_options(resolved.n_batch, cp.embeddings, cp.pooling_type)
        cp.n_seq_max = max(n_seq_max, cp.n_seq_max)
        self._ctx = None
        if not self.model_params.vocab_only:
            try:
                self._ctx = _engine.Context(model, cp)
            except MemoryError:
                raise MemoryError(_context_memory_message(self.model_path, resolved)) from None
            resolved = self._ctx.params
            if cp.n_gpu_layers != 0:
                self._report_gpu_placement(self.verbose)
        self._n_ctx = int(resolved.n_ctx)
        self.n_batch = int(resolved.n_batch)
        self.n_ubatch = int(resolved.n_ubatch)
        self.n_threads = int(resolved.n_threads)
        self.n_threads_batch = int(resolved.n_threads_batch)
        self._lora = None
        if self.lora_path is not None and self._ctx is not None:
            if not os.path.exists(self.lora_path):
                raise ValueError(f"LoRA adapter path does not exist: {self.lora_path}")
            self._lora = _engine.LoraAdapter(model, os.fspath(self.lora_path))
            self._ctx.set_adapters([(self._lora, self.lora_scale)])
        # Sequence 0 of the context: the evaluated tokens, positions, logits row, seed (_sequence.py).
        self._seq = _sequence.Sequence(self._ctx, 0, self._n_ctx, self.n_batch, self._n_vocab, seed)
        # Generation needs an output head, which an encoder has not, embedding=True or not
        # (its embeddings are computed on the context directly, _embedding.py).
        self._seq.is_encoder = bool(model.is_encoder)
        self._seq.arch = str(model.arch)
        self._seq.observer = self._record_scores
        if self.model_params.vocab_only:
            self.__dict__["_vocab_only_ctx"] = _VocabOnlyContext(self._n_ctx, self.n_batch, self.n_ubatch)
        self._scores_all: Optional[npt.NDArray[np.single]] = None  # (n_ctx, n_vocab), logits_all only
        self._scores_lazy: Optional[LazyRows] = None  # ``scores`` without logits_all
        self._scores_key: Optional[tuple] = None  # (row, logits row, eval serial) written into _scores_lazy

    # ------------------------------------------------------------------ basics
    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("this Llama has been closed")

    @property
    def flash_attn_active(self) -> bool:
        """Whether the context runs the flash attention path (what
        ``flash_attn`` resolved to; "auto" decides per backend and model)."""
        ctx = self._seq.ctx
        return ctx is not None and bool(ctx.flash_attn)

    def _require_ctx(self) -> Any:
        self._check_open()
        self._seq.ensure_usable()
        return self._ctx

    @property
    def ctx(self) -> Any:
        return self._ctx

    @property
    def _ctx(self) -> Any:
        # The context lives in the sequence once it exists (one reference to replace).
        seq = self.__dict__.get("_seq")
        ctx = seq.ctx if seq is not None else self.__dict__.get("_ctx_early")
        # vocab_only: llama.cpp still makes a context (whose decode fails), and code
        # written for llama-cpp-python reads llm._ctx.ctx; this one says why it cannot evaluate.
        return self.__dict__.get("_vocab_only_ctx") if ctx is None else ctx

    @_ctx.setter
    def _ctx(self, ctx: Any) -> None:
        seq = self.__dict__.get("_seq")
        if seq is not None:
            seq.ctx = ctx
        else:
            self.__dict__["_ctx_early"] = ctx

    @property
    def model(self) -> Any:
        """The engine's Model (llama-cpp-python: the native model, ``_model.model``)."""
        return self._model.model if self._model is not None else None

    @property
    def sequence(self) -> _sequence.Sequence:
        """The generation state of this Llama's sequence (0) in its context: evaluated
        tokens, positions, last logits, seed (llamapy/_sequence.py)."""
        return self._seq

    def sequence_view(self, seq: _sequence.Sequence) -> "Llama":
        """A Llama over this one's model, context, tokenizer and chat handler that
        evaluates and generates in ``seq`` (another sequence id of the same context,
        e.g. a server slot). It has its own scores and timings and no cache; closing it
        frees nothing shared. ``seq`` must fit the context: id below n_seq_max."""
        self._require_ctx()
        if not 0 <= seq.seq_id < int(self._ctx.n_seq_max):
            raise ValueError(f"sequence id {seq.seq_id} is outside this context's n_seq_max={self._ctx.n_seq_max}")
        self._grammar_vocab()  # built once, shared
        view = object.__new__(type(self))
        view.__dict__.update(self.__dict__)
        view.__dict__.update(_seq=seq, _view_of=self, cache=None, _scores_all=None, _scores_lazy=None,
                             _scores_key=None, _n_ctx=seq.n_ctx)
        seq.ctx = self._ctx
        seq.is_encoder, seq.arch = self._seq.is_encoder, self._seq.arch
        seq.observer = view._record_scores
        seq.perf = PerfCounters(t_load_ms=self._perf.t_load_ms)
        return view

    @property
    def scores(self) -> npt.NDArray[np.single]:
        """Logits per position, shape (n_ctx, n_vocab), as llama-cpp-python.

        With ``logits_all=True`` every evaluated row is filled. Otherwise row
        ``n_tokens - 1`` holds the last evaluated token's logits and the
        others are zeros. The array is lazily mapped memory (see _scores.py):
        only written rows are committed, and without logits_all only the one
        row, written when this property is read."""
        if self._logits_all:
            return self._all_scores()
        if self._scores_lazy is None:
            self._scores_lazy = LazyRows(self._n_ctx, self._n_vocab)
        key = (self.n_tokens - 1, self._last_logits_row, self._eval_serial)
        if key != self._scores_key:
            if self._scores_key is not None and self._scores_key[0] >= 0:
                self._scores_lazy.clear_row(self._scores_key[0])
            last = self._last_logits()
            if last is not None:
                self._scores_lazy.array[self.n_tokens - 1] = last
                self._scores_key = key
            else:
                self._scores_key = None
        return self._scores_lazy.array

    def _all_scores(self) -> npt.NDArray[np.single]:
        if self._scores_all is None:
            self._scores_all = LazyRows(self._n_ctx, self._n_vocab).array
        return self._scores_all

    @property
    def _scores(self) -> npt.NDArray[np.single]:
        return self.scores[: self.n_tokens, :]

    @property
    def eval_tokens(self) -> Deque[int]:
        return deque(self.input_ids[: self.n_tokens].tolist(), maxlen=self._n_ctx)

    @property
    def eval_logits(self) -> Deque[List[float]]:
        """The evaluated rows of ``scores`` as lists: all of them with
        logits_all, else only the last (llama-cpp-python's maxlen=1 deque)."""
        if self._logits_all:
            return deque(self._all_scores()[: self.n_tokens].tolist(), maxlen=self._n_ctx)
        last = self._last_logits()
        return deque([] if last is None else [last.tolist()], maxlen=1)

    def _last_logits(self) -> Optional[npt.NDArray[np.single]]:
        return self._seq.last_logits()

    def _report_gpu_placement(self, verbose: bool) -> None:
        """Says where the layers went ("auto" resolved) and which weight types
        have no shader on the device (dequantized to F16 there)."""
        parts = self._ctx.placement()
        on_gpu = {p["name"] for p in parts if p["device"] != "cpu"}
        n_layers = sum(1 for p in parts if p["layer"] >= 0 and p["device"] != "cpu")
        devices = sorted({p["device"] for p in parts if p["device"] != "cpu"})
        per_device = "".join(f", {d}: {sum(1 for p in parts if p['layer'] >= 0 and p['device'] == d)} layers"
                             for d in devices) if len(devices) > 1 else ""
        kv_note = "; KV cache on the CPU (offload_kqv=False)" if on_gpu and not self._ctx.params.offload_kqv else ""
        emit(verbose, logging.INFO, "offloaded %d/%d layers%s to the GPU (n_gpu_layers=%d%s)%s", n_layers,
             sum(1 for p in parts if p["layer"] >= 0), " and the output" if "output" in on_gpu else "",
             int(self._ctx.params.n_gpu_layers), per_device, kv_note)
        if not on_gpu:
            return
        kernels = {p["name"]: set(_engine.matmul_types(p["device"])) for p in parts if p["name"] in on_gpu}
        slow = set()
        for t in self._gguf.tensors:
            part = ("blk." + t.name.split(".")[1]) if t.name.startswith("blk.") else (
                "output" if t.name.startswith("output") else "input")
            if part in on_gpu and len(t.shape) >= 2 and t.type_name not in kernels[part]:
                slow.add(t.type_name)
        if slow:
            emit(verbose, logging.WARNING, "the GPU backend has no matmul kernel for %s weights: they are "
                 "dequantized to F16 on the GPU (results differ slightly from the CPU's)", ", ".join(sorted(slow)))

    def device_map(self) -> List[Dict[str, Any]]:
        """Where each part of the model runs (beyond llama-cpp-python), in order:
        ``input`` (token embeddings), ``blk.0`` ... ``blk.<n_layer-1>``, ``output``
        (final norm and head). Each entry: ``name``, ``layer`` (-1 for input /
        output), ``device`` ("cpu", "gpu0", ...), ``kv_device`` (layers), and the
        ``weight_bytes`` / ``kv_bytes`` it holds. n_gpu_layers=N puts the last N
        layers on the GPU, N > n_layer the output too, -1 / "all" everything but
        the input lookups (as llama.cpp does); "auto" as many as fit."""
        if self._seq.ctx is None:
            raise ValueError("device_map: the model was loaded with vocab_only=True (no context)")
        return [dict(p) for p in self._ctx.placement()]

    def n_ctx(self) -> int:
        return self._n_ctx

    def n_embd(self) -> int:
        return int(self._model.model.n_embd)

    def n_vocab(self) -> int:
        return self._n_vocab

    def tokenizer(self) -> Any:
        return self.tokenizer_

    def token_eos(self) -> int:
        return int(self.tokenizer_.token_eos())

    def token_bos(self) -> int:
        return int(self.tokenizer_.token_bos())

    def token_nl(self) -> int:
        return int(self.tokenizer_.token_nl())

    def pooling_type(self) -> int:
        """The pooling the context applies (llama.cpp numbering: 0 none, 1
        mean, 2 cls, 3 last, 4 rank): the constructor's pooling_type, else the model's."""
        if self._seq.ctx is not None and self._embedding:
            return int(self._ctx.pooling_type)
        if self.context_params.pooling_type != -1:
            return int(self.context_params.pooling_type)
        return max(int(self._model.model.pooling_type), 0)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> List[int]:
        """Tokenize UTF-8 bytes (a str is accepted too). ``add_bos`` adds the
        BOS token when the model's vocabulary asks for it; ``special`` parses
        control-token texts such as ``<start_of_turn>`` as those tokens."""
        self._check_open()
        return self.tokenizer_.tokenize(text, add_bos, special)

    def detokenize(self, tokens: Sequence[int], prev_tokens: Optional[Sequence[int]] = None,
                   special: bool = False) -> bytes:
        self._check_open()
        return self.tokenizer_.detokenize(tokens, prev_tokens=prev_tokens, special=special)

    def set_cache(self, cache: Optional[BaseLlamaCache]) -> None:
        self.cache = cache

    def set_seed(self, seed: int) -> None:
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
        self._seed = int(seed)

    def reset(self) -> None:
        """Forget the evaluated tokens (the KV cache is cleared lazily)."""
        self._seq.reset()

    def _truncate(self, n: int) -> None:
        self._seq.truncate(n)

    def _pos_of_row(self, row: int) -> int:
        return self._seq.pos_of_row(row)

    # -------------------------------------------------------------- evaluation
    def eval(self, tokens: Sequence[int]) -> None:
        """Evaluate tokens after the ones already evaluated, in chunks of n_batch."""
        self._eval(tokens, all_logits=self._logits_all)

    def _eval(self, tokens: Sequence[int], all_logits: bool, on_chunk: Optional[Any] = None) -> None:
        self._require_ctx()
        self._seq.eval(tokens, all_logits=all_logits, on_chunk=on_chunk)

    def _record_scores(self, n_past: int, chunk: Any, out: Any, all_logits: bool) -> None:
        """With logits_all, keeps every decoded row's logits in ``scores``."""
        if not self._logits_all:
            return
        n = len(chunk)
        if all_logits:
            self._all_scores()[n_past:n_past + n] = out.get_logits_all()
        else:
            self._all_scores()[n_past + n - 1] = out.get_logits(0)

    def _eval_chunked(self, prompt: ChunkedPrompt, offset: int) -> None:
        """Evaluate a text + image prompt from id ``offset`` on (llamapy/multimodal/evaluate.py)."""
        eval_chunked(self, prompt, offset)

    # ---------------------------------------------------------------- sampling
    def _make_sampler(self, p: SamplingParams) -> Any:
        """The native sampler chain for one request's options (seeded from this Llama's seed)."""
        if p.tfs_z != 1.0:
            emit(self.verbose, logging.WARNING,
                 "tfs_z=%s: tail-free sampling was removed from llama.cpp and has no effect", p.tfs_z)
        return native_sampler(p, self._n_vocab, penalty_last_n=self.last_n_tokens_size, seed=self._seed,
                              grammar_vocab=self._grammar_vocab)

    def _grammar_vocab(self) -> Any:
        """Token texts for grammar matching, built once per Llama."""
        if getattr(self, "_gvocab", None) is None:
            self._gvocab = grammar_vocab(self.tokenizer_, self._n_vocab)
        return self._gvocab

    def _sample_with(self, sampler: Any, logits_processor: Optional[LogitsProcessorList]) -> int:
        logits = self._last_logits()
        if logits is None:
            raise ValueError("nothing has been evaluated yet: call eval() before sample()")
        if logits_processor is not None:
            logits = np.asarray(logits_processor(self._input_ids, np.array(logits, dtype=np.single)),
                                dtype=np.single)
        return int(sampler.sample(logits))

    def sample(self, top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05, typical_p: float = 1.0,
               temp: float = 0.80, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
               presence_penalty: float = 0.0, tfs_z: float = 1.0, mirostat_mode: int = 0,
               mirostat_eta: float = 0.1, mirostat_tau: float = 5.0, penalize_nl: bool = True,
               logits_processor: Optional[LogitsProcessorList] = None, grammar: Optional[Any] = None,
               idx: Optional[int] = None) -> int:
        """Sample a token from the logits of the last evaluated token."""
        self._require_ctx()
        if idx is not None and idx != self.n_tokens - 1:
            if self._scores_all is None:
                raise ValueError("idx other than the last token needs logits_all=True")
        sampler = self._make_sampler(SamplingParams(
            temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            tfs_z=tfs_z, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            grammar=grammar))
        if idx is not None and self._scores_all is not None:
            logits = self._scores_all[idx]
            if logits_processor is not None:
                logits = np.asarray(logits_processor(self._input_ids, logits.copy()), dtype=np.single)
            return int(sampler.sample(np.ascontiguousarray(logits, dtype=np.single)))
        return self._sample_with(sampler, logits_processor)

    def generate(self, tokens: Sequence[int], top_k: int = 40, top_p: float = 0.95, min_p: float = 0.05,
                 typical_p: float = 1.0, temp: float = 0.80, repeat_penalty: float = 1.0, reset: bool = True,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, tfs_z: float = 1.0,
                 mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
                 penalize_nl: bool = True, logits_processor: Optional[LogitsProcessorList] = None,
                 stopping_criteria: Optional[StoppingCriteriaList] = None, grammar: Optional[Any] = None,
                 logit_bias: Optional[Dict[int, float]] = None, *,
                 sampling: Optional[SamplingParams] = None) -> Generator[int, Optional[Sequence[int]], None]:
        """Evaluate ``tokens`` and yield sampled tokens forever (the caller
        stops). If the evaluated tokens share a prefix with ``tokens``, only
        the rest is evaluated. Sending a list of tokens into the generator
        appends them after the sampled one. ``sampling`` (a SamplingParams),
        when given, replaces the separate sampling keywords."""
        self._require_ctx()
        if sampling is None:
            sampling = SamplingParams(
                temperature=temp, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
                repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                presence_penalty=presence_penalty, tfs_z=tfs_z, mirostat_mode=mirostat_mode,
                mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta, logit_bias=logit_bias, grammar=grammar)
        # No lock is held while suspended at a yield, so the generator can be
        # resumed from any thread (a web framework's worker pool). Another
        # user of this Llama may evaluate in between (a second generator,
        # consumed alternately): the sequence's version tells, and the rows
        # this generation holds (``history``) are then restored before going on.
        seq = self._seq
        with self._lock:
            sampler = self._make_sampler(sampling)
            chunked = tokens if isinstance(tokens, ChunkedPrompt) else None
            prompt = list(tokens)
            if reset:
                history = prompt
                tokens = self._reuse_prefix(history, chunked)
            else:
                history = self.input_ids[: self.n_tokens].tolist() + prompt
                tokens = prompt
                if chunked is not None:
                    self._eval_chunked(chunked, 0)
                    tokens = []
                    chunked = _NOT_RESTORABLE  # its rows start after others: not re-made from ids
            history = history[: len(history) - len(tokens)]  # the rows before `tokens`
            mine = seq.version
        while True:
            with self._lock:
                if seq.version != mine:
                    tokens = self._reuse_prefix(history, chunked, tail=tokens)
                    history = history[: self.n_tokens]  # the rows now held; the rest is in `tokens`
                drafts = self._draft(tokens)
                n0 = self.n_tokens
                # With drafts, every row's logits are kept: row 0 continues
                # the sampled token, row i + 1 the i-th draft.
                self._eval(tokens + drafts, all_logits=bool(drafts) or self._logits_all)
                mine = seq.version
            for i in range(len(drafts) + 1):
                with self._lock:
                    if seq.version != mine:
                        # Evaluated over while draft rows waited: restore the accepted ones.
                        history = history + tokens + drafts[:i]
                        self._eval(self._reuse_prefix(history, chunked), all_logits=self._logits_all)
                        tokens, drafts = [], []
                    if drafts:
                        self.n_tokens = n0 + len(tokens) + i  # rows after this one are unverified drafts
                        self._last_logits_row = len(tokens) - 1 + i
                    token = self._sample_with(sampler, logits_processor)
                    sampler.accept(token)
                    mine = seq.version
                if stopping_criteria is not None:
                    logits = self._last_logits()
                    if stopping_criteria(self._input_ids, logits):
                        return
                extra = yield token
                if i < len(drafts) and token == drafts[i] and not extra:
                    continue  # the draft was right: its logits are the next row
                history.extend(tokens + drafts[:i])
                tokens = [token]
                if extra:
                    tokens.extend(extra)
                break

    def _reuse_prefix(self, history: List[int], chunked: Optional[ChunkedPrompt],
                      tail: Sequence[int] = ()) -> List[int]:
        """Make the sequence hold a prefix of ``history`` (the longest it already holds,
        an image kept whole or not at all) and return what is left to evaluate:
        the rest of ``history``, then ``tail``. At least one id is left, so that
        its evaluation gives the logits to sample from."""
        if chunked is _NOT_RESTORABLE:
            raise RuntimeError("another generation used this Llama while a generation with images, continuing "
                               "earlier rows (reset=False), was suspended: its rows cannot be restored")
        prefix = longest_token_prefix(self._input_ids.tolist(), history) if self.n_tokens > 0 else 0
        if prefix == len(history) and prefix > 0 and not tail:
            prefix -= 1  # re-evaluate the last token to get its logits
        if chunked is not None and prefix < len(chunked):
            prefix = chunked.chunk_start_at_or_before(prefix)
        if prefix > 0 and not self._seq.swa_resumable(prefix):
            # The sliding-window layers' cache has moved past what the
            # reused prefix's end needs (swa_full=False): evaluate it all.
            prefix = 0
        self._truncate(prefix)
        if prefix > 0:
            emit(self.verbose, logging.DEBUG, "Llama.generate: %d prefix-match hit, remaining %d prompt tokens "
                 "to eval", prefix, len(history) - prefix)
        if chunked is not None and prefix < len(chunked):
            self._eval_chunked(chunked, prefix)
            prefix = len(chunked)
        return list(history[prefix:]) + list(tail)

    def _draft(self, tokens: List[int]) -> List[int]:
        """Tokens the draft model proposes after the evaluated ones and
        ``tokens`` (only after a single sampled token, and only as many as the
        context and one batch hold)."""
        if self.draft_model is None or len(tokens) != 1 or self.n_tokens == 0:
            return []
        room = min(self._n_ctx - self.n_tokens - 1, self.n_batch - 1)
        if room <= 0:
            return []
        end = self.n_tokens + 1
        self.input_ids[self.n_tokens] = tokens[0]
        proposed = np.asarray(self.draft_model(self.input_ids[:end].copy()), dtype=np.int64).reshape(-1)[:room]
        if ((proposed < 0) | (proposed >= self._n_vocab)).any():
            raise ValueError("draft_model proposed a token id outside the vocabulary")
        return [int(t) for t in proposed]

    # ------------------------------------------------------------- completions
    def create_completion(self, prompt: Union[str, List[int]], suffix: Optional[str] = None,
                          max_tokens: Optional[int] = 16, temperature: float = 0.8, top_p: float = 0.95,
                          min_p: float = 0.05, typical_p: float = 1.0, logprobs: Optional[int] = None,
                          echo: bool = False, stop: Optional[Union[str, List[str]]] = [],
                          frequency_penalty: float = 0.0, presence_penalty: float = 0.0,
                          repeat_penalty: float = 1.0, top_k: int = 40, stream: bool = False,
                          seed: Optional[int] = None, tfs_z: float = 1.0, mirostat_mode: int = 0,
                          mirostat_tau: float = 5.0, mirostat_eta: float = 0.1, model: Optional[str] = None,
                          stopping_criteria: Optional[StoppingCriteriaList] = None,
                          logits_processor: Optional[LogitsProcessorList] = None, grammar: Optional[Any] = None,
                          logit_bias: Optional[Dict[int, float]] = None) -> Any:
        """Complete ``prompt`` (text or token ids). Returns an OpenAI-shaped
        ``text_completion`` dict, or an iterator of chunks with ``stream=True``."""
        sampling = SamplingParams(
            temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, typical_p=typical_p,
            repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty, presence_penalty=presence_penalty,
            tfs_z=tfs_z, mirostat_mode=mirostat_mode, mirostat_tau=mirostat_tau, mirostat_eta=mirostat_eta,
            logit_bias=logit_bias, grammar=grammar)
        req = CompletionRequest(prompt=prompt, suffix=suffix, max_tokens=max_tokens, logprobs=logprobs, echo=echo,
                                stop=stop, seed=seed, model=model, stopping_criteria=stopping_criteria,
                                logits_processor=logits_processor, sampling=sampling)
        if stream:
            return stream_completion(self, req)
        return run_completion(self, req)

    __call__ = create_completion  # llm(prompt, ...): the same signature, as in llama-cpp-python

    # -------------------------------------------------------------- embeddings
    def create_embedding(self, input: Union[str, List[str]], model: Optional[str] = None) -> Dict[str, Any]:
        """Embed a string or a list of strings: an OpenAI-shaped
        ``{"object": "list", "data": [{"object": "embedding", "embedding": [...],
        "index": i}], "model": ..., "usage": {...}}``. Needs ``embedding=True``."""
        return _embedding.create_embedding(self, input, model)

    def embed(self, input: Union[str, List[str]], normalize: bool = False, truncate: bool = True,
              return_count: bool = False) -> Any:
        """Embeddings of a string (a vector) or a list of strings (a list of
        vectors); with pooling type none, a list of per-token vectors per
        input. ``truncate`` cuts inputs to n_batch tokens (else they raise
        ValueError); ``normalize`` L2-normalises; ``return_count`` also
        returns the number of tokens. Needs ``embedding=True``."""
        return _embedding.embed(self, input, normalize=normalize, truncate=truncate, return_count=return_count)

    def rerank(self, query: str, documents: List[str], top_n: Optional[int] = None,
               return_documents: bool = False) -> List[Dict[str, Any]]:
        """Scores of ``documents`` against ``query`` by a reranker (a cross-encoder
        with a classifier head: bge-reranker, Qwen3-Reranker), as llama-server's
        ``/v1/rerank``: ``[{"index", "relevance_score", "document"?}]``, best first,
        the first ``top_n`` of them. Needs ``embedding=True`` and
        ``pooling_type=LLAMA_POOLING_TYPE_RANK``; a model without a classifier head
        is a ValueError. ``return_documents`` adds ``{"text": document}``."""
        return _rerank.rerank(self, query, documents, top_n=top_n, return_documents=return_documents)

    # -------------------------------------------------------------------- chat
    def create_chat_completion(
        self, messages: List[Dict[str, Any]], functions: Optional[List[Dict[str, Any]]] = None,
        function_call: Any = None, tools: Optional[List[Dict[str, Any]]] = None, tool_choice: Any = None,
        temperature: float = 0.2, top_p: float = 0.95, top_k: int = 40, min_p: float = 0.05, typical_p: float = 1.0,
        stream: bool = False, stop: Optional[Union[str, List[str]]] = [], seed: Optional[int] = None,
        response_format: Optional[Dict[str, Any]] = None, max_tokens: Optional[int] = None,
        presence_penalty: float = 0.0, frequency_penalty: float = 0.0, repeat_penalty: float = 1.0,
        tfs_z: float = 1.0, mirostat_mode: int = 0, mirostat_tau: float = 5.0, mirostat_eta: float = 0.1,
        model: Optional[str] = None, logits_processor: Optional[LogitsProcessorList] = None,
        grammar: Optional[Any] = None, logit_bias: Optional[Dict[int, float]] = None,
        logprobs: Optional[bool] = None, top_logprobs: Optional[int] = None, reasoning_format: str = "auto",
        reasoning_budget: Optional[int] = None, chat_template_kwargs: Optional[Dict[str, Any]] = None,
    ) -> Any:
        """Answer a chat (OpenAI-shaped ``messages``): a ``chat.completion``
        dict, or an iterator of ``chat.completion.chunk`` dicts with
        ``stream=True``. The prompt comes from ``chat_handler``, else
        ``chat_format``, else the GGUF's chat template (see llamapy.chat).
        ``reasoning_format`` (llamapy's, llama-server's names): "auto" puts a
        reasoning model's thinking into ``reasoning_content``, "none" leaves
        it in ``content``. ``reasoning_budget``: at most that many tokens of
        thinking, then the template's closing marker is written for the model
        and the answer follows (None or -1: no limit; 0: none).
        ``chat_template_kwargs``: variables for the chat template, as the
        server's request field of that name (``{"enable_thinking": False}``)."""
        kwargs = dict(locals())
        del kwargs["self"]
        return _chat.create_chat_completion(self, **kwargs)

    def create_chat_completion_openai_v1(self, *args: Any, **kwargs: Any) -> Any:
        """create_chat_completion returning the ``openai`` package's
        ``ChatCompletion`` / ``ChatCompletionChunk`` (needs ``pip install openai``)."""
        return _chat.create_chat_completion_openai_v1(self, *args, **kwargs)

    # ------------------------------------------------------------------ state
    def _check_whole_context(self, what: str) -> None:
        if self.__dict__.get("_view_of") is not None:
            raise NotImplementedError(f"{what} of a sequence_view: the engine's state is the whole context's "
                                      "(every sequence); save and load the state of the Llama that owns it")

    def save_state(self) -> LlamaState:
        self._check_whole_context("save_state")
        ctx = self._require_ctx()
        with self._lock:
            data = bytes(ctx.state_get())
            scores = (self._scores_all[: self.n_tokens].copy() if self._scores_all is not None
                      else np.zeros((0, self._n_vocab), dtype=np.single))
            state = LlamaState(self.input_ids[: self.n_tokens].copy(), scores, self.n_tokens, data, len(data),
                               self._seed)
            state.pos_shifts = list(self._pos_shifts)
            return state

    def load_state(self, state: LlamaState) -> None:
        self._check_whole_context("load_state")
        ctx = self._require_ctx()
        with self._lock:
            if state.n_tokens > self._n_ctx:
                raise ValueError(f"state holds {state.n_tokens} tokens, more than n_ctx={self._n_ctx}")
            ctx.state_set(state.llama_state)
            self.input_ids[: state.n_tokens] = state.input_ids[: state.n_tokens]
            self.n_tokens = state.n_tokens
            # States pickled before pos_shifts existed have none (text-only positions).
            self._pos_shifts = [(r, s) for r, s in getattr(state, "pos_shifts", []) if r <= state.n_tokens]
            self._seed = state.seed
            if self._scores_all is not None and len(state.scores) == state.n_tokens:
                self._scores_all[: state.n_tokens] = state.scores
            # Logits are not part of the engine state: the next generate()
            # re-evaluates the last token (prefix reuse keeps the rest).
            self._last_logits_row = -1

    # --------------------------------------------------------------- debugging
    def tensor_dump(self, names=None):
        """A context manager that records the named intermediates of the
        evaluations inside it (``llamapy.debug.TensorDump``); names: None
        (all), a collection of names, or a predicate."""
        return TensorDump(self, names)

    # --------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Free the context and unmap the model. Safe to call twice."""
        if getattr(self, "_closed", True):
            return
        self._closed = True
        if self.__dict__.get("_view_of") is not None:
            self._seq.closed = True  # a sequence_view: the model and context belong to its Llama
            return
        seq = getattr(self, "_seq", None)
        if seq is not None:
            seq.closed = True
            seq.ctx = seq.decoder = seq._out = None
        self._ctx = None
        self.__dict__.pop("_vocab_only_ctx", None)
        self.__dict__.pop("_encoder_workers", None)  # _embedding_workers.py
        self._model = None
        gguf = getattr(self, "_gguf", None)
        if gguf is not None:
            gguf.close()

    def __enter__(self) -> "Llama":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self._init_options)  # the arguments as given
        state.update(model_path=self.model_path, chat_format=self.chat_format, chat_handler=self.chat_handler,
                     seed=self._seed)
        if getattr(self, "mmproj", None) is not None:
            state.update(mmproj=self.mmproj, chat_handler=None)  # the copy picks its handler again
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    @staticmethod
    def logits_to_logprobs(logits: npt.NDArray[np.single], axis: int = -1) -> npt.NDArray[np.single]:
        logits = np.asarray(logits, dtype=np.single)
        mx = np.max(logits, axis=axis, keepdims=True)
        shifted = logits - mx
        return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))

    @staticmethod
    def longest_token_prefix(a: Sequence[int], b: Sequence[int]) -> int:
        return longest_token_prefix(a, b)

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str], additional_files: Optional[List] = None,
                        local_dir: Optional[Union[str, "os.PathLike[str]"]] = None,
                        local_dir_use_symlinks: Union[bool, str] = "auto",
                        cache_dir: Optional[Union[str, "os.PathLike[str]"]] = None, **kwargs: Any) -> "Llama":
        raise NotImplementedError("from_pretrained downloads from the Hugging Face Hub, which llamapy does not do; "
                                  "download the GGUF file yourself and pass model_path")
