"""llamapy — run GGUF language models in-process, fast, on your own machine.

The native engine lives in ``llamapy._engine`` (C++, built by CMake); this
package is the Python face of it.
"""
from __future__ import annotations

from ._engine import GGUFError
from .gguf_file import GGUFFile, TensorInfo
from .llama import Llama
from .llama_cache import (
    BaseLlamaCache,
    LlamaCache,
    LlamaRAMCache,
    LlamaState,
    LogitsProcessorList,
    MinTokensLogitsProcessor,
    StoppingCriteriaList,
)
from ._tokenizer import LlamaTokenizer
from .grammar import LlamaGrammar
from .quants import dequantize, quantize
from .system import system_info

__version__ = "0.1.0"

__all__ = [
    "Llama",
    "LlamaTokenizer",
    "LlamaGrammar",
    "LlamaState",
    "LlamaCache",
    "LlamaRAMCache",
    "BaseLlamaCache",
    "LogitsProcessorList",
    "StoppingCriteriaList",
    "MinTokensLogitsProcessor",
    "GGUFError",
    "GGUFFile",
    "TensorInfo",
    "dequantize",
    "quantize",
    "system_info",
    "__version__",
]
