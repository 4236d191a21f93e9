"""llamapy — run GGUF language models in-process, fast, on your own machine.

The native engine lives in ``llamapy._engine`` (C++, built by CMake); this
package is the Python face of it.
"""
from __future__ import annotations

import os as _os
import sys as _sys


def _use_installed_copy_if_unbuilt() -> None:
    """Running ``python -m llamapy`` (or ``import llamapy``) from the root of
    a source checkout finds this unbuilt source package before the installed
    one. When the native module is missing here but an installed llamapy
    exists elsewhere on sys.path, load the package's modules from there.
    Only a module this interpreter can load counts (its EXTENSION_SUFFIXES):
    an x86 developer build in the checkout does not hide an aarch64 install."""
    from importlib.machinery import EXTENSION_SUFFIXES

    def built(d: str) -> bool:
        names = set(_os.listdir(d))
        return any("_engine" + s in names for s in EXTENSION_SUFFIXES)

    here = _os.path.dirname(_os.path.abspath(__file__))
    if built(here):
        return
    for entry in _sys.path:
        cand = _os.path.join(_os.path.abspath(entry or "."), "llamapy")
        if cand != here and _os.path.isdir(cand) and built(cand):
            __path__[:] = [cand]  # noqa: F821 - the package's own __path__
            return


_use_installed_copy_if_unbuilt()

from ._engine import GGUFError, isa_cap_error as _isa_cap_error  # noqa: E402

if _isa_cap_error():
    # A misspelt LLAMAPY_ISA would otherwise silently test the wrong kernels.
    raise ValueError(_isa_cap_error())
from .gguf_file import GGUFFile, TensorInfo
from .llama import Llama
from .llama_cache import (
    BaseLlamaCache,
    LlamaCache,
    LlamaDiskCache,
    LlamaRAMCache,
    LlamaState,
    LogitsProcessor,
    LogitsProcessorList,
    MinTokensLogitsProcessor,
    StoppingCriteria,
    StoppingCriteriaList,
)
from .llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer, LlamaTokenizer
from .grammar import LlamaGrammar
from .llama_speculative import LlamaDraftModel
from .memory_plan import MemoryPlan, plan_memory
# The function shadows its module's name on the package: import the module's
# other names with ``from llamapy.perplexity import PerplexityResult``.
from .perplexity import KLDResult, PerplexityResult, perplexity
from .quants import dequantize, quantize
from .quantize_gguf import quantize_model
from .system import system_info

# llama-cpp-python's top level re-exports its request/response types and the
# low-level constants and queries (llamapy.llama_cpp); code imports them from
# there (``from llama_cpp import ChatCompletionRequestUserMessage``).
from .llama_types import *  # noqa: E402,F401,F403
from .llama_cpp import *  # noqa: E402,F401,F403
from . import _internals as internals  # noqa: E402 - llama_cpp's llama.py imports it under this name
from ._alias import install_as_llama_cpp  # noqa: E402
from . import llama_cache, llama_cpp, llama_grammar, llama_speculative, llama_tokenizer, llama_types  # noqa


def __getattr__(name: str):
    # llamapy.llama_chat_format on first use: it loads Jinja (~0.1 s), which
    # plain completion never needs.
    if name == "llama_chat_format":
        import importlib

        return importlib.import_module(".llama_chat_format", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

__version__ = "0.1.0"

__all__ = [
    "install_as_llama_cpp",
    "Llama",
    "LlamaTokenizer",
    "BaseLlamaTokenizer",
    "LlamaHFTokenizer",
    "LlamaGrammar",
    "LlamaDraftModel",
    "LlamaState",
    "LlamaCache",
    "LlamaRAMCache",
    "LlamaDiskCache",
    "BaseLlamaCache",
    "LogitsProcessor",
    "LogitsProcessorList",
    "StoppingCriteria",
    "StoppingCriteriaList",
    "MinTokensLogitsProcessor",
    "GGUFError",
    "GGUFFile",
    "TensorInfo",
    "MemoryPlan",
    "plan_memory",
    "dequantize",
    "quantize",
    "quantize_model",
    "system_info",
    "__version__",
    *llama_types.__all__,
    *llama_cpp.__all__,
]
