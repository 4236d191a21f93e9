"""A test-only vision encoder that returns llama.cpp's recorded projector outputs.

``RecordedEncoder(type)`` answers ``encode_image(pre)`` for the fixture images of
tests/data/vlm/<type>/: it finds the image by its original size (every fixture image has
its own), checks the number of chunks (and, where the record keeps them and decoding
agrees, the pixels) and returns the embeddings arrays.npz holds
(``<image>.mmproj_f16.chunk<k>.embd``). With it the handlers' pipeline (prompt rendering,
mtmd layout, placeholder ids, chunk evaluation, prefix reuse) is checked exactly against
llama.cpp without the C++ encoder. It counts its calls.
"""
from __future__ import annotations

import json
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

VLM = os.path.join(os.path.dirname(__file__), "data", "vlm")
IMAGES = os.path.join(VLM, "images")
_SIZES = {"tall_37x91.png": (37, 91), "wide_120x33.jpg": (120, 33), "tiny_5x7.png": (5, 7),
          "rgba_48x40.png": (48, 40), "grey_50x64.png": (50, 64), "huge_1536x1152.jpg": (1536, 1152),
          "square_64x64.webp": (64, 64)}


def record(vtype: str) -> dict:
    with open(os.path.join(VLM, vtype, "record.json")) as f:
        return json.load(f)


def model_paths(vtype: str) -> Tuple[str, str]:
    r = record(vtype)
    return os.path.join(VLM, vtype, r["files"]["text_f16"]), os.path.join(VLM, vtype, r["files"]["mmproj_f16"])


class RecordedEncoder:
    def __init__(self, vtype: str, check_pixels: bool = True) -> None:
        self.vtype = vtype
        self.record = record(vtype)
        self.arrays = np.load(os.path.join(VLM, vtype, "arrays.npz"))
        self.check_pixels = check_pixels
        self.calls: List[str] = []
        self._by_size: Dict[Tuple[int, int], str] = {v: k for k, v in _SIZES.items()}

    def image_name(self, size: Tuple[int, int]) -> str:
        name = self._by_size.get(tuple(size))
        if name is None:
            raise ValueError(f"RecordedEncoder: no fixture image of size {size}")
        return name

    def encode_image(self, pre) -> List[np.ndarray]:
        name = self.image_name(pre.original_size)
        self.calls.append(name)
        entry = self.record["images"][name]["mmproj_f16"]
        if "chunks" not in entry:
            raise ValueError(f"RecordedEncoder: llama.cpp has no output for {name}: {entry.get('error')}")
        n_img = sum(c["type"] == "image" for c in entry["chunks"])
        tiles = pre.in_chunk_order()
        if len(tiles) != n_img:
            raise AssertionError(f"{name}: {len(tiles)} image chunks preprocessed, llama.cpp made {n_img}")
        out = []
        for k, tile in enumerate(tiles):
            key = f"{name}.mmproj_f16.chunk{k}"
            if self.check_pixels and f"{key}.pixels0" in self.arrays.files:
                ref = self.arrays[f"{key}.pixels0"]
                np.testing.assert_array_equal(np.asarray(tile)[None] if ref.ndim == 4 else tile, ref)
            out.append(np.array(self.arrays[f"{key}.embd"], dtype=np.float32))
        return out

    def factory(self, clip_model_path: str, n_threads: Optional[int] = None,
                verbose: bool = False) -> "RecordedEncoder":
        return self
