"""Read importance matrix files (llama-imatrix's output) for ``quantize --imatrix``.

Two formats, as llama-quantize reads them:
- GGUF (``general.type`` "imatrix"): per weight ``NAME.in_sum2`` (F32, the
  summed squared activations, ``ne0`` values per expert) and ``NAME.counts``
  (F32, tokens seen per expert), with ``imatrix.datasets``,
  ``imatrix.chunk_count`` and ``imatrix.chunk_size``. The importance of a
  column is in_sum2 / count (1 where the count is 0).
- legacy ``.dat``: i32 entry count; per entry i32 name length, name, i32
  ncall, i32 value count, f32 values (already averaged, times ncall); then,
  optionally, i32 chunk count, i32 dataset name length and the name. The
  importance is value / ncall.

Computing one (``python -m llamapy imatrix``, llama-imatrix's statistics) and
writing the GGUF file: below, after the readers; the statistics come from a
hook in the engine (vendor/engine/imatrix.h).

Not here: using it (the weighted quantizers in the engine, ``quantize_gguf.py``).
"""
from __future__ import annotations

import logging
import math
import os
import struct
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Union

import numpy as np

from . import _logprobs as lp
from .gguf_file import GGUFError, GGUFFile
from .perplexity import DEFAULT_CTX, MIN_CTX, chunk_count, open_chunked_model, read_text_file, tokenize_text

__all__ = ["ImportanceMatrix", "load_imatrix", "read_imatrix", "compute_imatrix", "write_imatrix", "ImatrixResult"]

_GGUF_MAGIC = b"GGUF"
logger = logging.getLogger("llamapy.imatrix")


@dataclass
class ImportanceMatrix:
    path: str
    values: Dict[str, np.ndarray]    # weight name -> float32 (n_expert * ne0,) column importances
    datasets: List[str] = field(default_factory=list)
    chunk_count: int = 0
    legacy: bool = False

    def select(self, include: Sequence[str] = (), exclude: Sequence[str] = ()) -> "ImportanceMatrix":
        """llama-quantize's --exclude-weights / --include-weights: drop the
        entries whose name contains an excluded string, then keep only those
        containing an included one."""
        if include and exclude:
            raise ValueError("--include-weights and --exclude-weights cannot be used together")
        values = {k: v for k, v in self.values.items() if not any(s in k for s in exclude)}
        if include:
            values = {k: v for k, v in values.items() if any(s in k for s in include)}
        return ImportanceMatrix(self.path, values, list(self.datasets), self.chunk_count, self.legacy)


def load_imatrix(path: Union[str, "os.PathLike[str]"]) -> ImportanceMatrix:
    """Read an importance matrix in either format. Raises ValueError naming
    what is wrong with a malformed file, FileNotFoundError for a missing one."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    m = _load_gguf(path) if magic == _GGUF_MAGIC else _load_legacy(path)
    if not m.values:
        raise ValueError(f"importance matrix {path}: no entries")
    for name, v in m.values.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"importance matrix {path}: non-finite values for {name}")
    return m


def _load_gguf(path: str) -> ImportanceMatrix:
    try:
        f = GGUFFile(path)
    except GGUFError as e:
        raise ValueError(f"importance matrix {path}: {e}") from None
    with f:
        md = f.metadata
        if not all(k in md for k in ("imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size")):
            raise ValueError(f"importance matrix {path}: missing imatrix metadata (imatrix.datasets, "
                             "imatrix.chunk_count, imatrix.chunk_size)")
        sums, counts = _gguf_tables(f, path)
        values = {}
        for name in sorted(set(sums) | set(counts)):
            if name not in sums or name not in counts:
                raise ValueError(f"importance matrix {path}: mismatched sums and counts for {name}")
            c = counts[name]
            c = (np.sign(c) * np.floor(np.abs(c) + 0.5)).astype(np.float32)  # lround, as llama.cpp
            s = sums[name]
            if len(c) == 0 or len(s) % len(c):
                raise ValueError(f"importance matrix {path}: {len(s)} sums for {len(c)} counts in {name}")
            s = s.reshape(len(c), -1)
            out = np.ones_like(s)
            seen = c > 0
            out[seen] = s[seen] / c[seen, None]
            values[name] = out.reshape(-1)
        datasets = [str(d) for d in md["imatrix.datasets"]] if not isinstance(md["imatrix.datasets"], str) else \
            [md["imatrix.datasets"]]
        return ImportanceMatrix(path, values, datasets, int(md["imatrix.chunk_count"]))


def _gguf_tables(f: GGUFFile, path: str):
    """{name: flat float32 sums}, {name: flat float32 counts} of a GGUF imatrix."""
    sums, counts = {}, {}
    for t in f.tensors:
        for suffix, table in ((".in_sum2", sums), (".counts", counts)):
            if t.name.endswith(suffix) and len(t.name) > len(suffix):
                if t.type_name != "F32":
                    raise ValueError(f"importance matrix {path}: {t.name} must be F32, not {t.type_name}")
                table[t.name[: -len(suffix)]] = np.array(f.tensor(t.name), dtype=np.float32).reshape(-1)
    return sums, counts


class _Reader:
    def __init__(self, data: bytes, path: str) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise ValueError(f"importance matrix {self.path}: truncated at byte {self.pos} ({what})")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i32(self, what: str) -> int:
        return struct.unpack("<i", self.take(4, what))[0]


def _load_legacy(path: str) -> ImportanceMatrix:
    with open(path, "rb") as f:
        r = _Reader(f.read(), path)
    n_entries = r.i32("entry count")
    if n_entries < 1:
        raise ValueError(f"importance matrix {path}: not a GGUF file nor a legacy imatrix (entry count {n_entries})")
    values: Dict[str, np.ndarray] = {}
    for i in range(n_entries):
        name = r.take(r.i32("name length"), f"name of entry {i}").split(b"\0", 1)[0].decode("utf-8", "replace")
        ncall = r.i32(f"ncall of entry {i}")
        nval = r.i32(f"value count of entry {i}")
        if nval < 1:
            raise ValueError(f"importance matrix {path}: entry {i} ({name}) has {nval} values")
        v = np.frombuffer(r.take(4 * nval, f"values of entry {i}"), dtype="<f4").astype(np.float32)
        values[name] = v / np.float32(ncall) if ncall > 0 else v
    chunk_count, datasets = 0, []
    if r.pos < len(r.data):  # optional trailer: chunk count and dataset name
        try:
            chunk_count = r.i32("chunk count")
            n = r.i32("dataset name length")
            if n > 0:
                datasets.append(r.take(n, "dataset name").split(b"\0", 1)[0].decode("utf-8", "replace"))
        except ValueError:
            pass
    return ImportanceMatrix(path, values, datasets, chunk_count, legacy=True)


# ---- computing one: python -m llamapy imatrix ------------------------------------------------
#
# The text is cut as llama-perplexity cuts it (llamapy.perplexity: chunks of n_ctx, BOS in place
# of each chunk's first token when the vocabulary adds it, n_batch // n_ctx chunks side by side);
# every row is an output, as in llama-imatrix, so that every token passes through every layer.
# The engine sums, for every layer's weight matrix, the squared inputs of each column and counts
# the rows (products over fewer than 16 rows are left out as there). The perplexity of the second
# halves comes along, as llama-imatrix prints it. The file: general.type "imatrix",
# imatrix.datasets [the text file's name], imatrix.chunk_count (u32, the most chunks any matrix
# saw), imatrix.chunk_size (u32, n_ctx); per matrix name in sorted order <name>.in_sum2 (F32
# [n_cols] or [n_cols, n_expert]) and <name>.counts (F32 [1] or [1, n_expert]).
# Not here: llama-imatrix's --in-file merging, --process-output, the legacy .dat output,
# --show-statistics; GPU layers (the hook reads host memory).

@dataclass
class ImatrixEntry:
    name: str               # the weight's GGUF name
    sums: np.ndarray        # (n_mat, n_cols) float32 sums of squared inputs
    counts: np.ndarray      # (n_mat,) rows summed


@dataclass
class ImatrixResult:
    entries: List[ImatrixEntry]
    n_ctx: int
    n_chunk: int
    chunk_count: int        # the file's imatrix.chunk_count
    ppl: float              # of the chunks' second halves, as llama-imatrix prints it
    ppl_unc: float
    chunk_ppl: List[float] = field(default_factory=list)
    seconds: float = 0.0


# progress(chunks_done, n_chunk, running_ppl, seconds_left)
Progress = Callable[[int, int, float, float], None]


def compute_imatrix(model_path: str, text: Union[str, bytes], *, n_ctx: Optional[int] = None, n_chunks: int = -1,
                    n_batch: int = 2048, n_threads: Optional[int] = None, progress: Optional[Progress] = None,
                    **llama_kwargs) -> ImatrixResult:
    """The importance matrix of the model at `model_path` over `text`
    (n_ctx default 512). ValueError for a text shorter than 2 * n_ctx tokens."""
    n_ctx = DEFAULT_CTX if n_ctx is None else n_ctx
    if n_ctx < MIN_CTX:
        raise ValueError(f"n_ctx must be at least {MIN_CTX}, got {n_ctx}")
    llm, n_seq = open_chunked_model(model_path, n_ctx, n_batch, n_threads, 0, llama_kwargs)
    try:
        tokens = tokenize_text(llm, text)
        n_chunk = chunk_count(len(tokens), n_ctx, n_chunks, "to compute an importance matrix")
        logger.info("computing over %d chunks, n_ctx=%d, batch_size=%d, n_seq=%d", n_chunk, n_ctx, n_batch, n_seq)
        ctx = llm._ctx
        ctx.set_imatrix(True)
        try:
            return _run(llm, tokens, n_ctx, n_chunk, n_seq, progress)
        finally:
            ctx.set_imatrix(False)
    finally:
        llm.close()


def _run(llm, tokens, n_ctx, n_chunk, n_seq, progress) -> ImatrixResult:
    ctx, first = llm._ctx, n_ctx // 2
    bos = int(llm.token_bos()) if llm.tokenizer_.add_bos else None
    # Rows per decode: whole micro-batches, so the logits of every row (all are
    # outputs) take n_ubatch x n_vocab floats rather than n_batch x n_vocab.
    step = max(int(ctx.n_ubatch), 1)
    t0, nll, nll2, count, running = time.perf_counter(), 0.0, 0.0, 0, []
    for c0 in range(0, n_chunk, n_seq):
        k = min(n_seq, n_chunk - c0)
        toks = tokens[c0 * n_ctx:(c0 + k) * n_ctx].copy()
        if bos is not None:
            toks[::n_ctx] = bos
        pos = np.tile(np.arange(n_ctx, dtype=np.int32), k)
        seq = np.repeat(np.arange(k, dtype=np.int32), n_ctx)
        ctx.kv_clear()
        for r0 in range(0, k * n_ctx, step):
            r1 = min(k * n_ctx, r0 + step)
            ctx.decode(tokens=toks[r0:r1], pos=pos[r0:r1], seq_ids=seq[r0:r1], logits=np.ones(r1 - r0, dtype=bool))
            # The scored rows among these: second half of a chunk, not its last position.
            rows = np.nonzero((pos[r0:r1] >= first) & (pos[r0:r1] < n_ctx - 1))[0]
            if len(rows):
                out = ctx.get_logits_all()
                targets = tokens[c0 * n_ctx + r0 + rows + 1]
                # contiguous runs of rows, so the engine reads the logits view in place
                for run in np.split(np.arange(len(rows)), np.nonzero(np.diff(rows) != 1)[0] + 1):
                    v = lp.nll(out[rows[run[0]]:rows[run[-1]] + 1], targets[run], llm.n_threads_batch)
                    nll += float(v.sum())
                    nll2 += float((v * v).sum())
                # a view still alive at the next decode makes the context write a fresh buffer
                del out
                count += len(rows)
        for s in range(k):
            running.append(math.exp(nll / count))
            if progress is not None:
                done = c0 + s + 1
                spent = time.perf_counter() - t0
                progress(done, n_chunk, running[-1], spent / (c0 + k) * (n_chunk - c0 - k))
    raw = ctx.imatrix()
    entries = [ImatrixEntry(e["name"], np.asarray(e["sums"], dtype=np.float32), np.asarray(e["counts"]))
               for e in raw]
    chunk_count = max((int(e.counts.max()) // n_ctx for e in entries if e.counts.size), default=0)
    mean, var = nll / count, nll2 / count - (nll / count) ** 2
    ppl = math.exp(mean)
    return ImatrixResult(entries, n_ctx, n_chunk, chunk_count, ppl,
                         ppl * math.sqrt(var / (count - 1)) if var > 0 else 0.0, running,
                         time.perf_counter() - t0)


# ---- the GGUF file ---------------------------------------------------------------------------

_GGUF_VERSION = 3
_ALIGN = 32
_T_UINT32, _T_STRING, _T_ARRAY = 4, 8, 9
_GGML_F32 = 0


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _pad(n: int) -> int:
    return -n % _ALIGN


def write_imatrix(path: str, result: ImatrixResult, datasets: List[str]) -> None:
    """llama-imatrix's GGUF file of `result` (written under a temporary name
    and renamed at the end)."""
    kv = [_str("general.type") + struct.pack("<I", _T_STRING) + _str("imatrix"),
          _str("imatrix.datasets") + struct.pack("<IIQ", _T_ARRAY, _T_STRING, len(datasets))
          + b"".join(_str(d) for d in datasets),
          _str("imatrix.chunk_count") + struct.pack("<II", _T_UINT32, result.chunk_count),
          _str("imatrix.chunk_size") + struct.pack("<II", _T_UINT32, result.n_ctx)]
    tensors = []  # (name, ne, float32 data)
    for e in sorted(result.entries, key=lambda e: e.name):
        n_mat, n_cols = e.sums.shape
        # ggml drops trailing dimensions of 1 when it writes a tensor's shape
        tensors.append((e.name + ".in_sum2", [n_cols] if n_mat == 1 else [n_cols, n_mat],
                        np.ascontiguousarray(e.sums, dtype="<f4")))
        tensors.append((e.name + ".counts", [1] if n_mat == 1 else [1, n_mat], e.counts.astype("<f4")))
    infos, offset = [], 0
    for name, ne, data in tensors:
        infos.append(_str(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
                     + struct.pack("<IQ", _GGML_F32, offset))
        offset += data.nbytes + _pad(data.nbytes)
    head = b"GGUF" + struct.pack("<IQQ", _GGUF_VERSION, len(tensors), len(kv)) + b"".join(kv) + b"".join(infos)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(head + b"\0" * _pad(len(head)))
            for _, _, data in tensors:
                f.write(data.tobytes() + b"\0" * _pad(data.nbytes))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_imatrix(path: str) -> dict:
    """A GGUF importance matrix (ours or llama-imatrix's) as written, not
    averaged: {'chunk_count', 'chunk_size', 'datasets', 'entries': {name:
    (sums (n_mat, n_cols), counts (n_mat,))}}; ValueError for a file that is
    not one."""
    with GGUFFile(path) as f:
        if f.metadata.get("general.type") != "imatrix":
            raise ValueError(f"{path} is not an importance-matrix file (general.type is "
                             f"{f.metadata.get('general.type')!r}, not 'imatrix')")
        sums, counts = _gguf_tables(f, path)
        if set(sums) != set(counts):
            raise ValueError(f"importance matrix {path}: mismatched sums and counts")
        entries = {n: (sums[n].reshape(len(counts[n]), -1), counts[n]) for n in sorted(sums)}
        return {"chunk_count": int(f.metadata.get("imatrix.chunk_count", 0)),
                "chunk_size": int(f.metadata.get("imatrix.chunk_size", 0)),
                "datasets": list(f.metadata.get("imatrix.datasets", [])), "entries": entries}


def run_cli(args, model_path: str) -> int:
    """``python -m llamapy imatrix``: llama-imatrix's running perplexity on
    stdout, timing on stderr, the file at -o."""
    import sys

    out, err = sys.stdout, sys.stderr
    first = [True]

    def progress(done: int, n_chunk: int, ppl: float, left: float) -> None:
        if first[0]:
            first[0] = False
            print(f"imatrix: ETA {left / 60:.2f} minutes", file=err, flush=True)
        print(f"[{done}]{ppl:.4f},", end="", file=out, flush=True)

    res = compute_imatrix(model_path, read_text_file(args.file), n_ctx=args.ctx_size, n_chunks=args.chunks,
                          n_batch=args.batch_size, n_threads=args.threads or None, progress=progress)
    print(f"\nFinal estimate: PPL = {res.ppl:.4f} +/- {res.ppl_unc:.5f}", file=out)
    write_imatrix(args.output, res, [args.file])
    print(f"imatrix: {len(res.entries)} matrices over {res.n_chunk} chunks of {res.n_ctx} tokens in "
          f"{res.seconds:.2f} s; wrote {args.output}", file=err)
    return 0
