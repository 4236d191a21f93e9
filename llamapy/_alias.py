"""``install_as_llama_cpp()``: let libraries that import ``llama_cpp``
themselves (LangChain's LlamaCpp, llama-index's LlamaCPP, ...) run on llamapy.

A user switching over changes their own imports; a library's imports are not
theirs to change. After this call, ``import llama_cpp`` and
``llama_cpp.<module>`` for the modules llamapy mirrors (llama, llama_cpp,
llama_chat_format, llama_types, llama_grammar, llama_cache,
llama_speculative, llama_tokenizer, _internals) give llamapy's. Opt-in and
explicit: nothing is aliased on import, and a real llama-cpp-python already
imported in the process is never replaced.
"""
from __future__ import annotations

import importlib
import sys

MIRRORED = ("llama", "llama_cpp", "llama_chat_format", "llama_types", "llama_grammar", "llama_cache",
            "llama_speculative", "llama_tokenizer", "_internals")


def install_as_llama_cpp() -> None:
    """Registers llamapy under the module name ``llama_cpp`` (and its submodules)."""
    import llamapy

    present = sys.modules.get("llama_cpp")
    if present is llamapy:
        return
    if present is not None:
        raise RuntimeError(f"llama_cpp is already imported in this process (from {getattr(present, '__file__', '?')}):"
                           " install_as_llama_cpp() must run before anything imports llama-cpp-python")
    sys.modules["llama_cpp"] = llamapy
    for name in MIRRORED:
        sys.modules[f"llama_cpp.{name}"] = importlib.import_module(f"llamapy.{name}")
