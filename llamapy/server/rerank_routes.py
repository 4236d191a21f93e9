"""llama-server's rerank routes, ``POST /v1/rerank`` (also ``/rerank``, ``/v1/reranking``,
``/reranking``), in the Jina / Cohere shape: ``{"model", "query", "documents", "top_n",
"return_documents"}`` in, ``{"model", "object": "list", "usage", "results": [{"index",
"relevance_score", "document"?}]}`` out, best first.

Thin over ``Llama.rerank`` (llamapy/_rerank.py), run as exclusive work like embeddings
(work.py ``rerank_work``). The server reranks when started with ``--reranking`` (embeddings
with pooling rank) on a reranker model; otherwise a 501. Documents are strings, or Cohere's
``{"text": ...}`` objects; ``return_documents`` gives each result ``{"text": document}``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from fastapi import APIRouter, Request

from . import work
from .errors import APIError, bad_request
from .openai_routes import _Body, _state

router = APIRouter()


class RerankBody(_Body):
    query: str
    documents: List[Union[str, Dict[str, Any]]]
    model: Optional[str] = None
    top_n: Optional[int] = None
    return_documents: bool = False


def _texts(documents: List[Union[str, Dict[str, Any]]]) -> List[str]:
    if not documents:
        raise bad_request("documents: must be a non-empty array of strings")
    out = []
    for i, d in enumerate(documents):
        if isinstance(d, dict):
            d = d.get("text")
        if not isinstance(d, str):
            raise bad_request(f"documents[{i}]: must be a string or an object with a \"text\" string")
        out.append(d)
    return out


@router.post("/v1/rerank")
@router.post("/rerank")
@router.post("/v1/reranking")
@router.post("/reranking")
async def rerank(body: RerankBody, request: Request) -> Any:
    state = _state(request)
    if not state.settings.embedding:
        raise APIError(501, "this server does not rerank: start it with --reranking (and a reranker model)",
                       "not_supported")
    docs = _texts(body.documents)
    if body.top_n is not None and body.top_n < 0:
        raise bad_request("top_n: must be >= 0")
    return await state.run_job(work.rerank_work(body.query, docs, body.top_n, body.return_documents,
                                                body.model or state.model_name))
