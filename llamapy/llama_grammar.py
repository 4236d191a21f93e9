"""The grammar API under llama-cpp-python's module name
(``llama_cpp.llama_grammar``), for drop-in imports; see llamapy/grammar.py."""
from .grammar import *  # noqa: F401,F403
from .grammar import __all__  # noqa: F401
