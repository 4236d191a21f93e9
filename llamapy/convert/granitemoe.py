"""Granite 3 MoE checkpoints (``GraniteMoeForCausalLM``) -> GGUF architecture ``granitemoe``.

As granite (granite.py: llama's writer, the four multipliers) with every layer a routed mixture
in JetMoE's layout: ``block_sparse_moe.input_linear`` (n_expert, 2 * n_ff, n_embd) holds each
expert's gate and up rows one after the other and is split into ``ffn_gate_exps`` /
``ffn_up_exps``; ``output_linear`` is ``ffn_down_exps`` and ``router.layer`` the router (F32).
Not here: GraniteMoeShared's shared expert and the hybrid Granite 4: refused.
"""
from __future__ import annotations

import dataclasses
import re

from . import granite
from .decoder import DecoderFamily, need

MODEL_TYPES = ("granitemoe",)


def _split(hf_name: str, shape, cfg: dict):
    m = re.fullmatch(r"model\.layers\.(\d+)\.block_sparse_moe\.input_linear\.weight", hf_name)
    if m is None:
        if "shared_mlp" in hf_name:
            raise NotImplementedError("Granite MoE with a shared expert (GraniteMoeShared) is not converted")
        return None
    n_ff = int(need(cfg, "intermediate_size"))
    if len(shape) != 3 or shape[1] != 2 * n_ff:
        raise ValueError(f"{hf_name} has shape {shape}, not (n_expert, 2 * {n_ff}, n_embd)")
    half = (shape[0], n_ff, shape[2])
    il = m.group(1)
    return [(f"blk.{il}.ffn_gate_exps.weight", half, lambda x: x[:, :n_ff]),
            (f"blk.{il}.ffn_up_exps.weight", half, lambda x: x[:, n_ff:])]


FAMILY: DecoderFamily = dataclasses.replace(
    granite.FAMILY,
    arch="granitemoe",
    required=("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate_inp",
              "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"),
    split_tensor=_split,
    tensor_names=(
        (r"model\.layers\.(\d+)\.block_sparse_moe\.output_linear\.weight", "blk.{0}.ffn_down_exps.weight"),
        (r"model\.layers\.(\d+)\.block_sparse_moe\.router\.layer\.weight", "blk.{0}.ffn_gate_inp.weight"),
    ),
)
