"""Text completions: turn ``Llama.generate`` into OpenAI ``text_completion``
responses, streamed or whole.

One loop (``_completion_events``) drives generation; the streaming and the
non-streaming APIs only package its events. Stop strings are matched
incrementally (no rescans of the whole text), multi-byte characters are never
split, and log-probabilities are computed natively per token — they do not
need ``logits_all``.
"""
from __future__ import annotations

import logging
import random
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple, Union

import numpy as np

from . import _engine
from ._sampling import SamplingParams
from ._sequence import ContextFull
from ._text import StopMatcher, Utf8Stream, drop_invalid
from ._infill import fim_tokens, infill_prompt, tokenize_inner
from ._log import emit
from ._verbose import print_timings
from .llama_cache import LogitsProcessorList, StoppingCriteriaList, longest_token_prefix
from .multimodal.chunks import ChunkedPrompt

logger = logging.getLogger("llamapy")

# ``llama`` below is a Llama, or anything with its public surface (tokenize, generate,
# n_ctx, tokenizer_, cache, save_state ...) and a ``sequence`` (llamapy/_sequence.py)
# holding the evaluated tokens, logits, seed and lock: this module does not import llama.py.
Llama = Any


@dataclass
class CompletionRequest:
    """One create_completion call's arguments; the sampling options as one SamplingParams."""

    prompt: Union[str, List[int]]
    suffix: Optional[str] = None
    max_tokens: Optional[int] = 16
    logprobs: Optional[int] = None
    echo: bool = False
    stop: Optional[Union[str, List[str]]] = None
    seed: Optional[int] = None
    model: Optional[str] = None
    stopping_criteria: Optional[StoppingCriteriaList] = None
    logits_processor: Optional[LogitsProcessorList] = None
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # A reasoning model's thinking budget (llamapy.chat.reasoning.ThinkingBudget), set by chat handlers
    thinking: Any = None
    # Control tokens whose text the completion shows (a chat format's markers, llama-server's
    # "preserved tokens"); other control tokens detokenize to nothing. Set by chat handlers.
    shown_special: FrozenSet[int] = frozenset()

    @classmethod
    def of(cls, prompt: Any, **kwargs: Any) -> "CompletionRequest":
        """From create_completion's keywords (the sampling ones gathered, checked once)."""
        sampling = SamplingParams.take(kwargs)
        return cls(prompt=prompt, sampling=sampling, **kwargs)


@dataclass
class _Piece:
    """Text released to the caller, with the per-token log-probability
    records of the tokens that produced it (when requested)."""
    text: str
    logprobs: Optional[Dict[str, list]] = None


def _token_text(llama: Llama, token: int) -> str:
    # One token's text on its own: bytes of a character split across tokens
    # are dropped, as llama-cpp-python's logprobs tokens and keys show them.
    return llama.tokenizer_.token_to_piece(token, False).decode("utf-8", errors="ignore")


def _token_text_special(llama: Llama, token: int) -> str:
    return llama.tokenizer_.token_to_piece(token, True).decode("utf-8", errors="ignore")


def _logprob_record(llama: Llama, logits: np.ndarray, token: int, n_top: int, token_str: str,
                    offset: int) -> Dict[str, Any]:
    chosen, top = _engine.logprobs(logits, int(token), int(n_top))
    top_map = {_token_text(llama, i): float(lp) for i, lp in top}
    top_map[token_str] = float(chosen)
    return {"token": token_str, "offset": offset, "logprob": float(chosen), "top": top_map}


def fills_middle(llama: Llama, req: CompletionRequest) -> bool:
    """Whether the request is fill-in-the-middle: a suffix, a text or token
    prompt, and a model with FIM tokens. Without FIM tokens the suffix is
    appended to the returned text (llama-cpp-python's fallback)."""
    return (req.suffix is not None and not isinstance(req.prompt, ChunkedPrompt)
            and fim_tokens(llama.tokenizer_).usable)


def _infill_tokens(llama: Llama, req: CompletionRequest) -> List[int]:
    tok = llama.tokenizer_
    if isinstance(req.prompt, str):
        prefix = tok.tokenize(req.prompt.encode("utf-8"), add_bos=False, special=False)
    else:
        prefix = _prompt_tokens(llama, CompletionRequest(prompt=req.prompt))
    return infill_prompt(tok, fim_tokens(tok), prefix, tokenize_inner(tok, req.suffix or ""),
                         spm=bool(getattr(llama, "spm_infill", False)))


def _prompt_tokens(llama: Llama, req: CompletionRequest) -> List[int]:
    if fills_middle(llama, req):
        return _infill_tokens(llama, req)
    prompt = req.prompt
    if isinstance(prompt, ChunkedPrompt):
        # Text and image chunks (multimodal handlers): image rows are negative placeholder ids.
        for t in prompt.text_tokens():
            if t < 0 or t >= llama.n_vocab():
                raise ValueError(f"prompt token id {t} is outside the vocabulary (0..{llama.n_vocab() - 1})")
        return prompt
    if isinstance(prompt, str):
        toks = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True) if prompt else []
        bos = llama.token_bos()
        if not toks and bos >= 0:
            toks = [bos]
        if bos >= 0 and toks[:2] == [bos, bos]:
            # The prompt wrote the BOS text and the tokenizer added one: a
            # Python warning, as llama-cpp-python gives (users may filter it).
            warnings.warn(f'Detected duplicate leading "{_token_text_special(llama, bos)}" in prompt, this will '
                          "likely reduce response quality, consider removing it...", RuntimeWarning, stacklevel=5)
        return toks
    if isinstance(prompt, (list, tuple, np.ndarray)):
        toks = [int(t) for t in prompt]
        for t in toks:
            if t < 0 or t >= llama.n_vocab():
                raise ValueError(f"prompt token id {t} is outside the vocabulary (0..{llama.n_vocab() - 1})")
        return toks
    raise TypeError("prompt must be a str or a list of token ids")


def _optional_int(name: str, value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer))):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__} {value!r}")


class _BudgetWatch:
    """Counts the tokens of a reply's thinking and, once the budget is
    spent, gives the tokens of the closing marker to append after the last
    sampled one, so that the answer follows (llama-server's reasoning
    budget). Markers are matched as token ids (they are single special or
    added tokens in the models that use them); a closing marker the model has
    begun is completed, not repeated."""

    def __init__(self, llama: Llama, spec: Any) -> None:
        ids = lambda s: llama.tokenize(s.encode("utf-8"), add_bos=False, special=True)  # noqa: E731
        self.open_ids, self.close_ids = ids(spec.open_text), ids(spec.close_text)
        self.limit = int(spec.limit)
        self.state = "thinking" if spec.opened else "before"
        self.n = 0
        self.recent: List[int] = []

    def at_start(self) -> List[int]:
        """The closing marker when the prompt opened the thinking and the budget is 0."""
        if self.state == "thinking" and self.limit == 0:
            self.state = "done"
            return list(self.close_ids)
        return []

    def _ends_with(self, ids: List[int]) -> bool:
        return bool(ids) and self.recent[-len(ids):] == ids

    def _close(self) -> List[int]:
        self.state = "done"
        for k in range(min(len(self.close_ids) - 1, len(self.recent)), 0, -1):
            if self.recent[-k:] == self.close_ids[:k]:
                return self.close_ids[k:]
        return list(self.close_ids)

    def after(self, token: int) -> List[int]:
        """The tokens to append after ``token`` (usually none)."""
        if self.state == "done":
            return []
        self.recent = (self.recent + [token])[-(len(self.open_ids) + len(self.close_ids) + 1):]
        if self.state == "before":
            if self._ends_with(self.open_ids):
                self.state, self.n = "thinking", 0
                return self._close() if self.limit == 0 else []
            return []
        if self._ends_with(self.close_ids):
            self.state = "done"
            return []
        self.n += 1
        return self._close() if self.n >= self.limit else []


def _check_request(req: CompletionRequest) -> List[str]:
    if req.suffix is not None and not isinstance(req.suffix, str):
        raise TypeError("suffix must be a str or None")
    _optional_int("max_tokens", req.max_tokens)
    _optional_int("seed", req.seed)
    if req.logprobs is not None and (not isinstance(req.logprobs, int) or req.logprobs < 0):
        raise ValueError("logprobs must be a non-negative int or None")
    stop = req.stop
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop]
    if not isinstance(stop, (list, tuple)) or not all(isinstance(s, str) for s in stop):
        raise TypeError("stop must be a str or a list of str")
    return list(stop)


def _completion_events(llama: Llama, req: CompletionRequest, prompt_tokens: List[int],
                       offset_base: int) -> Iterator[Any]:
    """Yields _Piece objects, then a final ("done", finish_reason, n_completion_tokens).

    A token's text_offset is ``offset_base`` plus the characters that the
    completion's bytes before it decode to (an unfinished character counts
    once it is complete), whether or not a stop string holds them back."""
    stops = _check_request(req)
    n_ctx = llama.n_ctx()
    max_tokens = req.max_tokens
    if max_tokens is None or max_tokens <= 0:
        max_tokens = n_ctx - len(prompt_tokens)
    max_tokens = min(max_tokens, n_ctx - len(prompt_tokens))

    seq = llama.sequence
    perf = seq.perf  # None on stand-ins for Llama (tests' scripted models)
    if perf is not None:
        perf.reset()  # the timings printed with verbose are this completion's
    if llama.cache is not None:
        try:
            item = llama.cache[prompt_tokens]
            if longest_token_prefix(item.input_ids.tolist(), prompt_tokens) > \
                    longest_token_prefix(seq.evaluated().tolist(), prompt_tokens):
                llama.load_state(item)
                emit(llama.verbose, logging.DEBUG, "Llama._create_completion: cache hit")
        except KeyError:
            emit(llama.verbose, logging.DEBUG, "Llama._create_completion: cache miss")

    if req.seed is not None:
        llama.set_seed(req.seed)
    else:
        llama.set_seed(random.Random(seq.seed).randint(0, 2**32))

    utf8 = Utf8Stream()
    stopper = StopMatcher(stops)
    n_top = req.logprobs
    pending_records: List[Dict[str, Any]] = []
    completion: List[int] = []
    finish = "length"
    is_eog = llama.tokenizer_.is_eog

    budget = _BudgetWatch(llama, req.thinking) if req.thinking is not None else None
    forced = budget.at_start() if budget is not None else []
    if max_tokens > 0:
        gen = llama.generate(prompt_tokens + forced if forced else prompt_tokens, sampling=req.sampling,
                             logits_processor=req.logits_processor)
        try:
            # ``forced``: tokens the thinking budget appends (its closing marker), shown and
            # counted as the reply's own but not sampled (no log-probabilities, no EOG check)
            queue = [(t, False) for t in forced]
            if not queue:
                queue = [(next(gen), True)]
            ended = False
            while not ended:
                appended: List[int] = []
                for token, sampled in queue:
                    if sampled and is_eog(token):
                        finish, ended = "stop", True
                        break
                    completion.append(token)
                    if n_top is not None and sampled:
                        logits = seq.last_logits()
                        tstr = _token_text(llama, token)
                        pending_records.append(_logprob_record(llama, logits, token, n_top, tstr,
                                                               offset_base + utf8.n_chars))
                    # Stops are matched with invalid bytes still marked (they
                    # separate their neighbours, as in byte matching); the marks
                    # are dropped from what is shown.
                    piece = llama.tokenizer_.token_to_piece(token, token in req.shown_special)
                    shown, stopped = stopper.push(utf8.feed_marked(piece))
                    shown = drop_invalid(shown)
                    if shown or (stopped and pending_records):
                        yield _Piece(shown, _records_to_logprobs(pending_records) if n_top is not None else None)
                        pending_records = []
                    if stopped:
                        finish, ended = "stop", True
                        break
                    if sampled and req.stopping_criteria is not None and \
                            req.stopping_criteria(seq.evaluated(), seq.last_logits()):
                        finish, ended = "stop", True
                        break
                    if len(completion) >= max_tokens:
                        ended = True
                        break
                    if sampled and budget is not None:
                        appended = budget.after(token)
                if ended:
                    break
                if forced:  # the prompt carried them: the first sampled token comes next
                    forced, queue = [], [(next(gen), True)]
                elif appended:
                    queue = [(t, False) for t in appended] + [(gen.send(appended), True)]
                else:
                    queue = [(next(gen), True)]
        except ContextFull as e:
            # A shared KV pool ran out (server slots): the answer so far, cut by the context.
            logger.warning("generation ended after %d tokens: %s", len(completion), e)
            finish = "length"
        finally:
            gen.close()
    if llama.verbose and perf is not None:
        print_timings(perf)
    if not stopper.stopped:
        tail, _ = stopper.push(utf8.flush_marked())
        tail = drop_invalid(tail + stopper.flush())
        if tail or pending_records:
            yield _Piece(tail, _records_to_logprobs(pending_records) if n_top is not None else None)

    if llama.cache is not None:
        llama.cache[prompt_tokens + completion] = llama.save_state()
        emit(llama.verbose, logging.DEBUG, "Llama._create_completion: cache saved")
    # Which stop string ended it, if one did (the server's Anthropic stop_sequence reads it)
    llama.stopped_by = stopper.matched if stopper.stopped else None
    yield ("done", finish, len(completion))


def _records_to_logprobs(records: List[Dict[str, Any]]) -> Dict[str, list]:
    return {
        "tokens": [r["token"] for r in records],
        "text_offset": [r["offset"] for r in records],
        "token_logprobs": [r["logprob"] for r in records],
        "top_logprobs": [r["top"] for r in records],
    }


def _prompt_logprob_records(llama: Llama, prompt_tokens: List[int], n_top: int
                            ) -> Tuple[List[Dict[str, Any]], int]:
    """Log-probabilities of the prompt's own tokens (for echo + logprobs):
    evaluates the prompt with logits for every position, records natively.
    Also returns the length of the prompt's decoded text: offsets count the
    characters of the prompt's tokens (after a leading BOS), as in
    llama-cpp-python, which may differ from the prompt string."""
    records: List[Dict[str, Any]] = []
    bos = llama.token_bos()
    utf8 = Utf8Stream()
    prev_logits: List[Optional[np.ndarray]] = [None]
    piece = llama.tokenizer_.token_to_piece

    def on_chunk(n_past: int, chunk: np.ndarray, ctx: Any) -> None:
        for j, tok in enumerate(chunk.tolist()):
            if n_past + j == 0 and tok == bos:
                prev_logits[0] = np.array(ctx.get_logits(j))
                continue
            tstr = _token_text(llama, tok)
            if not records:  # OpenAI (and llama-cpp-python) report null for the first prompt token
                records.append({"token": tstr, "offset": utf8.n_chars, "logprob": None, "top": None})
            else:
                records.append(_logprob_record(llama, prev_logits[0], tok, n_top, tstr, utf8.n_chars))
            utf8.feed_marked(piece(tok, False))
            prev_logits[0] = np.array(ctx.get_logits(j))

    llama.reset()
    llama.sequence.eval(prompt_tokens, all_logits=True, on_chunk=on_chunk)
    return records, utf8.n_chars


def _usage_prompt_tokens(prompt_tokens: List[int]) -> int:
    """usage["prompt_tokens"]: the tokens, or for a multimodal prompt the
    positions it spans (what llama-cpp-python reports; they differ for M-RoPE)."""
    return int(getattr(prompt_tokens, "n_pos", len(prompt_tokens)))


def _header(llama: Llama, req: CompletionRequest) -> Dict[str, Any]:
    return {"id": f"cmpl-{uuid.uuid4()}", "object": "text_completion", "created": int(time.time()),
            "model": req.model if req.model is not None else llama.model_path}


def _validated_prompt(llama: Llama, req: CompletionRequest) -> List[int]:
    """Checks the request and returns the prompt tokens (before any work, so
    errors surface at the call site, streamed or not)."""
    llama.sequence.ensure_usable()
    _check_request(req)
    prompt_tokens = _prompt_tokens(llama, req)
    if isinstance(prompt_tokens, ChunkedPrompt):
        if req.echo and req.logprobs is not None:
            raise ValueError("echo with logprobs is not supported for prompts with images")
        n_img = prompt_tokens.n_image_tokens
        if len(prompt_tokens) >= llama.n_ctx():
            raise ValueError(f"Prompt exceeds n_ctx: {len(prompt_tokens)} > {llama.n_ctx()} "
                             f"({len(prompt_tokens) - n_img} text tokens + {n_img} image tokens, no room to generate)")
    if len(prompt_tokens) >= llama.n_ctx():
        raise ValueError(f"Requested tokens ({len(prompt_tokens)}) exceed context window of {llama.n_ctx()}")
    return prompt_tokens


def _prompt_text(llama: Llama, req: CompletionRequest, prompt_tokens: List[int]) -> str:
    if isinstance(req.prompt, str):
        return req.prompt
    if isinstance(prompt_tokens, ChunkedPrompt):
        return "".join(llama.detokenize(c.tokens).decode("utf-8", errors="ignore")
                       for c in prompt_tokens.chunks if not hasattr(c, "load"))
    return llama.detokenize(prompt_tokens).decode("utf-8", errors="ignore")


def run_completion(llama: Llama, req: CompletionRequest) -> Dict[str, Any]:
    with llama.sequence.lock:
        head = _header(llama, req)
        prompt_tokens = _validated_prompt(llama, req)
        prompt_records = None
        prefix = _prompt_text(llama, req, prompt_tokens)
        offset_base = len(prefix)  # completion offsets count from the prompt's end (llama-cpp-python)
        if req.echo and req.logprobs is not None:
            prompt_records, offset_base = _prompt_logprob_records(llama, prompt_tokens, req.logprobs)
        if not req.echo:
            prefix = ""
        texts: List[str] = []
        recs: Optional[Dict[str, list]] = None
        if req.logprobs is not None:
            recs = {"tokens": [], "text_offset": [], "token_logprobs": [], "top_logprobs": []}
        finish, n_completion = "length", 0
        if recs is not None and prompt_records:
            for k, v in _records_to_logprobs(prompt_records).items():
                recs[k].extend(v)
        for ev in _completion_events(llama, req, prompt_tokens, offset_base):
            if isinstance(ev, tuple):
                _, finish, n_completion = ev
                break
            texts.append(ev.text)
            if recs is not None and ev.logprobs:
                for k, v in ev.logprobs.items():
                    recs[k].extend(v)
        text = prefix + "".join(texts)
        if req.suffix is not None and not fills_middle(llama, req):
            text += req.suffix
        return {**head, "choices": [{"text": text, "index": 0, "logprobs": recs, "finish_reason": finish}],
                "usage": {"prompt_tokens": _usage_prompt_tokens(prompt_tokens), "completion_tokens": n_completion,
                          "total_tokens": len(prompt_tokens) + n_completion}}


def stream_completion(llama: Llama, req: CompletionRequest) -> Iterator[Dict[str, Any]]:
    """Chunks: one per released piece of text, then a last one with the
    finish_reason (and usage, which OpenAI puts on the last chunk)."""
    prompt_tokens = _validated_prompt(llama, req)  # before the first next()

    def chunks() -> Iterator[Dict[str, Any]]:
        head = _header(llama, req)
        prompt_records = None
        prompt_text = _prompt_text(llama, req, prompt_tokens)
        if req.echo and req.logprobs is not None:
            prompt_records, _ = _prompt_logprob_records(llama, prompt_tokens, req.logprobs)
        if req.echo:
            lp = _records_to_logprobs(prompt_records) if prompt_records else None
            yield {**head, "choices": [{"text": prompt_text, "index": 0, "logprobs": lp,
                                        "finish_reason": None}]}
        finish, n_completion = "length", 0
        # Streamed offsets count from the end of the prompt string, echoed or not (llama-cpp-python).
        for ev in _completion_events(llama, req, prompt_tokens, len(prompt_text)):
            if isinstance(ev, tuple):
                _, finish, n_completion = ev
                break
            yield {**head, "choices": [{"text": ev.text, "index": 0, "logprobs": ev.logprobs,
                                        "finish_reason": None}]}
        if req.suffix is not None and not fills_middle(llama, req):
            yield {**head, "choices": [{"text": req.suffix, "index": 0, "logprobs": None,
                                        "finish_reason": None}]}
        yield {**head, "choices": [{"text": "", "index": 0, "logprobs": None, "finish_reason": finish}],
               "usage": {"prompt_tokens": _usage_prompt_tokens(prompt_tokens), "completion_tokens": n_completion,
                         "total_tokens": len(prompt_tokens) + n_completion}}

    return _locked_steps(llama.sequence.lock, chunks())


def _locked_steps(lock: Any, it: Iterator[Any]) -> Iterator[Any]:
    """``it``'s items, each computed holding ``lock`` and handed out without it:
    the stream can be resumed on any thread (Starlette runs a sync generator on
    whichever worker is free), and other users of the sequence wait only while a
    step runs. A user who evaluates in between is noticed by Llama.generate,
    which restores this stream's rows before going on."""
    try:
        while True:
            with lock:
                try:
                    item = next(it)
                except StopIteration:
                    return
            yield item
    finally:
        with lock:
            it.close()

