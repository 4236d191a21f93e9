"""The tensors of a Hugging Face checkpoint folder, one at a time: ``model.safetensors`` or the
shards that ``model.safetensors.index.json`` lists. Headers are read up front (names, dtypes,
shapes); each tensor's data is a view of its file's memory map, read only when used, so a
converter holds one tensor at a time however large the model. No torch.

Not here: pickled ``pytorch_model.bin`` checkpoints (bert.py reads those through torch).
"""
from __future__ import annotations

import json
import os
from typing import Dict, Iterator, List, Tuple

import numpy as np

from .safetensors import SafetensorsFile


class Checkpoint:
    """``names()`` in file order (shards sorted, each file's header order), ``shape(name)``,
    ``get(name)`` (float tensors as float32 or float16 views; BF16 widened)."""

    def __init__(self, hf_dir: str) -> None:
        self.hf_dir = hf_dir
        single = os.path.join(hf_dir, "model.safetensors")
        index = os.path.join(hf_dir, "model.safetensors.index.json")
        if os.path.isfile(single):
            files = [single]
        elif os.path.isfile(index):
            with open(index, encoding="utf-8") as f:
                weight_map = json.load(f).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise ValueError(f"{index} has no weight_map")
            files = [os.path.join(hf_dir, s) for s in sorted(set(weight_map.values()))]
            missing = [p for p in files if not os.path.isfile(p)]
            if missing:
                raise ValueError(f"{index} lists shard {os.path.basename(missing[0])}, which is not in {hf_dir}")
        else:
            raise ValueError(f"{hf_dir} has no model.safetensors or model.safetensors.index.json "
                             "(pickled .bin checkpoints are not converted for decoders)")
        self._where: Dict[str, SafetensorsFile] = {}
        self._order: List[str] = []
        for path in files:
            st = SafetensorsFile(path)
            for name in sorted(st.names()):
                if name in self._where:
                    raise ValueError(f"tensor {name!r} is in two shards")
                self._where[name] = st
                self._order.append(name)

    def names(self) -> Iterator[str]:
        return iter(self._order)

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> Tuple[int, ...]:
        return self._where[name].shape(name)

    def get(self, name: str) -> np.ndarray:
        return self._where[name].get(name)
