"""llama-server's rerank routes, ``POST /v1/rerank`` (also ``/rerank``, ``/v1/reranking``,
``/reranking``), in the Jina / Cohere shape: ``{"model", "query", "documents", "top_n",
"return_documents"}`` in, ``{"model", "object": "list", "usage", "results": [{"index",
"relevance_score", "document"?}]}`` out, best first.

Hugging Face Text Embeddings Inference's form too, as llama-server takes it: a body with
``texts`` instead of ``documents`` (and ``return_text``) is answered with TEI's bare list,
``[{"index", "score", "text"?}]``, best first.

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
    documents: Optional[List[Union[str, Dict[str, Any]]]] = None
    texts: Optional[List[Union[str, Dict[str, Any]]]] = None  # TEI's name for the documents
    model: Optional[str] = None
    top_n: Optional[int] = None
    return_documents: bool = False
    return_text: bool = False  # TEI: each result carries its text
    raw_scores: Optional[bool] = None  # TEI: the scores are the model's own either way (as llama-server's)
    truncate: Optional[bool] = None  # TEI: never truncated here; a prompt over the limit is a 400


def _texts(documents: Optional[List[Union[str, Dict[str, Any]]]], field: str) -> List[str]:
    if not documents:
        raise bad_request(f"{field}: must be a non-empty array of strings")
    out = []
    for i, d in enumerate(documents):
        if isinstance(d, dict):
            d = d.get("text")
        if not isinstance(d, str):
            raise bad_request(f"{field}[{i}]: must be a string or an object with a \"text\" string")
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
    tei = body.texts is not None
    if tei and body.documents is not None:
        raise bad_request("texts: give either documents (Jina / Cohere) or texts (TEI), not both")
    docs = _texts(body.texts if tei else body.documents, "texts" if tei else "documents")
    if body.top_n is not None and body.top_n < 0:
        raise bad_request("top_n: must be >= 0")
    if body.truncate:
        raise bad_request("truncate: llamapy never truncates what it is given; send shorter texts")
    out = await state.run_job(work.rerank_work(body.query, docs, body.top_n, body.return_documents and not tei,
                                               body.model or state.model_name))
    if not tei:
        return out
    return [dict({"index": r["index"], "score": r["relevance_score"]}, **({"text": docs[r["index"]]}
                 if body.return_text else {})) for r in out["results"]]
