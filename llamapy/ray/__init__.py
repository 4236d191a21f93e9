"""``llamapy.ray``: llamapy beyond one machine, on Ray (``pip install "llamapy-engine[ray]"``).

- Batch inference on Ray Data (``batch.py``): callable classes for ``Dataset.map_batches``
  with an actor pool, one ``Llama`` per actor (``Embedder``, ``Completer``, ``Captioner``,
  ``Reranker``), and one-call helpers ``embed``, ``complete``, ``caption``, ``rerank``.
  A row that fails gets its reason in an ``error`` column; the job goes on.
- Jobs over files (``jobs.py``): ``python -m llamapy batch embed|complete|caption``.
- Serving on Ray Serve (``serve.py``): ``serve_app(...)``, the same FastAPI app as
  ``llamapy serve``, as replicas; ``python -m llamapy serve --ray``.

Ray schedules, places and restarts; nothing here discovers nodes or speaks RPC. ``import
llamapy`` never imports this package (nor Ray).
"""
from __future__ import annotations

INSTALL_HINT = 'llamapy.ray needs Ray Data and Ray Serve: pip install "llamapy-engine[ray]"'

try:
    import ray  # noqa: F401
    import ray.data  # noqa: F401
except ImportError as _e:  # the message names the extra that brings it
    raise ImportError(f"{INSTALL_HINT} ({_e})") from _e

from .batch import Captioner, Completer, Embedder, Reranker, caption, complete, embed, rerank  # noqa: E402


def serve_app(*args, **kwargs):
    """See ``llamapy.ray.serve.serve_app`` (imported on first use: Ray Serve and FastAPI
    load only for serving)."""
    from .serve import serve_app as build

    return build(*args, **kwargs)


__all__ = ["Embedder", "Completer", "Captioner", "Reranker", "embed", "complete", "caption", "rerank", "serve_app"]
