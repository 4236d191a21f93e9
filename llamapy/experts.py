"""What a mixture-of-experts model reads per token: its experts, its total
and active parameters, and the weight bytes one decode step reads (every
tensor a token passes through once, the chosen experts' share of the expert
tensors, one row of the token embeddings). The memory planner
(``plan_memory(...).experts``), ``llamapy inspect`` and the verbose load
report show it; the benchmarks compute their bandwidth ceiling from it.

The engine says which layers exist and how many experts a token uses
(``_engine.model_shape``, as the loader reads them); the file says how big
each tensor is. Tensors of next-token-prediction layers (past the model's
own depth) are never read and count in neither.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional, Union

from . import _engine
from .gguf_file import GGUFFile


@dataclass(frozen=True)
class ExpertSummary:
    n_expert: int            # experts per MoE layer
    n_expert_used: int       # experts each token runs
    n_ff_exp: int            # width of one expert
    n_ff_shared: int         # width of the shared expert FFN (0: none)
    n_dense_layers: int      # leading layers with a dense FFN
    params_total: int
    params_active: int       # per token: everything but the experts not chosen
    expert_bytes: int        # all expert tensors
    bytes_read_per_token: int  # weight bytes one decode step reads

    def as_dict(self) -> Dict[str, Any]:
        return asdict(self)


def _is_expert(name: str) -> bool:
    return "_exps." in name


def _layer_of(name: str) -> Optional[int]:
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit():
        return int(parts[1])
    return None


def weights_read_per_token(f: GGUFFile, shape: Dict[str, Any]) -> int:
    """Weight bytes one decode step reads (dense models too)."""
    n_layer = int(shape["n_layer"])
    n_exp = int(shape["n_expert"]) or 1
    used = int(shape["n_expert_used"]) or 1
    total = 0
    for t in f.tensors:
        il = _layer_of(t.name)
        if il is not None and il >= n_layer:
            continue  # next-token-prediction layers: not run
        if t.name == "token_embd.weight" and len(t.ne) > 1 and t.ne[1] > 0:
            total += t.nbytes // int(t.ne[1])  # one row
        elif _is_expert(t.name):
            total += t.nbytes * used // n_exp
        else:
            total += t.nbytes
    return total


def expert_summary(model_path: Union[str, "os.PathLike[str]"], f: Optional[GGUFFile] = None) -> Optional[ExpertSummary]:
    """The summary of a mixture-of-experts model, None for a dense one."""
    path = os.fspath(model_path)
    shape = _engine.model_shape(path)
    if not int(shape["n_expert"]):
        return None
    own = f is None
    g = GGUFFile(path) if own else f
    try:
        n_layer, n_exp, used = int(shape["n_layer"]), int(shape["n_expert"]), int(shape["n_expert_used"])
        params = active = expert_bytes = 0
        for t in g.tensors:
            il = _layer_of(t.name)
            if il is not None and il >= n_layer:
                continue
            params += t.n_elements
            if _is_expert(t.name):
                expert_bytes += t.nbytes
                active += t.n_elements * used // n_exp
            else:
                active += t.n_elements
        return ExpertSummary(n_expert=n_exp, n_expert_used=used, n_ff_exp=int(shape["n_ff_exp"]),
                             n_ff_shared=int(shape["n_ff_shexp"]), n_dense_layers=int(shape["n_layer_dense_lead"]),
                             params_total=params, params_active=active, expert_bytes=expert_bytes,
                             bytes_read_per_token=weights_read_per_token(g, shape))
    finally:
        if own:
            g.close()
