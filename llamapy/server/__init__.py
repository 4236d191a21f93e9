"""llamapy's OpenAI- and Ollama-compatible HTTP server (``pip install
"llamapy-engine[server]"``; ``python -m llamapy serve -m MODEL``).

One model, ``-np`` parallel slots with continuous batching (slots.py,
batch.py). Router mode (several models) and the memory planner are not
built yet.
"""
from __future__ import annotations

__all__ = ["create_app", "parse_settings", "main"]


def __getattr__(name: str):  # imported on use, so that ``import llamapy.server`` names a missing extra clearly
    if name == "create_app":
        from .app import create_app
        return create_app
    if name == "parse_settings":
        from .config import parse_settings
        return parse_settings
    if name == "main":
        from .cli import main
        return main
    raise AttributeError(name)
