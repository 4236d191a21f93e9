"""The constructor options of ``Llama``, grouped and validated once.

``Llama.__init__`` keeps llama-cpp-python's keyword signature (users depend
on it); this module turns those keywords into two small dataclasses and
decides, in one place, what each option means here: honoured, accepted with a
logged note because it only concerns hardware llamapy does not drive, or
rejected with an error that names it.
"""
from __future__ import annotations

import logging
import math
import operator
import os
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Union

from ._log import emit

logger = logging.getLogger("llamapy")

DEFAULT_SEED = 0xFFFFFFFF  # llama.cpp's LLAMA_DEFAULT_SEED: "pick a random seed"


# Keywords llama-cpp-python 0.3.x takes through **kwargs and ignores, that callers
# still pass: options of its older releases (n_parts, f16_kv, low_vram, n_gqa,
# rms_norm_eps, mul_mat_q) and LangChain's LlamaCppEmbeddings' "device". Any
# other unknown keyword stays an error here (a typo should not pass silently).
LEGACY_KWARGS = frozenset({"n_parts", "f16_kv", "low_vram", "n_gqa", "rms_norm_eps", "mul_mat_q", "device"})


def random_seed() -> int:
    """A fresh base seed for a command-line tool or server started without --seed
    (as llama-cli and llama-server sample): Llama()'s own default follows
    llama-cpp-python, whose per-call seeds, derived from DEFAULT_SEED, repeat."""
    import random

    return random.SystemRandom().randint(0, DEFAULT_SEED - 1)

# KV cache element types by ggml type id (llama_cpp.GGML_TYPE_*). Unlike
# llama.cpp, quantized values do not require flash_attn=True.
KV_TYPES = {0: "F32", 1: "F16", 30: "BF16", 8: "Q8_0", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 20: "IQ4_NL"}


def _fits_in_memory(path: str) -> bool:
    """use_mmap's default (None): read the model file into memory (faster
    token generation: the engine streams every weight once per token, and
    page-cache mappings stream slower, see gguf.cpp read_into_memory) when it
    takes at most half of the memory available now (Linux MemAvailable);
    otherwise, or where that is unknown, map it."""
    from .system import memory_available

    try:
        size = os.path.getsize(path)
    except (OSError, ValueError, TypeError):
        return False  # a bad path is reported by the engine
    avail = memory_available()
    return avail is not None and size <= avail // 2


@dataclass(frozen=True)
class ModelParams:
    model_path: str
    n_gpu_layers: int = 0     # as the engine takes it: 0 none, N the last N, -1 all, -2 "auto"
    main_gpu: int = 0
    vocab_only: bool = False
    use_mmap: bool = True
    use_mlock: bool = False
    kv_overrides: Dict[str, Union[bool, int, float, str]] = field(default_factory=dict)
    lora_path: Optional[str] = None   # a LoRA adapter (GGUF) applied with lora_scale
    lora_scale: float = 1.0
    split_mode: int = 1       # 0 none (main_gpu), 1 layer split across devices
    tensor_split: Optional[tuple] = None  # each device's share of the GPU layers


@dataclass(frozen=True)
class ContextParams:
    n_ctx: int = 512          # 0: the model's trained length
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int = 1
    n_threads_batch: int = 1
    seed: int = DEFAULT_SEED
    rope_freq_base: float = 0.0   # 0: from the model
    rope_freq_scale: float = 0.0  # 0: from the model
    logits_all: bool = False
    embedding: bool = False
    flash_attn: int = -1      # -1 auto, 0 off, 1 on (llama_cpp.LLAMA_FLASH_ATTN_TYPE_*)
    type_k: int = 1
    type_v: int = 1
    last_n_tokens_size: int = 64
    pooling_type: int = -1
    # RoPE scaling: -1 the model's, 0 none, 1 linear, 2 YaRN; the yarn_* values
    # as the engine takes them (0 / negative: the model's or the type's default).
    rope_scaling_type: int = -1
    yarn_ext_factor: float = -1.0
    yarn_attn_factor: float = 0.0
    yarn_beta_fast: float = 0.0
    yarn_beta_slow: float = 0.0
    yarn_orig_ctx: int = 0
    swa_full: bool = False
    # False: the KV cache and the attention over it stay on the CPU while
    # layers run on the GPU (llama.cpp's offload_kqv).
    offload_kqv: bool = True


def engine_params(mp: ModelParams, cp: ContextParams) -> tuple[Any, Any]:
    """The engine's option structs (``_engine.ModelParams``, ``_engine.ContextParams``)
    for a Llama's parameters. Defaults that depend on the model (n_ctx 0, the
    batch caps, pooling, flash_attn "auto") are resolved by the engine alone:
    ``ContextParams.resolved(model)``."""
    from . import _engine

    model = _engine.ModelParams(vocab_only=mp.vocab_only, use_mmap=mp.use_mmap, kv_overrides=mp.kv_overrides)
    ctx = _engine.ContextParams(
        n_ctx=cp.n_ctx, n_batch=cp.n_batch, n_ubatch=cp.n_ubatch, n_threads=cp.n_threads,
        n_threads_batch=cp.n_threads_batch, type_k=cp.type_k, type_v=cp.type_v, flash_attn=cp.flash_attn,
        embeddings=cp.embedding, rope_freq_base=cp.rope_freq_base, rope_freq_scale=cp.rope_freq_scale,
        pooling_type=cp.pooling_type, rope_scaling_type=cp.rope_scaling_type, yarn_ext_factor=cp.yarn_ext_factor,
        yarn_attn_factor=cp.yarn_attn_factor, yarn_beta_fast=cp.yarn_beta_fast, yarn_beta_slow=cp.yarn_beta_slow,
        yarn_orig_ctx=cp.yarn_orig_ctx, swa_full=cp.swa_full, n_gpu_layers=mp.n_gpu_layers, main_gpu=mp.main_gpu,
        offload_kqv=cp.offload_kqv, split_mode=mp.split_mode, tensor_split=list(mp.tensor_split or ()))
    return model, ctx


def _require_int(name: str, value: Any, minimum: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def default_threads() -> tuple[int, int]:
    """(generation, batch) thread counts: physical cores for both.

    llama-cpp-python uses cpu_count()//2 and cpu_count(); on machines without
    SMT that halves generation speed, so we ask the engine for the physical
    core count instead.
    """
    from . import _engine

    n = int(_engine.system_info()["default_n_threads"])
    return n, n


def gpu_layers(value: Any) -> int:
    """n_gpu_layers as users pass it: an int as llama.cpp counts it (0 none,
    N the last N repeating layers, more than the model has: the output layer
    too, any negative: all), "all", or "auto" (as many as fit in the device's
    memory). Returns the engine's value: >= 0, -1 all or -2 auto."""
    if isinstance(value, str):
        key = value.strip().lower()
        if key == "all":
            return -1
        if key == "auto":
            return -2
        raise ValueError(f"n_gpu_layers must be an int, 'all' or 'auto', got {value!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"n_gpu_layers must be an int, 'all' or 'auto', got {type(value).__name__}") from None
    return -1 if value < 0 else int(value)


def gpu_unavailable() -> Optional[str]:
    """Why layers cannot go to a GPU in this process, or None when they can."""
    from . import _engine

    if "vulkan" not in _engine.backends():
        return "no GPU backend in this build (build with CMAKE_ARGS=\"-DLLAMAPY_VULKAN=ON\")"
    if not _engine.gpu_devices():
        return f"no Vulkan device found ({_engine.vulkan_error() or 'the loader reports none'})"
    return None


def kv_type(name: str, value: Any) -> int:
    """A KV cache element type given as a ggml type id (int or enum, e.g.
    llama_cpp.GGML_TYPE_Q8_0) or by name ("q8_0", "Q8_0", "f16", ...)."""
    if value is None:
        return 1
    names = {v.lower(): k for k, v in KV_TYPES.items()}
    if isinstance(value, str):
        key = value.strip().lower()
        if key.startswith("ggml_type_"):
            key = key[len("ggml_type_"):]
        if key not in names:
            raise ValueError(f"{name}={value!r} is not a KV cache type; supported: " + ", ".join(names))
        return names[key]
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = operator.index(value)  # a numpy integer (IntEnums are ints already); not a float
        except TypeError:
            raise TypeError(f"{name} must be a ggml type id or a type name such as 'q8_0', "
                            f"got {type(value).__name__}") from None
    if int(value) not in KV_TYPES:
        raise ValueError(f"{name}={int(value)} is not a supported KV cache type; supported: "
                         + ", ".join(f"{k} ({v.lower()})" for k, v in KV_TYPES.items()))
    return int(value)


def flash_attn_mode(value: Any) -> int:
    """flash_attn as given to Llama(): True / False (llama-cpp-python's bool),
    "auto" or None, or a llama_cpp.LLAMA_FLASH_ATTN_TYPE_* value (-1 auto,
    0 disabled, 1 enabled). Returns -1, 0 or 1."""
    if value is None:
        return -1
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return -1
    elif not isinstance(value, float):
        try:
            i = operator.index(value)  # ints, IntEnums, numpy integers
        except TypeError:
            i = None
        if i in (-1, 0, 1):
            return int(i)
    raise ValueError(f"flash_attn must be True, False or 'auto' (or LLAMA_FLASH_ATTN_TYPE_AUTO/DISABLED/ENABLED: "
                     f"-1/0/1), got {value!r}")


def _split_options(split_mode: Any, tensor_split: Any) -> tuple[int, Optional[tuple]]:
    """split_mode (0 none, 1 layer, 2 row as llama.cpp numbers them) and
    tensor_split (a sequence of at most 16 non-negative shares, one per
    device; None or all zero: by free memory), checked."""
    mode = _require_int("split_mode", split_mode)
    if mode not in (0, 1, 2):
        raise ValueError(f"split_mode must be 0 (none), 1 (layer) or 2 (row), got {mode}")
    if tensor_split is None:
        return mode, None
    try:
        shares = tuple(float(v) for v in tensor_split)
    except (TypeError, ValueError):
        raise TypeError(f"tensor_split must be a sequence of numbers, got {tensor_split!r}") from None
    if len(shares) > 16 or any(not math.isfinite(v) or v < 0 for v in shares):
        raise ValueError(f"tensor_split must hold at most 16 finite shares >= 0 (one per device), got {tensor_split!r}")
    return mode, shares


def parse_params(model_path: str, kw: Dict[str, Any], verbose: bool = False) -> tuple[ModelParams, ContextParams]:
    """Validates the keyword arguments of ``Llama.__init__`` (minus those the
    Python layer keeps for itself) and returns the engine parameters. Notes
    about options without effect are printed with ``verbose``, else logged."""
    if not isinstance(model_path, (str, os.PathLike)):
        raise TypeError("model_path must be a path")
    model_path = os.fspath(model_path)

    n_gpu_layers = gpu_layers(kw.pop("n_gpu_layers", 0))
    main_gpu = _require_int("main_gpu", kw.pop("main_gpu", 0), 0)
    split_mode = kw.pop("split_mode", 1)
    tensor_split = kw.pop("tensor_split", None)
    offload_kqv = kw.pop("offload_kqv", True)
    op_offload = kw.pop("op_offload", None)
    given = [f"{name}={value!r}" for name, value, default in (
        ("n_gpu_layers", n_gpu_layers, 0), ("main_gpu", main_gpu, 0), ("split_mode", split_mode, 1),
        ("tensor_split", tensor_split, None), ("offload_kqv", offload_kqv, True), ("op_offload", op_offload, None))
        if ((value is not None) if default is None else bool(value != default))]
    why = None
    if n_gpu_layers != 0:
        why = "vocab_only=True loads no weights" if kw.get("vocab_only") else gpu_unavailable()
    if n_gpu_layers == 0 or why is not None:
        # Nothing goes to a GPU. Not silent: options that only place work on
        # one are named, with the reason (as llama.cpp warns without a device).
        if given:
            given[0] = given[0].replace("n_gpu_layers=-1", "n_gpu_layers=-1 (all)").replace(
                "n_gpu_layers=-2", "n_gpu_layers='auto'")
            emit(verbose, logging.WARNING, "%s: %s %s no effect; every layer runs on the CPU",
                 why or "no layers are offloaded to a GPU", ", ".join(given),
                 "has" if len(given) == 1 else "have")
        n_gpu_layers = 0
    else:
        notes = []
        if split_mode == 2:
            notes.append("split_mode=2 (row split is not implemented: layers are split across devices whole, "
                         "as split_mode=1)")
            split_mode = 1
        if op_offload is not None and not op_offload:
            notes.append("op_offload=False (not implemented)")
        if notes:
            emit(verbose, logging.WARNING, "%s: no effect", "; ".join(notes))

    split_mode, tensor_split = _split_options(split_mode, tensor_split)
    split_mode = min(split_mode, 1)  # row (2): layers whole (noted above when it matters)

    vocab_only = bool(kw.pop("vocab_only", False))
    use_mmap = kw.pop("use_mmap", None)
    if use_mmap is None:  # the default: read into memory where the file fits comfortably
        use_mmap = vocab_only or not _fits_in_memory(model_path)
    use_mmap = bool(use_mmap)
    use_mlock = bool(kw.pop("use_mlock", False))
    kv_overrides = kw.pop("kv_overrides", None) or {}
    if not isinstance(kv_overrides, dict):
        raise TypeError("kv_overrides must be a dict of metadata key -> bool/int/float/str")
    for k, v in kv_overrides.items():
        if not isinstance(k, str) or not isinstance(v, (bool, int, float, str)):
            raise TypeError(f"kv_overrides[{k!r}] must map a str key to a bool, int, float or str")

    seed = _require_int("seed", kw.pop("seed", DEFAULT_SEED))
    if seed == -1:
        seed = DEFAULT_SEED
    n_ctx = _require_int("n_ctx", kw.pop("n_ctx", 512), 0)
    n_batch = _require_int("n_batch", kw.pop("n_batch", 512), 1)
    n_ubatch = _require_int("n_ubatch", kw.pop("n_ubatch", 512), 1)
    n_threads = kw.pop("n_threads", None)
    n_threads_batch = kw.pop("n_threads_batch", None)
    d_gen, d_batch = default_threads()
    n_threads = d_gen if n_threads is None or n_threads in (0, -1) else _require_int("n_threads", n_threads, 1)
    if n_threads_batch is None or n_threads_batch in (0, -1):
        n_threads_batch = d_batch
    else:
        n_threads_batch = _require_int("n_threads_batch", n_threads_batch, 1)

    rope_scaling_type = kw.pop("rope_scaling_type", -1)
    rope_scaling_type = -1 if rope_scaling_type is None else _require_int("rope_scaling_type", rope_scaling_type)
    if rope_scaling_type == 3:
        raise NotImplementedError("rope_scaling_type=3 (LongRoPE) is not supported; Phi-3 files with long/short "
                                  "factors use them automatically")
    if rope_scaling_type not in (-1, 0, 1, 2):
        raise ValueError(f"rope_scaling_type must be -1 (model), 0 (none), 1 (linear) or 2 (yarn), "
                         f"got {rope_scaling_type}")
    pooling_type = _require_int("pooling_type", kw.pop("pooling_type", -1), -1)
    kw.pop("attention_type", None)
    rope_freq_base = float(kw.pop("rope_freq_base", 0.0))
    rope_freq_scale = float(kw.pop("rope_freq_scale", 0.0))
    # llama-cpp-python's defaults for the yarn_* options mean "the model's
    # value"; anything else replaces it.
    yarn = {}
    for name, default in (("yarn_ext_factor", -1.0), ("yarn_attn_factor", 1.0), ("yarn_beta_fast", 32.0),
                          ("yarn_beta_slow", 1.0)):
        value = kw.pop(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")
        value = float(value)
        if name != "yarn_ext_factor" and not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
        yarn[name] = (-1.0 if value < 0 else value) if name == "yarn_ext_factor" else (0.0 if value == default else value)
    yarn["yarn_orig_ctx"] = _require_int("yarn_orig_ctx", kw.pop("yarn_orig_ctx", 0), 0)

    logits_all = bool(kw.pop("logits_all", False))
    embedding = bool(kw.pop("embedding", False))
    swa_full = kw.pop("swa_full", None)  # None: window-sized caches for sliding-window layers
    if swa_full is not None and not isinstance(swa_full, bool):
        raise TypeError(f"swa_full must be a bool or None, got {type(swa_full).__name__}")
    kw.pop("no_perf", None)
    flash_attn = flash_attn_mode(kw.pop("flash_attn", "auto"))
    last_n_tokens_size = _require_int("last_n_tokens_size", kw.pop("last_n_tokens_size", 64), 0)

    lora_path = kw.pop("lora_path", None)
    if lora_path is not None:
        if not isinstance(lora_path, (str, os.PathLike)):
            raise TypeError("lora_path must be a path")
        lora_path = os.fspath(lora_path)
    if kw.pop("lora_base", None) is not None:
        # llama.cpp applies adapters on the fly to the (possibly quantized)
        # weights; a separate full-precision base is not used any more.
        emit(verbose, logging.WARNING, "lora_base is ignored: adapters are applied to the loaded model's weights")
    lora_scale = kw.pop("lora_scale", 1.0)
    if isinstance(lora_scale, bool) or not isinstance(lora_scale, (int, float)) or not math.isfinite(lora_scale):
        raise ValueError(f"lora_scale must be a finite number, got {lora_scale!r}")
    numa = kw.pop("numa", False)
    if numa:
        emit(verbose, logging.INFO, "numa=%s: llamapy does not apply NUMA policies; threads are placed by the OS",
             numa)
    draft_model = kw.pop("draft_model", None)
    if draft_model is not None and not callable(draft_model):
        raise TypeError("draft_model must be a LlamaDraftModel (callable: input_ids -> proposed token ids)")

    type_k = kv_type("type_k", kw.pop("type_k", None))
    type_v = kv_type("type_v", kw.pop("type_v", None))
    legacy = sorted(k for k in LEGACY_KWARGS if k in kw)
    for k in legacy:
        kw.pop(k)
    if legacy:
        emit(verbose, logging.INFO, "%s: options of older llama-cpp-python releases (which integrations such as "
             "LangChain's still pass); 0.3.x and llamapy accept them with no effect", ", ".join(legacy))
    if kw:
        raise TypeError("Llama() got unexpected keyword argument(s): " + ", ".join(sorted(kw)))

    return (
        ModelParams(model_path, n_gpu_layers, main_gpu, vocab_only, use_mmap, use_mlock, dict(kv_overrides), lora_path,
                    float(lora_scale), split_mode, tensor_split),
        ContextParams(n_ctx, n_batch, n_ubatch, n_threads, n_threads_batch, seed, rope_freq_base, rope_freq_scale,
                      logits_all, embedding, flash_attn, type_k, type_v, last_n_tokens_size, pooling_type,
                      rope_scaling_type, **yarn, swa_full=bool(swa_full), offload_kqv=bool(offload_kqv)),
    )
