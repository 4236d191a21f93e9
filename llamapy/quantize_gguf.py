"""Quantize a GGUF model file: ``llamapy.quantize_model`` and ``python -m llamapy quantize``.

The counterpart of llama.cpp's llama-quantize: the type of every tensor comes
from ``quant_mix`` (llama.cpp's per-mix and per-architecture rules), the
blocks from the engine's reference quantizers (the ones llama.cpp's quantizer
uses without an importance matrix), and the file is laid out as llama.cpp
lays it out: the input's key/values with ``general.quantization_version`` and
``general.file_type`` set last, the tensors ordered by block then name, data
aligned to 32 bytes. On the test models the output is byte-identical to
llama.cpp's (tests/test_quantize_llama_cpp.py).

The output is written to ``OUT.tmp-XXXX`` beside ``OUT`` and renamed at the
end: an error or Ctrl-C leaves no partial file. Tensors are cut into chunks of
rows quantized on a thread pool; the engine releases the GIL while it works.

With an importance matrix (``imatrix=``, llama-imatrix's GGUF or legacy .dat)
the Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, IQ4_NL, IQ4_XS, IQ3_XXS, IQ3_S,
IQ2_* and IQ1_* tensors are quantized by the engine's importance-weighted
quantizers (llama.cpp's with an imatrix, byte-identical too); Q8_0, MXFP4,
TQ1_0, TQ2_0 and the float types ignore it, as there. That also opens Q2_K_S,
which llama.cpp refuses without one.

Every grid i-quant (IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS, IQ2_S, IQ1_S, IQ1_M) is
written. As in llama.cpp, IQ3_XXS, IQ2_* and IQ1_* tensors need an importance
matrix outside token_embd / output (so the IQ3_XXS, IQ3_XS, IQ2_* and IQ1_*
file types without one are refused where they hold such tensors), and IQ2_XXS,
IQ2_XS and IQ1_S tensors need one even where the file type does not (e.g. a
token_embd given that type: llama.cpp aborts there).

``keep_split``: one output per part of a split input (llama-quantize's
--keep-split), named OUT-0000k-of-0000N.gguf, in the input's tensor order.
"""
from __future__ import annotations

import collections
import functools
import logging
import os
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import IO, Any, Callable, Deque, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _engine
from .gguf_file import GGUFFile
from .gguf_header import KV, align_up, header_bytes
from .imatrix import ImportanceMatrix, load_imatrix
from .quant_mix import (FileType, MixOptions, ModelFacts, TensorPlan, TensorShape, file_type, plan_types,
                        requires_imatrix, weight_order)

logger = logging.getLogger(__name__)

__all__ = ["QuantizeResult", "parse_kv_override", "quantize_model"]

GGML_QNT_VERSION = 2       # general.quantization_version of the current block formats
DEFAULT_ALIGNMENT = 32
_SPLIT_KEYS = ("split.no", "split.count", "split.tensors.count")
_FLOAT_INPUTS = ("F32", "F16", "BF16")
# Types llama.cpp quantizes the same with and without an importance matrix.
_IGNORE_IMATRIX = ("F32", "F16", "BF16", "Q8_0", "MXFP4", "TQ1_0", "TQ2_0")
# Rows quantized per job: about 4 Mi elements (16 MiB of float32), at least one row.
_CHUNK_ELEMENTS = 4 << 20

PathLike = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class QuantizeResult:
    path: str
    file_type: str
    n_tensors: int
    bytes_in: int
    bytes_out: int
    types: Dict[str, str]   # tensor name -> the type written
    paths: List[str] = field(default_factory=list)  # every file written (several with keep_split)


def parse_kv_override(text: str) -> Tuple[str, str, Any]:
    """``KEY=TYPE:VALUE`` (llama-quantize's --override-kv; TYPE is int, float,
    bool or str) -> (key, GGUF type label, value), typed as llama.cpp writes
    them: ints as u32 of the absolute value, floats as f32."""
    key, sep, rest = text.partition("=")
    kind, sep2, value = rest.partition(":")
    if not sep or not sep2 or not key:
        raise ValueError(f"bad --override-kv {text!r}: expected KEY=TYPE:VALUE (TYPE int, float, bool or str)")
    if len(key) > 127:
        raise ValueError(f"bad --override-kv {text!r}: key longer than 127 bytes")
    bad_value = ValueError(f"bad --override-kv {text!r}: {value!r} is not a {kind}")
    if kind == "int":
        try:
            return key, "u32", abs(int(value)) & 0xFFFFFFFF
        except ValueError:
            raise bad_value from None
    if kind == "float":
        try:
            return key, "f32", float(value)
        except ValueError:
            raise bad_value from None
    if kind == "bool":
        if value not in ("true", "false"):
            raise bad_value
        return key, "bool", value == "true"
    if kind == "str":
        if len(value.encode()) > 127:
            raise ValueError(f"bad --override-kv {text!r}: string value longer than 127 bytes")
        return key, "string", value
    raise ValueError(f"bad --override-kv {text!r}: type {kind!r} is not int, float, bool or str")


def _type_name(t: Optional[str], what: str) -> Optional[str]:
    if t is None:
        return None
    name = str(t).strip().upper()
    try:
        info = _engine.type_info(name)
    except ValueError:
        raise ValueError(f"{what}: unknown tensor type {t!r}") from None
    return info["name"]


def _tensor_imatrix(name: str, info: Any, imatrix: Optional[ImportanceMatrix]) -> Optional[np.ndarray]:
    """The importance values for a tensor (None: none), checked as llama.cpp checks them."""
    if imatrix is None:
        return None
    values = imatrix.values.get(name)
    if values is None:
        logger.info("did not find importance matrix weights for %s", name)
        return None
    ne0 = info.ne[0]
    n_mat = info.ne[2] if len(info.ne) > 2 else 1
    if values.size != ne0 * n_mat:
        if name in ("token_embd.weight", "per_layer_token_embd.weight"):
            logger.info("importance matrix size %d differs from %s's %d: not used", values.size, name, ne0 * n_mat)
            return None
        raise ValueError(f"importance matrix size {values.size} is different from tensor size {ne0 * n_mat} for "
                         f"{name}")
    return values


def _check_writable(plans: Sequence[TensorPlan], infos: Mapping[str, Any], ft: FileType,
                    allow_requantize: bool, imatrix: Optional[ImportanceMatrix]) -> None:
    """Refuse, before anything is written, what llama.cpp refuses or the engine cannot do."""
    for p in plans:
        src = infos[p.name].type_name
        if p.type == src:
            continue
        if requires_imatrix(p.name, p.type, ft) and imatrix is None:
            raise ValueError(f"{ft.name} needs an importance matrix: tensor {p.name} would be {p.type} "
                             "(llama.cpp refuses too without one)")
        info = _engine.type_info(p.type)
        if not info["can_quantize"] and not info["can_quantize_weighted"]:
            raise ValueError(f"{ft.name}: tensor {p.name} would be {p.type}, and llamapy cannot quantize to "
                             f"{p.type} yet")
        weights = _tensor_imatrix(p.name, infos[p.name], imatrix)
        if weights is None and not info["can_quantize"] and not requires_imatrix(p.name, p.type, ft):
            # token_embd / output in IQ2_XXS, IQ2_XS or IQ1_S: llama.cpp aborts there
            raise ValueError(f"tensor {p.name} would be {p.type}, which needs importance matrix weights for it")
        if weights is not None:
            if p.type not in _IGNORE_IMATRIX and not _engine.type_info(p.type)["can_quantize_weighted"]:
                raise ValueError(f"tensor {p.name} would be {p.type}: llamapy has no importance-weighted {p.type} "
                                 "quantizer yet")
        elif requires_imatrix(p.name, p.type, ft) and imatrix is not None:
            raise ValueError(f"missing importance matrix for tensor {p.name} in a very low-bit quantization "
                             f"({p.type})")
        if src not in _FLOAT_INPUTS:
            if not allow_requantize:
                raise ValueError(f"tensor {p.name} is already {src}: requantizing from type {src} is disabled "
                                 "(allow it with --allow-requantize; quality suffers)")
            if not _engine.type_info(src)["can_dequantize"]:
                raise ValueError(f"tensor {p.name}: cannot dequantize type {src} to requantize it")


def _metadata(src: GGUFFile, ft: FileType, overrides: Sequence[Tuple[str, str, Any]]) -> List[KV]:
    """The input's key/values as llama.cpp's quantizer writes them: a key set
    again moves to the end (gguf_set_val removes, then appends)."""
    kvs: Dict[str, KV] = {k: (k, src.metadata_type(k), v) for k, v in src.metadata.items()}

    def put(key: str, label: str, value: Any) -> None:
        kvs.pop(key, None)
        kvs[key] = (key, label, value)

    put("general.quantization_version", "u32", GGML_QNT_VERSION)
    put("general.file_type", "u32", ft.ftype)
    for k in _SPLIT_KEYS:
        kvs.pop(k, None)
    for key, label, value in overrides:
        put(key, label, value)
    return list(kvs.values())


def _c_string(text: str) -> str:
    """At most 127 bytes, as llama-quantize's fixed-size override strings."""
    b = text.encode("utf-8")[:127]
    return b.decode("utf-8", "ignore")


def _to_float(raw: np.ndarray, type_name: str, ne0: int) -> np.ndarray:
    """Rows of a tensor as float32 (n_rows, ne0), as llama.cpp converts them."""
    if type_name == "F32":
        return np.ascontiguousarray(raw, dtype=np.float32).reshape(-1, ne0)
    if type_name == "F16":
        return raw.reshape(-1, ne0).astype(np.float32)
    if type_name == "BF16":
        return (raw.reshape(-1, ne0).astype(np.uint32) << 16).view(np.float32)
    return _engine.dequantize(raw, type_name, [raw.shape[0] if raw.ndim > 1 else 1, ne0]).reshape(-1, ne0)


class _Progress:
    """One status line on stderr, rewritten per tensor (one line each where
    stderr is not a terminal)."""

    def __init__(self, n: int, stream: Optional[IO[str]]) -> None:
        self.n, self.stream = n, stream
        self.tty = bool(stream is not None and hasattr(stream, "isatty") and stream.isatty())

    def update(self, i: int, name: str, src: str, dst: str) -> None:
        if self.stream is None:
            return
        width = 30
        done = width * i // max(self.n, 1)
        line = f"[{'#' * done}{'.' * (width - done)}] {i:>4}/{self.n} {name} {src} -> {dst}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line)
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.stream is not None and self.tty:
            self.stream.write("\n")
            self.stream.flush()


def _quantize_rows(raw: np.ndarray, src_type: str, dst_type: str, ne0: int,
                   weights: Optional[np.ndarray] = None) -> List[Callable[[], bytes]]:
    """Jobs that give the tensor's rows in ``dst_type``, one chunk of rows
    each, in order. With ``weights`` (n_expert * ne0 importances) each
    expert's rows use its slice; chunks never cross an expert."""
    rows = raw.reshape(-1, raw.shape[-1]) if raw.ndim > 1 else raw.reshape(1, -1)
    per_chunk = max(1, _CHUNK_ELEMENTS // max(ne0, 1))
    if weights is not None and dst_type in _IGNORE_IMATRIX:
        weights = None
    if weights is None:
        starts = list(range(0, rows.shape[0], per_chunk))
        ends = [min(r0 + per_chunk, rows.shape[0]) for r0 in starts]
        per_mat = rows.shape[0]
    else:
        n_mat = weights.size // ne0
        per_mat = rows.shape[0] // n_mat
        starts, ends = [], []
        for m in range(n_mat):
            for r0 in range(m * per_mat, (m + 1) * per_mat, per_chunk):
                starts.append(r0)
                ends.append(min(r0 + per_chunk, (m + 1) * per_mat))

    def job(r0: int, r1: int) -> bytes:
        x = _to_float(rows[r0:r1], src_type, ne0)
        if weights is None:
            return _engine.quantize_ref(x, dst_type).tobytes()
        m = r0 // per_mat
        return _engine.quantize_weighted(x, dst_type, weights[m * ne0:(m + 1) * ne0]).tobytes()

    return [functools.partial(job, r0, r1) for r0, r1 in zip(starts, ends)]


class _Writer:
    """Writes the tensors' data in file order while their chunks are
    quantized on the pool: chunks of the next tensors start before the
    current one's last chunk is done (at most ``window`` chunks in flight), so
    no thread idles at each tensor's end, and the main thread writes while the
    pool works. Each tensor ends with its padding and a size check."""

    def __init__(self, out: IO[bytes], pool: Optional[ThreadPoolExecutor], n_threads: int, alignment: int,
                 on_tensor: Callable[[int], None]) -> None:
        self.out, self.pool, self.alignment, self.on_tensor = out, pool, alignment, on_tensor
        self.window = 2 * n_threads + 2 if pool is not None else 1
        self.queue: Deque[Tuple[str, Any]] = collections.deque()
        self.written = 0

    def tensor(self, i: int, name: str, size: int, pieces: Sequence[Any]) -> None:
        """Queues a tensor: its pieces (bytes, or jobs giving bytes), then its end."""
        for piece in pieces:
            if callable(piece):
                piece = self.pool.submit(piece) if self.pool is not None else piece()
            self.queue.append(("data", piece))
            self._drain(self.window)
        self.queue.append(("end", (i, name, size)))
        self._drain(self.window)

    def finish(self) -> None:
        self._drain(0)

    def _drain(self, keep: int) -> None:
        while self.queue and (len(self.queue) > keep or self.queue[0][0] == "end"):
            kind, item = self.queue.popleft()
            if kind == "data":
                data = item.result() if isinstance(item, Future) else item
                self.out.write(data)
                self.written += len(data)
                continue
            i, name, size = item
            if self.written != size:
                raise RuntimeError(f"{name}: wrote {self.written} bytes, expected {size}")
            self.out.write(b"\0" * (align_up(size, self.alignment) - size))
            self.written = 0
            self.on_tensor(i)

    def cancel(self) -> None:
        for kind, item in self.queue:
            if kind == "data" and isinstance(item, Future):
                item.cancel()
        self.queue.clear()


def quantize_model(
    input_path: PathLike,
    output_path: PathLike,
    ftype: Union[str, int] = "Q8_0",
    *,
    n_threads: int = 0,
    imatrix: Optional[PathLike] = None,
    include_weights: Sequence[str] = (),
    exclude_weights: Sequence[str] = (),
    output_tensor_type: Optional[str] = None,
    token_embedding_type: Optional[str] = None,
    leave_output_tensor: bool = False,
    pure: bool = False,
    allow_requantize: bool = False,
    tensor_types: Sequence[Tuple[str, str]] = (),
    kv_overrides: Sequence[Union[str, Tuple[str, str, Any]]] = (),
    keep_split: bool = False,
    progress: Union[bool, IO[str]] = False,
) -> QuantizeResult:
    """Quantize the GGUF model at ``input_path`` to ``ftype`` (a llama-quantize
    file type: "Q4_K_M", "Q8_0", "IQ4_XS", "F16", ... or its id) and write
    ``output_path``. The options are llama-quantize's: ``output_tensor_type`` /
    ``token_embedding_type`` (tensor type names), ``leave_output_tensor``,
    ``pure`` (the file type's default type for every weight), ``imatrix`` (an
    importance matrix file) with ``include_weights`` / ``exclude_weights``
    (name substrings of the entries to use / drop),
    ``allow_requantize``, ``tensor_types`` ((regex, type) pairs, first match
    wins: its --tensor-type), ``kv_overrides`` ("KEY=TYPE:VALUE" strings),
    ``keep_split`` (one output per part of a split input, named as
    llama-quantize names them).
    ``n_threads`` <= 0: every CPU. ``progress``: True for a progress line on
    stderr, or a stream. Returns what was written; raises ValueError naming
    what it cannot do (nothing is written then)."""
    if (include_weights or exclude_weights) and imatrix is None:
        raise ValueError("--include-weights / --exclude-weights need --imatrix")
    ft = file_type(ftype)
    overrides = [parse_kv_override(o) if isinstance(o, str) else tuple(o) for o in kv_overrides]
    imat = None
    if imatrix is not None:
        imat = load_imatrix(imatrix).select(include_weights, exclude_weights)
        # what llama-quantize records about the matrix (after the user's overrides, as there)
        overrides.append(("quantize.imatrix.file", "string", _c_string(os.fspath(imatrix))))
        if imat.datasets:
            overrides.append(("quantize.imatrix.dataset", "string", _c_string(imat.datasets[0])))
        overrides.append(("quantize.imatrix.entries_count", "u32", len(imat.values)))
        if imat.chunk_count > 0:
            overrides.append(("quantize.imatrix.chunks_count", "u32", imat.chunk_count))
    opts = MixOptions(output_tensor_type=_type_name(output_tensor_type, "--output-tensor-type"),
                      token_embedding_type=_type_name(token_embedding_type, "--token-embedding-type"),
                      quantize_output_tensor=not leave_output_tensor, pure=pure,
                      tensor_types=tuple((p, _type_name(t, "--tensor-type")) for p, t in tensor_types),
                      has_imatrix=bool(imat is not None and imat.values))
    output_path = os.fspath(output_path)
    n_threads = n_threads if n_threads > 0 else (os.cpu_count() or 1)
    stream = (sys.stderr if progress is True else progress) or None

    with GGUFFile(input_path) as src:
        facts = ModelFacts.from_metadata(src.metadata)
        infos = {t.name: t for t in src.tensors}
        if keep_split:  # llama.cpp keeps the input's parts and order (the counters follow it)
            names = sorted(infos, key=lambda n: (infos[n].part, infos[n].offset))
            n_split = max(infos[n].part for n in names) + 1 if names else 1
        else:
            names, n_split = weight_order(list(infos)), 1
        shapes = [TensorShape(n, infos[n].type_name, tuple(infos[n].ne)) for n in names]
        plans = plan_types(facts, ft, shapes, opts)
        _check_writable(plans, infos, ft, allow_requantize, imat if imat is not None and imat.values else None)

        alignment = int(src.metadata.get("general.alignment", DEFAULT_ALIGNMENT))
        metadata = _metadata(src, ft, overrides)
        outputs = _split_paths(output_path, n_split) if keep_split else [output_path]
        # per output file: (header, [(index into plans, size)])
        files = []
        for k in range(len(outputs)):
            members = [i for i, n in enumerate(names) if not keep_split or infos[n].part == k]
            entries, sizes, offset = [], [], 0
            for i in members:
                shape, plan = shapes[i], plans[i]
                n_rows = int(np.prod(shape.ne[1:], dtype=np.int64)) if len(shape.ne) > 1 else 1
                size = n_rows * _engine.row_size(plan.type, shape.ne[0])
                entries.append((plan.name, list(shape.ne[:shape.n_dims]), _engine.type_info(plan.type)["id"], offset))
                sizes.append((i, size))
                offset += align_up(size, alignment)
            kvs = metadata if k == 0 else []
            if n_split > 1:
                kvs = kvs + [("split.no", "u16", k), ("split.count", "u16", n_split),
                             ("split.tensors.count", "i32", len(names))]
            files.append((header_bytes(kvs, entries, alignment), sizes))

        bar = _Progress(len(plans), stream)
        pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        tmps: List[str] = []
        done = 0
        try:
            for path, (head, members) in zip(outputs, files):
                folder = os.path.dirname(os.path.abspath(path))
                fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=folder)
                tmps.append(tmp)
                with os.fdopen(fd, "wb") as out:
                    out.write(head)

                    def tensor_done(i: int) -> None:
                        nonlocal done
                        done += 1
                        bar.update(done, names[i], infos[names[i]].type_name, plans[i].type)
                        logger.debug("%s: %s -> %s", names[i], infos[names[i]].type_name, plans[i].type)

                    writer = _Writer(out, pool, n_threads, alignment, tensor_done)
                    try:
                        for i, size in members:
                            writer.tensor(i, names[i], size, _tensor_pieces(src, infos[names[i]], plans[i], imat))
                        writer.finish()
                    except BaseException:
                        writer.cancel()
                        raise
            for tmp, path in zip(tmps, outputs):  # all parts written: now they replace any old ones
                os.replace(tmp, path)
        except BaseException:
            for tmp in tmps:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            raise
        finally:
            if pool is not None:
                pool.shutdown(wait=True, cancel_futures=True)
            bar.close()
        bytes_in = src.size
    result = QuantizeResult(outputs[0], ft.name, len(plans), bytes_in, sum(os.path.getsize(p) for p in outputs),
                            {p.name: p.type for p in plans}, outputs)
    logger.info("quantized %s to %s (%s): %.2f MiB -> %.2f MiB", os.fspath(input_path), outputs[0], ft.name,
                result.bytes_in / 2**20, result.bytes_out / 2**20)
    return result


def _split_paths(output_path: str, n_split: int) -> List[str]:
    """llama-quantize's names with --keep-split: OUT without its .gguf, then
    -00001-of-0000N.gguf per part (also for a single part)."""
    prefix = output_path[:-5] if output_path.endswith(".gguf") else output_path
    return [f"{prefix}-{k + 1:05d}-of-{n_split:05d}.gguf" for k in range(n_split)]


def _tensor_pieces(src: GGUFFile, info: Any, plan: TensorPlan, imat: Optional[ImportanceMatrix]) -> List[Any]:
    """One tensor's data in its planned type: its bytes as they are (a copy,
    straight from the mapping), or the jobs that quantize it chunk by chunk."""
    raw = src.tensor(plan.name)
    if plan.type == info.type_name:
        return [memoryview(np.ascontiguousarray(raw)).cast("B")]
    return _quantize_rows(raw, info.type_name, plan.type, info.ne[0], _tensor_imatrix(plan.name, info, imat))
