"""What ``Llama()``'s options mean beyond the engine's option carriers.

Every engine option is a field of ``_engine.ModelParams`` or
``_engine.ContextParams``, whose setter is its one parser (bind_params.cpp):
``Llama.__init__`` hands its keywords to those directly. This module holds
what is Python's own: the model path, ``use_mmap``'s default, the seed,
keywords of older llama-cpp-python releases, and the notes about options
that only place work on a GPU when nothing can go to one.
"""
from __future__ import annotations

import logging
import math
import os
import random
from typing import Any, Dict, Optional

from . import _engine
from ._log import emit
from .gguf_file import split_part_paths
from .system import memory_available

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
    return random.SystemRandom().randint(0, DEFAULT_SEED - 1)


def seed_value(seed: Any) -> int:
    """Llama(seed=...): an int; -1 (and llama-cpp-python's 0, see Llama) the default."""
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    return DEFAULT_SEED if seed == -1 else seed


def model_file(path: Any) -> str:
    """Llama's model_path, checked: a path to an existing file."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("model_path must be a path")
    path = os.fspath(path)
    if not os.path.exists(path):
        raise ValueError(f"Model path does not exist: {path}")
    if os.path.isdir(path):
        raise ValueError(f"Model path is a directory, not a GGUF file: {path}")
    return path


def _fits_in_memory(path: str) -> bool:
    """use_mmap's default (None): read the model file into memory (faster
    token generation: the engine streams every weight once per token, and
    page-cache mappings stream slower, see gguf.cpp read_into_memory) when it
    takes at most half of the memory available now (Linux MemAvailable);
    otherwise, or where that is unknown, map it. A split model counts all
    its parts."""
    try:
        size = sum(os.path.getsize(p) for p in split_part_paths(path))
    except (OSError, ValueError, TypeError):
        return False  # a bad path (or a missing part) is reported by the engine
    avail = memory_available()
    return avail is not None and size <= avail // 2


def use_mmap_value(path: str, use_mmap: Optional[bool], vocab_only: bool) -> bool:
    """use_mmap as given, or its default for this file (None)."""
    if use_mmap is None:
        return bool(vocab_only) or not _fits_in_memory(path)
    return bool(use_mmap)


def load_options(path: str, use_mmap: Optional[bool], vocab_only: bool) -> Dict[str, bool]:
    """The engine's ModelParams use_mmap / huge_pages for Llama's use_mmap.
    The default (None) where the file fits: the file read in through a
    mapping in 2 MiB pages where the kernel gives it those (faster token
    generation than a copy in 4 KiB pages: huge_pages.h), else read into
    memory. use_mmap=False: always the copy; True: a mapping, advised for
    2 MiB pages, read as used."""
    return {"use_mmap": use_mmap_value(path, use_mmap, vocab_only), "huge_pages": use_mmap is not False}


def refuse_unknown(kwargs: Dict[str, Any], verbose: bool) -> None:
    """The keywords Llama() does not name: older releases' (a note, no effect)
    or unknown ones (a TypeError naming them)."""
    legacy = sorted(k for k in kwargs if k in LEGACY_KWARGS)
    unknown = sorted(k for k in kwargs if k not in LEGACY_KWARGS)
    if unknown:
        raise TypeError("Llama() got unexpected keyword argument(s): " + ", ".join(unknown))
    if legacy:
        emit(verbose, logging.INFO, "%s: options of older llama-cpp-python releases (which integrations such as "
             "LangChain's still pass); 0.3.x and llamapy accept them with no effect", ", ".join(legacy))


def gpu_unavailable() -> Optional[str]:
    """Why layers cannot go to a GPU in this process, or None when they can."""
    return _engine.gpu_unavailable() or None  # the engine's backend registry knows


def gpu_layers_value(n_gpu_layers: Any) -> Any:
    """llama-cpp-python's n_gpu_layers: any negative int means all layers (the
    engine's -1; its -2 is "auto", which Llama users write as a string)."""
    if isinstance(n_gpu_layers, int) and not isinstance(n_gpu_layers, bool) and n_gpu_layers < 0:
        return -1
    return n_gpu_layers


def place_on_gpu(cp: Any, verbose: bool, vocab_only: bool, split_mode: Any, op_offload: Any) -> None:
    """Notes for the options that only place work on a GPU (cp holds them parsed).
    When nothing can go to one, each such option given is named with the reason
    (as llama.cpp warns without a device) and every layer stays on the CPU.
    split_mode 2 (row) runs as 1 (layer), with a note where it matters."""
    cp.split_mode = min(cp.split_mode, 1)
    given = [f"{name}={value}" for name, value, default in (
        ("n_gpu_layers", {-1: "-1 (all)", -2: "'auto'"}.get(cp.n_gpu_layers, cp.n_gpu_layers), 0),
        ("main_gpu", cp.main_gpu, 0), ("split_mode", split_mode, 1),
        ("tensor_split", list(cp.tensor_split) or None, None), ("offload_kqv", cp.offload_kqv, True),
        ("op_offload", op_offload, None), ("n_cpu_moe", cp.n_cpu_moe, 0),
        ("override_tensor", list(cp.override_tensor) or None, None)) if value != default]
    why = None
    if cp.n_gpu_layers != 0:
        why = "vocab_only=True loads no weights" if vocab_only else gpu_unavailable()
    if cp.n_gpu_layers == 0 or why is not None:
        if given:
            emit(verbose, logging.WARNING, "%s: %s %s no effect; every layer runs on the CPU",
                 why or "no layers are offloaded to a GPU", ", ".join(given), "has" if len(given) == 1 else "have")
        cp.n_gpu_layers = 0
        return
    notes = []
    if split_mode == 2:
        notes.append("split_mode=2 (row split is not implemented: layers are split across devices whole, "
                     "as split_mode=1)")
    if op_offload is not None and not op_offload:
        notes.append("op_offload=False (not implemented)")
    if notes:
        emit(verbose, logging.WARNING, "%s: no effect", "; ".join(notes))


def python_options(verbose: bool, vocab_only: bool, lora_base: Any, lora_path: Any, lora_scale: Any, numa: Any,
                   draft_model: Any, last_n_tokens_size: Any) -> None:
    """Checks and notes for the options the Python layer keeps for itself."""
    if isinstance(last_n_tokens_size, bool) or not isinstance(last_n_tokens_size, int) or last_n_tokens_size < 0:
        raise ValueError(f"last_n_tokens_size must be an int >= 0, got {last_n_tokens_size!r}")
    if lora_path is not None and not isinstance(lora_path, (str, os.PathLike)):
        raise TypeError("lora_path must be a path")
    if isinstance(lora_scale, bool) or not isinstance(lora_scale, (int, float)) or not math.isfinite(lora_scale):
        raise ValueError(f"lora_scale must be a finite number, got {lora_scale!r}")
    if lora_base is not None:
        # llama.cpp applies adapters on the fly to the (possibly quantized)
        # weights; a separate full-precision base is not used any more.
        emit(verbose, logging.WARNING, "lora_base is ignored: adapters are applied to the loaded model's weights")
    if numa:
        emit(verbose, logging.INFO, "numa=%s: llamapy does not apply NUMA policies; threads are placed by the OS",
             numa)
    if draft_model is not None and not callable(draft_model):
        raise TypeError("draft_model must be a LlamaDraftModel (callable: input_ids -> proposed token ids)")
