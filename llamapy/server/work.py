"""The functions a slot's thread runs for each kind of request (slots.py).

They call llamapy's own API (create_chat_completion's handlers,
create_completion, create_embedding, tokenize) on the slot's Llama view;
the server has no generation loop of its own. Each job's first item is a
``Meta`` (prompt token count, cached tokens) produced before any
generation, so that a request that cannot fit is refused with 400 before
work and before a stream's headers go out.

Attributes on a work function tell the scheduler how to run it:
``prepare(llama, n_ctx)`` (what needs no slot: the prompt rendered and
tokenized, its fit checked; run before the request waits for a slot, on a
thread of its own, so a long tokenization holds up no other request; it
returns the prompt's tokens, by which the scheduler picks the slot with the
longest cached prefix), ``kind`` ("slot" by default; "call" needs no slot and
no decoding; "exclusive" needs the whole context) and ``task`` (shown by /slots).

A text too long to fit is refused before it is tokenized (tokenizing
megabytes takes seconds): ``check_text_size``.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from .._infill import extra_tokens, fim_tokens, infill_prompt, tokenize_inner
from .errors import APIError
from .runner import Job


@dataclass
class Meta:
    n_prompt: Optional[int]
    cached: Optional[int]


def check_fit(n_prompt: int, max_tokens: Optional[int], n_ctx: int) -> None:
    """400 unless the prompt (and max_tokens, when asked for) fits the context."""
    if n_prompt >= n_ctx:
        raise APIError(400, f"the prompt has {n_prompt} tokens; this server's context holds {n_ctx} "
                            f"(at most {n_ctx - 1} prompt tokens, leaving one to generate)", "context_length_exceeded")
    if max_tokens is not None and max_tokens > 0 and n_prompt + max_tokens > n_ctx:
        raise APIError(400, f"the prompt has {n_prompt} tokens and max_tokens is {max_tokens}: {n_prompt + max_tokens} "
                            f"tokens, over this server's context of {n_ctx}", "context_length_exceeded")


_STRIP_ATTRS = (1 << 7) | (1 << 8)  # llama_token_attr lstrip, rstrip: the token swallows the whitespace beside it
_token_bytes: "weakref.WeakKeyDictionary[Any, Optional[int]]" = weakref.WeakKeyDictionary()  # per tokenizer
_token_bytes_lock = threading.Lock()


def max_token_bytes(llama: Any) -> Optional[int]:
    """The most bytes of input text one token of this model can stand for, or
    None where no such bound holds. In a SentencePiece or byte-level BPE
    vocabulary (tokenizer.ggml.model "llama", "gpt2") with a token for every
    byte, each input byte ends up in the piece of some token, so a text of B
    bytes makes at least B / (the longest piece) tokens. Vocabularies that
    normalise text (WordPiece, Unigram's whitespace merging) or tokens that
    swallow whitespace (Phi-3's specials) can drop input: no bound. Computed
    once per tokenizer (a pass over the vocabulary)."""
    tok = getattr(llama, "tokenizer_", None)
    vocab = getattr(tok, "_vocab", None)
    if vocab is None:
        return None
    with _token_bytes_lock:
        if tok not in _token_bytes:
            _token_bytes[tok] = _longest_piece(vocab)
        return _token_bytes[tok]


def _longest_piece(vocab: Any) -> Optional[int]:
    if vocab.model not in ("llama", "gpt2"):
        return None
    longest, single = 0, set()
    for i in range(int(vocab.n_vocab)):
        if vocab.token_attr(i) & _STRIP_ATTRS:
            return None
        piece = vocab.token_to_piece(i, True)
        longest = max(longest, len(piece))
        if len(piece) == 1:
            single.add(piece)
    return longest if len(single) == 256 else None


def check_text_size(n_bytes: int, n_tokens: int, llama: Any, what: str, limit: str) -> None:
    """400 for a text of ``n_bytes`` that cannot make ``n_tokens`` tokens or
    fewer (``max_token_bytes``), before any work on it; ``limit`` says where
    the token limit comes from."""
    per = max_token_bytes(llama)
    if per is not None and n_bytes > n_tokens * per:
        raise APIError(400, f"{what} is {n_bytes} bytes, more than {n_tokens} tokens can hold: no token of this "
                            f"model stands for more than {per} bytes of text, so {n_tokens} tokens hold at most "
                            f"{n_tokens * per} bytes ({limit})", "context_length_exceeded")


def _prompt_size(text: str, llama: Any, n_ctx: int) -> bytes:
    """The prompt's UTF-8 bytes, refused (400) when they cannot fit the context."""
    data = text.encode("utf-8")
    check_text_size(len(data), n_ctx - 1, llama, "the prompt",
                    f"this server's context holds {n_ctx} tokens, one of them for the answer")
    return data


def _cached(llama: Any, tokens: List[int]) -> int:
    """Prompt tokens the generation will not evaluate again: the cached prefix
    less the last token (Llama.generate re-evaluates it), less what a hybrid
    model's recurrent state cannot be cut back to."""
    if not tokens:
        return 0
    seq = getattr(llama, "_seq", None)
    if seq is not None:
        return seq.reusable_prefix(tokens)
    n = llama.longest_token_prefix(list(llama.eval_tokens), tokens)  # tests' scripted models
    return max(0, min(n, len(tokens) - 1))


def _add_cached(usage: Optional[Dict[str, Any]], meta: Meta) -> Optional[Dict[str, Any]]:
    if usage is not None and meta.cached is not None:
        usage = {**usage, "prompt_tokens_details": {"cached_tokens": meta.cached}}
    return usage


def _context_note(job: Job, n_ctx: int, finish: Any, usage: Optional[Dict[str, Any]]) -> Optional[str]:
    """Why a generation that finished with "length" was cut by the context, if it was."""
    if finish != "length":
        return None
    if job.note:
        return job.note
    if usage and usage.get("total_tokens", 0) >= n_ctx:
        return f"the request reached its context limit of {n_ctx} tokens (prompt + generated)"
    return None


def _mark_finish(obj: Dict[str, Any], job: Job, n_ctx: int, usage: Optional[Dict[str, Any]]) -> None:
    """Adds ``finish_details`` to choices that the context ended (never a silent cut)."""
    for choice in obj.get("choices") or []:
        note = _context_note(job, n_ctx, choice.get("finish_reason"), usage)
        if note:
            choice["finish_details"] = {"type": "context_full", "message": note}


def _with_usage(result: Any, stream: bool, meta: Meta, job: Job, llama: Any) -> Iterator[Any]:
    """The library's response (a dict, or the chunks of a stream) with the
    cached-token count added to its usage, which the job also keeps, and a
    note on choices the context cut. The job also keeps the stop string that
    ended the generation (Anthropic's stop_sequence)."""
    n_ctx = llama.n_ctx()
    if not stream:
        result["usage"] = job.usage = _add_cached(result.get("usage"), meta)
        job.stop_sequence = getattr(llama, "stopped_by", None)
        _mark_finish(result, job, n_ctx, job.usage)
        yield result
        return
    for chunk in result:
        if "usage" in chunk or any(c.get("finish_reason") for c in chunk.get("choices") or []):
            job.stop_sequence = getattr(llama, "stopped_by", None)
            chunk = dict(chunk, choices=[dict(c) for c in chunk.get("choices") or []])
            if "usage" in chunk:
                chunk["usage"] = job.usage = _add_cached(chunk["usage"], meta)
            _mark_finish(chunk, job, n_ctx, chunk.get("usage") or job.usage)
        yield chunk


def _once(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn(llama, ...)``'s value computed once per request (the scheduler prepares the
    request, then the work asks again; every slot's view has the same model)."""
    memo: List[Any] = []

    def get(*args: Any) -> Any:
        if not memo:
            memo.append(fn(*args))
        return memo[0]
    return get


def chat_work(params: Dict[str, Any], template_kwargs: Dict[str, Any]) -> Callable[[Any, Job], Iterator[Any]]:
    def prompt_tokens(llama: Any, n_ctx: int) -> Optional[List[int]]:
        """The rendered prompt's tokens; None for handlers that build it themselves (images)."""
        from ..chat.completion import ChatRequest, FormatHandler, resolve_chat_handler
        from ..multimodal.handlers import MTMDChatHandler

        handler = resolve_chat_handler(llama, tools_requested=bool(params.get("tools")))
        if not isinstance(handler, FormatHandler) or isinstance(handler, MTMDChatHandler):
            return None
        req = ChatRequest(messages=list(params["messages"]), tools=params.get("tools"),
                          tool_choice=params.get("tool_choice"), template_kwargs=dict(template_kwargs))
        mode, _ = req.tool_mode()
        tools = req.tools if mode != "none" else None
        # The rendered text is what must fit (a template may drop parts of the messages).
        _prompt_size(handler.render_text(llama, req, tools), llama, n_ctx)
        return list(handler.prompt(llama, req, tools).tokens)

    prompt_of = _once(prompt_tokens)

    def prepare(llama: Any, n_ctx: int) -> Optional[List[int]]:
        tokens = prompt_of(llama, n_ctx)
        if tokens is not None:
            check_fit(len(tokens), params.get("max_tokens"), n_ctx)
        return tokens

    def work(llama: Any, job: Job) -> Iterator[Any]:
        from ..chat.completion import resolve_chat_handler

        handler = resolve_chat_handler(llama, tools_requested=bool(params.get("tools")))
        meta = Meta(None, None)
        tokens = prepare(llama, llama.n_ctx())
        if tokens is not None:
            meta = Meta(len(tokens), _cached(llama, tokens))
        yield meta
        result = handler(llama=llama, **params, **template_kwargs)
        yield from _with_usage(result, bool(params.get("stream")), meta, job, llama)
    work.prepare = prepare  # type: ignore[attr-defined]
    work.task = "chat"  # type: ignore[attr-defined]
    return work


def completion_work(params: Dict[str, Any]) -> Callable[[Any, Job], Iterator[Any]]:
    def prompt_tokens(llama: Any, n_ctx: int) -> List[int]:
        prompt = params["prompt"]
        return llama.tokenize(_prompt_size(prompt, llama, n_ctx)) if isinstance(prompt, str) else list(prompt)

    return _completion_job(params, prompt_tokens)


def _completion_job(params: Dict[str, Any],
                    prompt_tokens: Callable[[Any, int], List[int]]) -> Callable[[Any, Job], Iterator[Any]]:
    """create_completion(**params) as a job; ``prompt_tokens`` says how many
    tokens its prompt takes (the fit check, the slot's cached prefix)."""
    prompt_of = _once(prompt_tokens)

    def prepare(llama: Any, n_ctx: int) -> List[int]:
        tokens = prompt_of(llama, n_ctx)
        check_fit(len(tokens), params.get("max_tokens"), n_ctx)
        return tokens

    def work(llama: Any, job: Job) -> Iterator[Any]:
        tokens = prepare(llama, llama.n_ctx())
        meta = Meta(len(tokens), _cached(llama, tokens))
        yield meta
        result = llama.create_completion(**params)
        yield from _with_usage(result, bool(params.get("stream")), meta, job, llama)
    work.prepare = prepare  # type: ignore[attr-defined]
    work.task = "completion"  # type: ignore[attr-defined]
    return work


def infill_work(params: Dict[str, Any], parts: Dict[str, Any]) -> Callable[[Any, Job], Iterator[Any]]:
    """A fill-in-the-middle completion (llama-server's /infill): ``parts``
    holds input_prefix, input_suffix, input_extra and prompt (the start of
    the middle), laid out with the model's FIM tokens (llamapy/_infill.py)
    and completed by create_completion as a token prompt. 400 for a model
    without FIM tokens."""
    def prompt_tokens(llama: Any, n_ctx: int) -> List[int]:
        tok = llama.tokenizer_
        fim = fim_tokens(tok)
        if not fim.usable:
            raise APIError(400, "infill is not supported by this model: it has no fill-in-the-middle "
                                + ", ".join(fim.missing()) + " token", "not_supported")
        texts = [parts["input_prefix"], parts["input_suffix"], parts["prompt"]] + \
            [c["text"] + c.get("filename", "") for c in parts["input_extra"]]
        check_text_size(sum(len(t.encode("utf-8")) for t in texts), n_ctx - 1, llama, "the infill request",
                        f"this server's context holds {n_ctx} tokens, one of them for the answer")
        extra = extra_tokens(tok, fim, parts["input_extra"])
        return infill_prompt(tok, fim, tok.tokenize(parts["input_prefix"].encode("utf-8"), add_bos=False,
                                                    special=False),
                             tokenize_inner(tok, parts["input_suffix"]), tokenize_inner(tok, parts["prompt"]),
                             extra=extra, spm=bool(getattr(llama, "spm_infill", False)))

    def laid_out(llama: Any, n_ctx: int) -> List[int]:
        tokens = prompt_tokens(llama, n_ctx)
        params["prompt"] = tokens  # the same list for every slot: the model (so its vocabulary) is shared
        return tokens

    return _completion_job(params, laid_out)


def embedding_work(inputs: Any, model: str, field: str = "input",
                   truncate: bool = False) -> Callable[[Any, Job], Iterator[Any]]:
    """Embeddings of ``inputs``; an input longer than the model takes (``embedding_limit``)
    is a 400 before any work, unless ``truncate`` (Ollama's, asked for explicitly) lets the
    library cut it, as llama-cpp-python does by default."""
    def check_inputs(llama: Any, n_ctx: int) -> None:
        if not truncate:
            check_embedding_inputs(llama, inputs, field)

    prepare = _once(check_inputs)

    def work(llama: Any, job: Job) -> Iterator[Any]:
        prepare(llama, llama.n_ctx())
        yield Meta(None, None)
        yield llama.create_embedding(inputs, model=model)
    work.prepare = prepare  # type: ignore[attr-defined]
    work.kind = "exclusive"  # type: ignore[attr-defined]
    return work


def embedding_limit(llama: Any) -> "Tuple[int, str]":
    """Tokens one embedding input may have, and why: the model's positions
    (its learned position embeddings, else the context it was trained for:
    BERT's 512), and no more than one batch (-b), which holds an input whole.
    The library, by default, cuts longer inputs to fit (llama-cpp-python's
    ``truncate=True``); the server refuses them instead."""
    model = getattr(llama, "model", None)
    positions = int(getattr(model, "n_pos_embd", 0) or 0) or int(getattr(model, "n_ctx_train", 0) or 0)
    n_batch = int(llama.n_batch)
    if positions and positions <= n_batch:
        return positions, f"the model's {positions} positions"
    return n_batch, f"the batch size, -b {n_batch}"


def check_embedding_inputs(llama: Any, inputs: Any, field: str = "input") -> None:
    """400 naming the input, its token count and the limit, for an input over ``embedding_limit``."""
    limit, why = embedding_limit(llama)
    items = [inputs] if isinstance(inputs, str) else list(inputs)
    for i, text in enumerate(items):
        name = field if isinstance(inputs, str) else f"{field}[{i}]"
        data = text.encode("utf-8")
        check_text_size(len(data), limit, llama, name, f"an embedding input's limit is {why}")  # before tokenizing
        n = len(llama.tokenize(data))
        if n > limit:
            raise APIError(400, f"{name} has {n} tokens; an embedding input may have at most {limit} ({why}); "
                                       "shorten it or split it", "context_length_exceeded")


def rerank_work(query: str, documents: List[str], top_n: Optional[int], return_documents: bool,
                model: str) -> Callable[[Any, Job], Iterator[Any]]:
    """``Llama.rerank`` in llama-server's ``/v1/rerank`` response; a model that is no
    reranker is a 501, a prompt over the limit (``embedding_limit``) a 400 naming the
    document, both before any work."""
    from .. import _rerank

    def check(llama: Any, n_ctx: int) -> None:
        try:
            _rerank.check_reranker(llama)
        except ValueError as e:
            raise APIError(501, f"this server does not rerank: {e}; start it with --reranking and a reranker "
                                "model", "not_supported") from None
        limit, why = embedding_limit(llama)
        for name, text in [("query", query)] + [(f"documents[{i}]", d) for i, d in enumerate(documents)]:
            check_text_size(len(text.encode("utf-8")), limit, llama, name, f"a rerank prompt's limit is {why}")
        for i, d in enumerate(documents):
            n = len(_rerank.prompt_tokens(llama, query, d))
            if n > limit:
                raise APIError(400, f"documents[{i}]: the query and this document make a prompt of {n} tokens; "
                                    f"a rerank prompt may have at most {limit} ({why})", "context_length_exceeded")

    prepare = _once(check)

    def work(llama: Any, job: Job) -> Iterator[Any]:
        prepare(llama, llama.n_ctx())
        yield Meta(None, None)
        results, n_tokens = _rerank.rerank(llama, query, documents, top_n=top_n,
                                           return_documents=return_documents, return_count=True)
        yield {"model": model, "object": "list", "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
               "results": results}
    work.prepare = prepare  # type: ignore[attr-defined]
    work.kind = "exclusive"  # type: ignore[attr-defined]
    work.task = "rerank"  # type: ignore[attr-defined]
    return work


def call_work(fn: Callable[[Any], Any]) -> Callable[[Any, Job], Iterator[Any]]:
    """Any short function of the Llama (tokenize, templates), run on the worker."""
    def work(llama: Any, job: Job) -> Iterator[Any]:
        yield Meta(None, None)
        yield fn(llama)
    work.kind = "call"  # type: ignore[attr-defined]
    return work


def render_chat(llama: Any, messages: List[Dict[str, Any]], tools: Any, template_kwargs: Dict[str, Any]) -> str:
    """The chat template's prompt text for ``messages`` (/apply-template)."""
    from ..chat.completion import ChatRequest, FormatHandler, resolve_chat_handler

    handler = resolve_chat_handler(llama, tools_requested=bool(tools))
    if not isinstance(handler, FormatHandler):
        raise NotImplementedError("/apply-template needs a template-based chat handler; this model's "
                                  f"handler is {type(handler).__name__}")
    req = ChatRequest(messages=list(messages), tools=tools, template_kwargs=dict(template_kwargs))
    mode, _ = req.tool_mode()
    return handler.render_text(llama, req, req.tools if mode != "none" else None)
