"""Reranking: ``Llama.rerank(query, documents, top_n=)`` as llama-server's ``/v1/rerank``
scores documents.

A reranker is a model with a classifier head (``cls.output``: the BERT / XLM-RoBERTa
cross-encoders of the bge-reranker family, or Qwen3-Reranker's "yes" / "no" rows of its LM
head), run with pooling "rank" (``Llama(..., embedding=True, pooling_type=4)``,
llama-server's ``--reranking``). Each (query, document) pair is one prompt, laid out as
llama-server's ``format_prompt_rerank`` lays it out: the model's ``rerank`` chat template
with ``{query}`` and ``{document}`` filled in when the GGUF has one (Qwen3-Reranker),
else BOS? query EOS? SEP? document EOS? by the vocabulary's add_bos / add_eos / add_sep
flags. The engine pools each prompt (its first token, or the last for a causal model) and
runs the classifier; the relevance score is its first output (for Qwen3-Reranker
P("yes")), as llama-server reports it.

Not here: the classifier head (the engine, ``vendor/engine/model/classifier.cpp``), packing
prompts into batches (``_embedding.py``), the HTTP route (``server/rerank_routes.py``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

from . import _embedding

POOLING_RANK = 4
TEMPLATE_KEY = "tokenizer.chat_template.rerank"


def check_reranker(llama: Any) -> None:
    """ValueError unless ``llama`` can rerank: a classifier head, and a context that pools by rank."""
    model = llama.model
    if model is None:
        raise ValueError("rerank: the model was loaded with vocab_only=True (no context)")
    if not bool(model.has_classifier):
        raise ValueError(f"rerank: {llama.model_path} is not a reranker: it has no classifier head "
                         "(tensor cls.output.weight); use a cross-encoder such as bge-reranker or Qwen3-Reranker")
    if not llama.context_params.embeddings or llama.pooling_type() != POOLING_RANK:
        raise ValueError("rerank: create the Llama with embedding=True and "
                         "pooling_type=LLAMA_POOLING_TYPE_RANK (4), as llama-server's --reranking does")


def prompt_tokens(llama: Any, query: str, document: str) -> List[int]:
    """The tokens of one (query, document) prompt, as llama-server builds them."""
    template = llama.metadata.get(TEMPLATE_KEY)
    if template:
        text = template.replace("{query}", query).replace("{document}", document)
        return llama.tokenize(text.encode("utf-8"), add_bos=False, special=True)
    vocab = llama.tokenizer_.native
    eos = int(vocab.eos)
    if eos < 0:
        eos = int(vocab.sep)
    out: List[int] = []
    if vocab.add_bos:
        out.append(int(vocab.bos))
    out += llama.tokenize(query.encode("utf-8"), add_bos=False, special=False)
    if vocab.add_eos:
        out.append(eos)
    if vocab.add_sep:
        out.append(int(vocab.sep))
    out += llama.tokenize(document.encode("utf-8"), add_bos=False, special=False)
    if vocab.add_eos:
        out.append(eos)
    return out


def _check_inputs(query: Any, documents: Any, top_n: Any) -> List[str]:
    if not isinstance(query, str):
        raise TypeError("rerank: query must be a str")
    if isinstance(documents, str) or not isinstance(documents, (list, tuple)):
        raise TypeError("rerank: documents must be a list of str")
    if not documents:
        raise ValueError("rerank: documents is empty")
    for i, d in enumerate(documents):
        if not isinstance(d, str):
            raise TypeError(f"rerank: documents[{i}] must be a str, not {type(d).__name__}")
    if top_n is not None and (isinstance(top_n, bool) or not isinstance(top_n, int) or top_n < 0):
        raise ValueError(f"rerank: top_n must be an int >= 0, got {top_n!r}")
    return list(documents)


def scores(llama: Any, token_lists: Sequence[Sequence[int]]) -> List[List[float]]:
    """The classifier's outputs (n_cls_out each) of tokenized prompts, packed into batches."""
    ctx = llama._require_ctx()
    n_batch = int(llama.n_batch)
    n_pos = int(llama.model.n_pos_embd)
    for i, toks in enumerate(token_lists):
        if not toks:
            raise ValueError(f"rerank: prompt {i} has no tokens")
        if len(toks) > n_batch:
            raise ValueError(f"rerank: document {i}'s prompt has {len(toks)} tokens, more than the batch size "
                             f"n_batch={n_batch}")
        if n_pos > 0 and len(toks) > n_pos:
            raise ValueError(f"rerank: document {i}'s prompt has {len(toks)} tokens, more than the model's "
                             f"{n_pos} positions")
    parts = _embedding._each_batch(
        llama, ctx, token_lists,
        lambda c, m: _embedding._decode_batch(c, token_lists, m, pooled=True, normalize=False))
    return [row for part in parts for row in part]


def rerank(llama: Any, query: str, documents: Sequence[str], top_n: Optional[int] = None,
           return_documents: bool = False, return_count: bool = False) -> Any:
    """See ``Llama.rerank``."""
    docs = _check_inputs(query, documents, top_n)
    check_reranker(llama)
    token_lists = [prompt_tokens(llama, query, d) for d in docs]
    rows = scores(llama, token_lists)
    results: List[Dict[str, Any]] = []
    for i, row in enumerate(rows):
        r: Dict[str, Any] = {"index": i, "relevance_score": float(row[0])}
        if return_documents:
            r["document"] = {"text": docs[i]}
        results.append(r)
    results.sort(key=lambda r: -r["relevance_score"])  # stable: ties keep the documents' order
    if top_n is not None:
        results = results[:top_n]
    if return_count:
        return results, sum(len(t) for t in token_lists)
    return results
