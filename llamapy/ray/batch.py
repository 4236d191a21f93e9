"""Batch inference on Ray Data: callable classes for ``Dataset.map_batches`` with an actor
pool, and the one-call helpers that use them.

Each actor loads one ``Llama`` once, in ``__init__``, and answers many batches. Its thread
counts (``n_threads`` and ``n_threads_batch``) are the CPUs Ray gave the actor (``num_cpus``),
so actors on one node do not fight over cores; the model file is memory-mapped, so the actors of a node share its pages (the
kernel's page cache) instead of each reading a private copy.

A batch is a pandas DataFrame (the Embedder's an Arrow table: ``batch_format``); the result is
the same table (every input column kept, so rows can be matched) plus the output columns and
``error``: None for a row that worked,
else the reason ("ValueError: ..."), with the outputs of that row None. A bad row never
fails the job. Each row's result is what the same ``Llama`` call gives for that row alone
in one process (``row_*`` below are those calls; tests/test_ray_data.py holds the two
against each other).

Not here: reading and writing files (``jobs.py``), serving (``serve.py``).
"""
from __future__ import annotations

import base64
import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

logger = logging.getLogger("llamapy.ray")

POOLING_NONE, POOLING_RANK = 0, 4  # llama.cpp's LLAMA_POOLING_TYPE_NONE / _RANK (llamapy.llama_cpp)


def actor_threads() -> int:
    """Threads for this process's Llama: the CPUs Ray assigned to it (an actor's or task's
    ``num_cpus``, rounded down, at least 1); 1 outside Ray."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU", 0) if ray.is_initialized() else 0
    except Exception:  # noqa: BLE001 - no runtime context: not inside Ray
        cpus = 0
    return max(1, int(cpus))


def plain(value: Any) -> Any:
    """A cell as plain Python: Arrow list and struct columns reach pandas as numpy arrays
    of dicts whose values may be arrays again (a chat's ``messages``, its ``content``
    parts); the chat code wants lists and dicts."""
    import numpy as np

    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, np.generic):
        return value.item()
    return value


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


# ----------------------------------------------------------------- one row, one process
def row_embedding(llm: Any, text: Any, normalize: bool = False, truncate: bool = True) -> List[float]:
    if not isinstance(text, str):
        raise TypeError(f"the text is a {type(text).__name__}, not a string")
    return [float(x) for x in llm.embed(text, normalize=normalize, truncate=truncate)]


def row_completion(llm: Any, prompt: Any, params: Dict[str, Any]) -> Dict[str, Any]:
    """A prompt (str) through create_completion, or a chat (a list of messages) through
    create_chat_completion: text, finish_reason and the usage counts."""
    prompt = plain(prompt)
    if isinstance(prompt, str):
        out = llm.create_completion(prompt, **params)
        text = out["choices"][0]["text"]
    elif isinstance(prompt, list) and prompt and all(isinstance(m, dict) for m in prompt):
        out = llm.create_chat_completion(prompt, **params)
        text = out["choices"][0]["message"]["content"]
    else:
        raise TypeError("a prompt is a string or a list of chat messages (dicts with role and content), "
                        f"not {type(prompt).__name__}")
    usage = out["usage"]
    return {"text": text, "finish_reason": out["choices"][0]["finish_reason"],
            "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]}


def image_url(image: Any) -> str:
    """An image cell as a chat image URL: a path or an http(s)/file/data URL as it is;
    bytes as a data: URI (the loader sniffs the format from the bytes themselves)."""
    image = plain(image)
    if isinstance(image, (bytes, bytearray, memoryview)):
        return "data:image/png;base64," + base64.b64encode(bytes(image)).decode("ascii")
    if isinstance(image, str) and image:
        return image
    raise TypeError(f"an image is a path, a URL or bytes, not {type(image).__name__}")


def row_caption(llm: Any, image: Any, prompt: str, params: Dict[str, Any]) -> Dict[str, Any]:
    from ..caption import caption_messages

    out = llm.create_chat_completion(caption_messages(image_url(image), prompt), **params)
    usage = out["usage"]
    return {"caption": out["choices"][0]["message"]["content"], "finish_reason": out["choices"][0]["finish_reason"],
            "prompt_tokens": usage["prompt_tokens"], "completion_tokens": usage["completion_tokens"]}


def row_rerank(llm: Any, query: Any, document: Any) -> float:
    if not isinstance(query, str) or not isinstance(document, str):
        raise TypeError("the query and the document must be strings")
    return float(llm.rerank(query, [document])[0]["relevance_score"])


# ------------------------------------------------------------------------- the actors
class _LlamaActor:
    """One Llama, loaded once per actor; ``__call__`` maps a batch row by row."""

    outputs: Tuple[str, ...] = ()  # the columns a row adds, besides ``error``
    llama_defaults: Dict[str, Any] = {}
    batch_format = "pandas"  # what Ray Data hands __call__ (map_with passes it on)

    def __init__(self, model: str, llama_kwargs: Optional[Dict[str, Any]] = None) -> None:
        from ..llama import Llama

        kw: Dict[str, Any] = {"n_threads": actor_threads(), "use_mmap": True, "verbose": False,
                              **self.llama_defaults, **(llama_kwargs or {})}
        # Batches (embeddings, prompts) run on n_threads_batch, which otherwise defaults to
        # every physical core: an actor of 1 CPU then ran 2 threads on a 2-core machine,
        # beside Ray's own processes (and two such actors 4 threads on 2 cores).
        kw.setdefault("n_threads_batch", kw["n_threads"])
        self.llm = Llama(model_path=model, **kw)
        logger.info("loaded %s in a Ray actor, %s threads (%s for batches)", model, kw["n_threads"],
                    kw["n_threads_batch"])

    def row(self, cells: Dict[str, Any]) -> Dict[str, Any]:
        raise NotImplementedError

    def rows(self, records: List[Dict[str, Any]]) -> List[Tuple[Any, Optional[str]]]:
        """(result, None) or (None, error) per row, one row at a time."""
        out: List[Tuple[Any, Optional[str]]] = []
        for cells in records:
            try:
                out.append((self.row(cells), None))
            except Exception as e:  # noqa: BLE001 - the row's answer; the job goes on
                out.append((None, _error_text(e)))
        return out

    def __call__(self, batch: Any) -> Any:
        clash = [name for name in (*self.outputs, "error") if name in batch.columns]
        if clash:
            raise ValueError(f"the input already has column(s) {clash}, which {type(self).__name__} writes; "
                             "rename them, or pick other output names")
        columns: Dict[str, List[Any]] = {name: [] for name in (*self.outputs, "error")}
        for got, err in self.rows(batch.to_dict("records")):
            if err is not None:
                got = {}
            elif len(self.outputs) == 1 and not isinstance(got, dict):
                got = {self.outputs[0]: got}
            for name in self.outputs:
                columns[name].append(got.get(name))
            columns["error"].append(err)
        out = batch.copy(deep=False)
        for name, values in columns.items():
            out[name] = values
        return out


class Embedder(_LlamaActor):
    """``column`` (text) -> ``output_column`` (a list of float32; pooled as the model says,
    L2-normalised with ``normalize``). ``truncate=False`` makes a text over the model's
    limit an error row instead of cutting it.

    Its batches are Arrow tables (``batch_format``; a pandas frame is taken too, outside Ray):
    the input columns pass through untouched, the texts are read as one list, and the vectors
    go from the engine's (rows, n_embd) float32 array into the Arrow column's buffer as they
    are, not as a Python float per number (pandas frames and per-row lists cost an actor ~2 ms
    of CPU per batch of 32 on MiniLM: benchmarks/ray_overhead.py)."""

    llama_defaults = {"embedding": True}
    batch_format = "pyarrow"

    def __init__(self, model: str, column: str = "text", output_column: str = "embedding", normalize: bool = False,
                 truncate: bool = True, llama_kwargs: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(model, llama_kwargs)
        if self.llm.pooling_type() == POOLING_NONE:
            raise ValueError(f"{model}: the embeddings are not pooled (pooling none: a vector per token); the "
                             "Embedder writes one vector per row: pass llama_kwargs={'pooling_type': 1} (mean)")
        self.column, self.outputs = column, (output_column,)
        self.normalize, self.truncate = normalize, truncate

    def row(self, cells: Dict[str, Any]) -> Any:
        return row_embedding(self.llm, cells[self.column], self.normalize, self.truncate)

    def vectors(self, texts: List[str]) -> Any:
        """The texts' vectors in one ``embed`` call's packing (many sequences per decode: ~4x
        the rows per second of one call per row on MiniLM, and the same floats):
        (len(texts), n_embd) float32."""
        from .._embedding import embed_array

        return embed_array(self.llm, texts, normalize=self.normalize, truncate=self.truncate)

    def embed_rows(self, texts: List[Any]) -> Tuple[Any, List[Optional[str]]]:
        """(the vectors of the rows that worked, in order, (n_ok, n_embd) float32; each row's
        error or None). All rows in one call; when a row makes that call fail, row by row, so
        that only the bad rows get an error."""
        import numpy as np

        if texts and all(isinstance(t, str) for t in texts):
            try:
                return self.vectors(texts), [None] * len(texts)
            except Exception:  # noqa: BLE001 - some row is bad: find it below
                pass
        got = self.rows([{self.column: t} for t in texts])
        ok = [np.asarray(v, dtype=np.float32) for v, err in got if err is None]
        vectors = np.stack(ok) if ok else np.zeros((0, self.llm.n_embd()), dtype=np.float32)
        return vectors, [err for _, err in got]

    def __call__(self, batch: Any) -> Any:
        import pyarrow as pa

        if not isinstance(batch, pa.Table):  # a pandas frame (called outside Ray Data)
            batch = pa.Table.from_pandas(batch, preserve_index=False)
        clash = [name for name in (*self.outputs, "error") if name in batch.column_names]
        if clash:
            raise ValueError(f"the input already has column(s) {clash}, which {type(self).__name__} writes; "
                             "rename them, or pick other output names")
        if self.column not in batch.column_names:
            raise ValueError(f"the input has no column {self.column!r} to embed (its columns: {batch.column_names})")
        vectors, errors = self.embed_rows(batch.column(self.column).to_pylist())
        return (batch.append_column(self.outputs[0], float32_lists(vectors, errors))
                .append_column("error", pa.array(errors, type=pa.string())))


def float32_lists(vectors: Any, errors: List[Optional[str]]) -> Any:
    """An Arrow list<float32> column: row i is the next row of ``vectors`` (n_ok, dim), or
    null where ``errors[i]`` is set. Its values buffer is ``vectors``' own memory (no copy,
    no Python floats)."""
    import numpy as np
    import pyarrow as pa

    if vectors.size >= 2**31:  # list<> offsets are int32
        raise ValueError(f"a batch of {vectors.shape[0]} vectors of {vectors.shape[1]} is too large for one Arrow "
                         "list column: use a smaller batch_size")
    failed = np.array([e is not None for e in errors], dtype=bool)
    lengths = np.where(failed, 0, vectors.shape[1])
    offsets = np.zeros(len(errors) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    values = pa.array(np.ascontiguousarray(vectors, dtype=np.float32).reshape(-1))
    return pa.ListArray.from_arrays(pa.array(offsets), values, type=pa.list_(pa.float32()),
                                    mask=pa.array(failed) if failed.any() else None)


# Greedy unless told otherwise, so that a batch job is reproducible.
GREEDY = {"temperature": 0.0, "seed": 0}


class Completer(_LlamaActor):
    """``column``: a prompt (str, ``create_completion``) or a chat (a list of messages,
    ``create_chat_completion``) -> ``text``, ``finish_reason``, ``prompt_tokens``,
    ``completion_tokens``. ``params``: the calls' keywords (max_tokens, temperature, stop,
    ...; greedy by default)."""

    outputs = ("text", "finish_reason", "prompt_tokens", "completion_tokens")

    def __init__(self, model: str, column: str = "prompt", params: Optional[Dict[str, Any]] = None,
                 llama_kwargs: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(model, llama_kwargs)
        self.column, self.params = column, {**GREEDY, **(params or {})}

    def row(self, cells: Dict[str, Any]) -> Any:
        return row_completion(self.llm, cells[self.column], self.params)


class Captioner(_LlamaActor):
    """``column``: an image (a path, an http(s)/file/data URL, or bytes) -> ``caption``,
    ``finish_reason``, ``prompt_tokens``, ``completion_tokens``, by a vision-language model
    and its projector (``mmproj``); one chat turn per image with ``prompt``."""

    outputs = ("caption", "finish_reason", "prompt_tokens", "completion_tokens")

    def __init__(self, model: str, mmproj: str, column: str = "image", prompt: str = "Describe this image.",
                 params: Optional[Dict[str, Any]] = None, llama_kwargs: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(model, {"mmproj": mmproj, **(llama_kwargs or {})})
        self.column, self.prompt = column, prompt
        self.params = {**GREEDY, "max_tokens": 128, **(params or {})}

    def row(self, cells: Dict[str, Any]) -> Any:
        return row_caption(self.llm, cells[self.column], self.prompt, self.params)


class Reranker(_LlamaActor):
    """``query_column`` and ``document_column`` (one pair per row) -> ``score``: the
    relevance a reranker (pooling rank) gives the pair, as ``Llama.rerank`` does."""

    outputs = ("score",)
    llama_defaults = {"embedding": True, "pooling_type": POOLING_RANK}

    def __init__(self, model: str, query_column: str = "query", document_column: str = "document",
                 llama_kwargs: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(model, llama_kwargs)
        self.query_column, self.document_column = query_column, document_column

    def row(self, cells: Dict[str, Any]) -> Any:
        return row_rerank(self.llm, cells[self.query_column], cells[self.document_column])

    def rows(self, records: List[Dict[str, Any]]) -> List[Tuple[Any, Optional[str]]]:
        """The documents of each query in one ``rerank`` call (the same scores as one call per
        pair, several pairs per decode); a query whose call fails, pair by pair."""
        out: List[Tuple[Any, Optional[str]]] = [(None, None)] * len(records)
        by_query: Dict[str, List[int]] = {}
        single: List[int] = []
        for i, cells in enumerate(records):
            q, d = cells[self.query_column], cells[self.document_column]
            if isinstance(q, str) and isinstance(d, str):
                by_query.setdefault(q, []).append(i)
            else:
                single.append(i)
        for query, idx in by_query.items():
            try:
                ranked = self.llm.rerank(query, [records[i][self.document_column] for i in idx])
                for r in ranked:
                    out[idx[r["index"]]] = (float(r["relevance_score"]), None)
            except Exception:  # noqa: BLE001 - some pair is bad: find it below
                single.extend(idx)
        for i, got in zip(single, super().rows([records[i] for i in single])):
            out[i] = got
        return out


# --------------------------------------------------------------------- one-call helpers
def map_with(ds: Any, actor: Callable[..., Any], kwargs: Dict[str, Any], actors: int = 1,
             cpus_per_actor: float = 1.0, batch_size: int = 32, **ray_remote_args: Any) -> Any:
    """``ds.map_batches`` over a pool of ``actors`` actors of ``actor(**kwargs)``, each with
    ``cpus_per_actor`` CPUs (its Llama's threads), batches in the actor's ``batch_format``."""
    import ray.data

    if actors < 1:
        raise ValueError(f"actors must be at least 1, not {actors}")
    if cpus_per_actor <= 0:
        raise ValueError(f"cpus_per_actor must be positive, not {cpus_per_actor}")
    return ds.map_batches(actor, fn_constructor_kwargs=kwargs, compute=ray.data.ActorPoolStrategy(size=actors),
                          num_cpus=cpus_per_actor, batch_size=batch_size,
                          batch_format=getattr(actor, "batch_format", "pandas"), **ray_remote_args)


# Rows per Embedder batch. embed() packs any number of rows into decodes of n_batch tokens, so
# rows per call barely change the engine's work, but each batch is a Ray Data task costing the
# actor ~6 ms of CPU, beside ~4 s of embedding per 1,000 MiniLM rows on 1 thread
# (benchmarks/LOG.md, 2026-12-07 21:40: Ray's work in the actor 1.1-1.2 s per 10,000 rows in
# batches of 32, 0.25 s in batches of 256).
EMBED_BATCH_SIZE = 256


def embed(ds: Any, *, model: str, column: str = "text", output_column: str = "embedding", normalize: bool = False,
          truncate: bool = True, llama_kwargs: Optional[Dict[str, Any]] = None, **pool: Any) -> Any:
    """``ds`` with ``output_column`` (the embedding of ``column``) and ``error``. ``pool``:
    ``actors``, ``cpus_per_actor``, ``batch_size`` (default ``EMBED_BATCH_SIZE``) and Ray's own
    map_batches arguments."""
    pool.setdefault("batch_size", EMBED_BATCH_SIZE)
    return map_with(ds, Embedder, dict(model=model, column=column, output_column=output_column, normalize=normalize,
                                       truncate=truncate, llama_kwargs=llama_kwargs), **pool)


def complete(ds: Any, *, model: str, column: str = "prompt", params: Optional[Dict[str, Any]] = None,
             llama_kwargs: Optional[Dict[str, Any]] = None, **pool: Any) -> Any:
    """``ds`` with ``text``, ``finish_reason``, ``prompt_tokens``, ``completion_tokens`` and
    ``error`` for the prompt or chat in ``column`` (see ``Completer``)."""
    return map_with(ds, Completer, dict(model=model, column=column, params=params, llama_kwargs=llama_kwargs), **pool)


def caption(ds: Any, *, model: str, mmproj: str, column: str = "image", prompt: str = "Describe this image.",
            params: Optional[Dict[str, Any]] = None, llama_kwargs: Optional[Dict[str, Any]] = None, **pool: Any) -> Any:
    """``ds`` with ``caption``, ``finish_reason``, the usage counts and ``error`` for the image
    in ``column`` (see ``Captioner``)."""
    return map_with(ds, Captioner, dict(model=model, mmproj=mmproj, column=column, prompt=prompt, params=params,
                                        llama_kwargs=llama_kwargs), **pool)


def rerank(ds: Any, *, model: str, query_column: str = "query", document_column: str = "document",
           llama_kwargs: Optional[Dict[str, Any]] = None, **pool: Any) -> Any:
    """``ds`` with ``score`` and ``error`` for each (query, document) row (see ``Reranker``)."""
    return map_with(ds, Reranker, dict(model=model, query_column=query_column, document_column=document_column,
                                       llama_kwargs=llama_kwargs), **pool)
