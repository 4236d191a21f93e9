"""Read GGUF model files: metadata, the tensor table and zero-copy tensor views.

``GGUFFile`` wraps the native validating reader (``_engine.GGUFReader``,
vendor/engine/gguf/): the file is memory-mapped and checked in full when it is
opened, so every later access is safe. Malformed files raise ``GGUFError`` (a
``ValueError``) naming the bad field and its byte offset.

A model split by gguf-split (``name-00001-of-00003.gguf``, ...) is opened
from its first part: the reader opens the other parts from the same folder,
checks that they belong together, and lists every part's tensors (each
``TensorInfo.part`` says which file holds it). Opening a later part raises
``GGUFError`` naming the first; a missing part raises ``FileNotFoundError``
naming it.

Not here: what the metadata means for a model (the model loaders), or writing
GGUF files (use the ``gguf`` package).
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union, overload

import numpy as np

from . import _engine
from ._engine import GGUFError

__all__ = ["FilePart", "GGUFArray", "GGUFError", "GGUFFile", "TensorInfo", "model_file_bytes", "split_name",
           "split_part_paths"]

# Metadata arrays longer than this come back as a lazy GGUFArray.
LAZY_ARRAY_THRESHOLD = 1024

# ggml type ids whose elements numpy can hold directly (BF16 as raw uint16 bits).
_PLAIN_DTYPES = {
    0: np.float32,   # F32
    1: np.float16,   # F16
    24: np.int8,     # I8
    25: np.int16,    # I16
    26: np.int32,    # I32
    27: np.int64,    # I64
    28: np.float64,  # F64
    30: np.uint16,   # BF16, raw bits
}

_ITER_CHUNK = 4096


class GGUFArray(Sequence):
    """A read-only, lazily decoded metadata array (e.g. a 262k-token vocabulary).

    Supports ``len``, indexing (negative too), slicing, iteration and
    ``list()``; ``numpy()`` gives a zero-copy read-only view of a numeric or
    bool array. It keeps the file mapped while it exists, even after the
    ``GGUFFile`` is closed.
    """

    __slots__ = ("_native",)

    def __init__(self, native: "_engine.GGUFArray") -> None:
        self._native = native

    @property
    def elem_type(self) -> str:
        """GGUF element type: 'string', 'f32', 'i32', 'array', ..."""
        return self._native.elem_type

    def __len__(self) -> int:
        return len(self._native)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> List[Any]: ...

    def __getitem__(self, index):
        n = len(self._native)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step == 1:
                return self._native.slice(start, stop)
            return [self._native.get(i) for i in range(start, stop, step)]
        i = index.__index__()
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"GGUF array index {index} out of range (length {n})")
        return self._native.get(i)

    def __iter__(self) -> Iterator[Any]:
        n = len(self._native)
        for start in range(0, n, _ITER_CHUNK):
            yield from self._native.slice(start, start + _ITER_CHUNK)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, GGUFArray):
            return list(self) == list(other)
        if isinstance(other, (list, tuple)):
            return len(other) == len(self) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def numpy(self) -> np.ndarray:
        """Zero-copy read-only numpy view (numeric and bool element types only)."""
        return self._native.numpy()

    def __repr__(self) -> str:
        return f"GGUFArray({self.elem_type}, len={len(self)})"


@dataclass(frozen=True)
class TensorInfo:
    """One entry of the tensor table.

    ``shape`` is in numpy order (slowest-varying first, e.g. ``(rows, cols)``);
    ``ne`` is ggml's order (``ne[0]`` is the row length). ``offset`` is the
    absolute byte offset of the tensor's data in the file that holds it:
    ``GGUFFile.parts[part]`` (0, the file itself, unless the model is split).
    """

    name: str
    type: int
    type_name: str
    shape: Tuple[int, ...]
    ne: Tuple[int, ...]
    offset: int
    nbytes: int
    part: int = 0

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.ne:
            n *= d
        return n


@dataclass(frozen=True)
class FilePart:
    """One file of a model: the only one, or one part of a split model.
    ``index`` counts from 0 (the file named ``-00001-of-...``); ``data_offset``
    is where its tensor data starts."""

    index: int
    path: str
    size: int
    data_offset: int
    n_tensors: int


# How gguf-split (and gguf-py's split writer) name the parts: 1-based numbers.
_SPLIT_NAME = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


def split_name(path: Union[str, "os.PathLike[str]"]) -> Optional[Tuple[str, int, int]]:
    """``(prefix, number, count)`` when ``path`` is named as a part of a split
    model (``prefix-00002-of-00003.gguf`` -> ``(prefix, 2, 3)``, the prefix
    keeping any folder), else None. By name only: the file is not read."""
    path = os.fspath(path)
    m = _SPLIT_NAME.match(os.path.basename(path))
    if m is None or not 1 <= int(m["no"]) <= int(m["count"]):
        return None
    return path[: len(path) - len(m.group(0)) + len(m["prefix"])], int(m["no"]), int(m["count"])


def split_part_paths(path: Union[str, "os.PathLike[str]"]) -> List[str]:
    """The paths of every part of the split model that ``path`` is named as a
    part of, first to last (``[path]`` for any other name). By name only: the
    files may not exist."""
    path = os.fspath(path)
    split = split_name(path)
    if split is None:
        return [path]
    prefix, _, count = split
    return [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def model_file_bytes(path: Union[str, "os.PathLike[str]"]) -> int:
    """Bytes of a model's files on disk: every part of a split model (named as
    its parts), the file itself otherwise; parts that do not exist count 0."""
    total = 0
    for p in split_part_paths(path):
        try:
            total += os.path.getsize(p)
        except OSError:
            pass
    return total


def _wrap(value: Any) -> Any:
    """Native metadata value -> Python value (lazy arrays wrapped, nested lists walked)."""
    if isinstance(value, _engine.GGUFArray):
        return GGUFArray(value)
    if isinstance(value, list):
        return [_wrap(v) for v in value] if any(isinstance(v, (list, _engine.GGUFArray)) for v in value) else value
    return value


class GGUFFile:
    """A GGUF file opened for reading: ``with GGUFFile(path) as f: ...``.

    Attributes: ``path``, ``version``, ``alignment``, ``metadata`` (dict),
    ``tensors`` (list of TensorInfo), ``architecture``, ``parts`` (the files:
    one, or a split model's parts, see the module's doc). ``tensor(name)``
    returns a read-only numpy view into the mapping. ``close()`` drops this
    object's reference to the mapping; views and lazy arrays handed out earlier
    keep it alive and stay valid.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"]) -> None:
        self.path = os.fspath(path)
        self._reader: Optional[_engine.GGUFReader] = None  # (closed, should opening fail)
        self._reader = _engine.GGUFReader(self.path)
        self._metadata: Optional[Dict[str, Any]] = None
        self._metadata_types: Optional[Dict[str, str]] = None
        self._tensors: Optional[List[TensorInfo]] = None
        self._tensor_index: Optional[Dict[str, int]] = None
        self._row_bytes: Optional[List[int]] = None

    # -- lifetime -------------------------------------------------------------
    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        self._metadata = self._metadata_types = None
        self._tensors = self._tensor_index = None
        self._row_bytes = None

    @property
    def closed(self) -> bool:
        return self._reader is None

    def __enter__(self) -> "GGUFFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _open_reader(self) -> "_engine.GGUFReader":
        if self._reader is None:
            raise ValueError(f"GGUF file {self.path!r} is closed")
        return self._reader

    @property
    def version(self) -> int:
        """GGUF format version (2 or 3)."""
        return self._open_reader().version

    @property
    def alignment(self) -> int:
        """Data alignment in bytes (``general.alignment``, 32 by default)."""
        return self._open_reader().alignment

    @property
    def size(self) -> int:
        """File size in bytes; for a split model, all its parts' together."""
        return self._open_reader().size

    @property
    def parts(self) -> List[FilePart]:
        """The model's files in order: ``[this file]``, or every part of a split model."""
        return [FilePart(i, path, size, offset, n)
                for i, (path, size, offset, n) in enumerate(self._open_reader().parts())]

    # -- metadata -------------------------------------------------------------
    def _load_metadata(self) -> None:
        entries = self._open_reader().metadata(LAZY_ARRAY_THRESHOLD)
        self._metadata = {key: _wrap(value) for key, _, value in entries}
        self._metadata_types = {key: label for key, label, _ in entries}

    @property
    def metadata(self) -> Dict[str, Any]:
        """Key -> value: int, float, bool, str, list, or GGUFArray for long arrays."""
        self._open_reader()
        if self._metadata is None:
            self._load_metadata()
        return self._metadata  # type: ignore[return-value]

    def metadata_type(self, key: str) -> str:
        """The stored GGUF type of a key: 'u32', 'string', 'array[f32]', ..."""
        self.metadata
        return self._metadata_types[key]  # type: ignore[index]

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> Optional[str]:
        arch = self.metadata.get("general.architecture")
        return arch if isinstance(arch, str) else None

    # -- tensors --------------------------------------------------------------
    def _load_tensors(self) -> None:
        tensors, row_bytes = [], []
        for name, type_id, type_name, ne, offset, nbytes, row, part in self._open_reader().tensor_infos():
            tensors.append(TensorInfo(name, type_id, type_name, tuple(reversed(ne)), ne, offset, nbytes, part))
            row_bytes.append(row)
        self._tensors = tensors
        self._row_bytes = row_bytes
        self._tensor_index = {t.name: i for i, t in enumerate(tensors)}

    @property
    def tensors(self) -> List[TensorInfo]:
        self._open_reader()
        if self._tensors is None:
            self._load_tensors()
        return self._tensors  # type: ignore[return-value]

    def tensor_info(self, name: str) -> TensorInfo:
        self.tensors
        i = self._tensor_index.get(name)  # type: ignore[union-attr]
        if i is None:
            raise KeyError(f"no tensor named {name!r} in {os.path.basename(self.path)}")
        return self._tensors[i]  # type: ignore[index]

    def tensor(self, name: str) -> np.ndarray:
        """A read-only numpy view of a tensor's data, shaped in numpy order.

        F32 -> float32, F16 -> float16, BF16 -> uint16 (the raw bfloat16 bits:
        numpy has no bfloat16; ``(a.astype(np.uint32) << 16).view(np.float32)``
        converts), I8/I16/I32/I64/F64 -> their dtypes. Quantized types come as
        uint8 raw blocks of shape ``(*shape[:-1], row_bytes)``.
        """
        info = self.tensor_info(name)
        index = self._tensor_index[name]  # type: ignore[index]
        raw = self._open_reader().tensor_bytes(index)
        dtype = _PLAIN_DTYPES.get(info.type)
        if dtype is not None:
            return raw.view(dtype).reshape(info.shape)
        return raw.reshape(info.shape[:-1] + (self._row_bytes[index],))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"v{self.version}"
        return f"GGUFFile({self.path!r}, {state})"


def metadata_string(value: Union[bool, int, float, str]) -> str:
    """One metadata value as llama.cpp prints it: bools as true/false, floats
    with six decimals."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6f}"
    return str(value)


def metadata_strings(gguf: "GGUFFile", overrides: Optional[Dict[str, Any]] = None) -> Dict[str, str]:
    """GGUF metadata as llama.cpp reports it (llama_model_meta_*): every
    scalar as a string; arrays (token lists, tags) are left out, as llama.cpp
    leaves them out. ``overrides`` (kv_overrides) replace the file's values."""
    out: Dict[str, str] = {}
    for key, value in gguf.metadata.items():
        if isinstance(value, (bool, float, int, str)):
            out[key] = metadata_string(value)
    for key, value in (overrides or {}).items():
        out[key] = metadata_string(value)
    return out
