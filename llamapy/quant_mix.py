"""Which type each tensor of a model gets when it is quantized to a file type.

The one place for llama-quantize's rules: the file types ("Q4_K_M", ...) with
their ``general.file_type`` ids and default tensor types, which tensors are
quantized at all, the per-mix bumps (attn_v / ffn_down by layer, output and
token embeddings, mixture-of-experts handling, 70B-class models) and the
fallback when a row is not a whole number of blocks. The rules follow
llama.cpp's ``src/llama-quant.cpp`` (0.3.36), so that a file quantized here
gets the same type per tensor as one made by llama-quantize; they are written
as our own tables and functions.

Not here: reading and writing the files and the quantization itself
(``quantize_gguf.py``), the block formats (the engine).
"""
from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)

__all__ = ["FILE_TYPES", "FileType", "MixOptions", "ModelFacts", "TensorPlan", "file_type", "plan_types"]


@dataclass(frozen=True)
class FileType:
    """A llama-quantize file type: its name, ``general.file_type`` id (llama.h's
    ``llama_ftype``) and the tensor type most weights get. Whether llamapy can
    write a given model in it depends on the tensors (a row too short for a
    256-element type falls back to a 32-element one): the quantizer checks
    each tensor's type."""

    name: str
    ftype: int
    default_type: str


# llama-quantize's file types, in its order. Q3_K, Q4_K and Q5_K name the _M mixes.
FILE_TYPES: Dict[str, FileType] = {ft.name: ft for ft in [
    FileType("Q4_0", 2, "Q4_0"),
    FileType("Q4_1", 3, "Q4_1"),
    FileType("MXFP4_MOE", 38, "MXFP4"),
    FileType("Q5_0", 8, "Q5_0"),
    FileType("Q5_1", 9, "Q5_1"),
    FileType("IQ2_XXS", 19, "IQ2_XXS"),
    FileType("IQ2_XS", 20, "IQ2_XS"),
    FileType("IQ2_S", 28, "IQ2_XS"),
    FileType("IQ2_M", 29, "IQ2_S"),
    FileType("IQ1_S", 24, "IQ1_S"),
    FileType("IQ1_M", 31, "IQ1_M"),
    FileType("TQ1_0", 36, "TQ1_0"),
    FileType("TQ2_0", 37, "TQ2_0"),
    FileType("Q2_K", 10, "Q2_K"),
    FileType("Q2_K_S", 21, "Q2_K"),
    FileType("IQ3_XXS", 23, "IQ3_XXS"),
    FileType("IQ3_S", 26, "IQ3_S"),
    FileType("IQ3_M", 27, "IQ3_S"),
    FileType("IQ3_XS", 22, "IQ3_S"),
    FileType("Q3_K_S", 11, "Q3_K"),
    FileType("Q3_K_M", 12, "Q3_K"),
    FileType("Q3_K_L", 13, "Q3_K"),
    FileType("IQ4_NL", 25, "IQ4_NL"),
    FileType("IQ4_XS", 30, "IQ4_XS"),
    FileType("Q4_K_S", 14, "Q4_K"),
    FileType("Q4_K_M", 15, "Q4_K"),
    FileType("Q5_K_S", 16, "Q5_K"),
    FileType("Q5_K_M", 17, "Q5_K"),
    FileType("Q6_K", 18, "Q6_K"),
    FileType("Q8_0", 7, "Q8_0"),
    FileType("F16", 1, "F16"),
    FileType("BF16", 32, "BF16"),
    FileType("F32", 0, "F32"),
]}
_ALIASES = {"Q3_K": "Q3_K_M", "Q4_K": "Q4_K_M", "Q5_K": "Q5_K_M"}
_BY_ID = {ft.ftype: ft for ft in FILE_TYPES.values()}

# Block sizes of the tensor types the rules may pick (elements per block).
_BLOCK = {"F32": 1, "F16": 1, "BF16": 1, "Q4_0": 32, "Q4_1": 32, "Q5_0": 32, "Q5_1": 32, "Q8_0": 32,
          "IQ4_NL": 32, "MXFP4": 32, "Q2_K": 256, "Q3_K": 256, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256,
          "IQ4_XS": 256, "IQ2_XXS": 256, "IQ2_XS": 256, "IQ2_S": 256, "IQ3_XXS": 256, "IQ3_S": 256,
          "IQ1_S": 256, "IQ1_M": 256, "TQ1_0": 256, "TQ2_0": 256}
_FLOAT_TYPES = ("F32", "F16", "BF16")

# A 256-element type whose row does not fit -> the 32-element type used instead.
_FALLBACK = {"IQ1_S": "IQ4_NL", "IQ1_M": "IQ4_NL", "IQ2_XXS": "IQ4_NL", "IQ2_XS": "IQ4_NL", "IQ2_S": "IQ4_NL",
             "IQ3_XXS": "IQ4_NL", "IQ3_S": "IQ4_NL", "IQ4_XS": "IQ4_NL", "Q2_K": "Q4_0", "Q3_K": "Q4_0",
             "TQ1_0": "Q4_0", "TQ2_0": "Q4_0", "Q4_K": "Q5_0", "Q5_K": "Q5_1", "Q6_K": "Q8_0"}

# Tensor types that need an importance matrix (outside token_embd / output).
_IMATRIX_TYPES = ("IQ3_XXS", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ1_M", "IQ1_S")

# Architectures whose load code calls a model "70B" (src/models/*.cpp): arch -> block count.
_SEVENTY_B_LAYERS = {"llama": 80, "qwen2": 80, "deci": 80, "olmo": 80, "jais2": 68}

# Names (substrings) of weights that are never quantized: small or precision-critical tables.
_NEVER_QUANTIZED = (
    "_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
    "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
    "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
    "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight", "time_mix_a1.weight",
    "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight", "time_mix_decay_w1.weight",
    "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight", ".position_embd",
    "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos", ".patch_embd", ".patch_merger", "a.rvq.codebook",
    "mm.a.code_embd",
)
_NEVER_QUANTIZED_EXACT = ("position_embd.weight", "token_types.weight")
_NEVER_QUANTIZED_GLM5_NEXT = (
    "hc_", "indexer.attn_q_b", "indexer.attn_k", "indexer.proj", "indexer_compressor_gate",
    "indexer_compressor_ape", "ssm_f_a.weight", "ssm_f_b.weight", "ssm_g_a.weight", "ssm_g_b.weight",
    "ssm_beta.weight", "attn_kv_a_mqa.weight", "attn_k_b.weight", "attn_v_b.weight",
)

# Tensor categories, by name: (category, test). The first that matches wins.
TOKEN_EMBD, OUTPUT = "token_embd", "output"
ATTN_QKV, ATTN_KV_B, ATTN_V, ATTN_K, ATTN_Q, ATTN_OUTPUT = "attn_qkv", "attn_kv_b", "attn_v", "attn_k", "attn_q", \
    "attn_output"
FFN_UP, FFN_GATE, FFN_DOWN, OTHER = "ffn_up", "ffn_gate", "ffn_down", "other"
_CATEGORY_SUBSTRINGS = ((ATTN_QKV, "attn_qkv.weight"), (ATTN_KV_B, "attn_kv_b.weight"), (ATTN_V, "attn_v.weight"),
                        (ATTN_K, "attn_k.weight"), (ATTN_Q, "attn_q.weight"),
                        (ATTN_OUTPUT, "attn_output.weight"), (FFN_UP, "ffn_up"), (FFN_GATE, "ffn_gate"),
                        (FFN_DOWN, "ffn_down"))
_ATTN_V_LIKE = (ATTN_V, ATTN_QKV, ATTN_KV_B)
_TOKEN_EMBD_NAMES = ("token_embd.weight", "per_layer_token_embd.weight")


def file_type(name_or_id) -> FileType:
    """The file type named ``name_or_id`` ("Q4_K_M", "q4_k_m", "Q4_K", or its
    id 15). Raises ValueError naming the known ones."""
    ft: Optional[FileType]
    if isinstance(name_or_id, int) or (isinstance(name_or_id, str) and name_or_id.strip().isdigit()):
        ft = _BY_ID.get(int(name_or_id))
    else:
        key = str(name_or_id).strip().upper()
        ft = FILE_TYPES.get(_ALIASES.get(key, key))
    if ft is None:
        raise ValueError(f"unknown file type {name_or_id!r}; known: {', '.join(FILE_TYPES)}")
    return ft


def category(name: str) -> str:
    if name == "output.weight":
        return OUTPUT
    if name in _TOKEN_EMBD_NAMES:
        return TOKEN_EMBD
    for cat, sub in _CATEGORY_SUBSTRINGS:
        if sub in name:
            return cat
    return OTHER


def layer_of(name: str) -> int:
    """The block number of ``blk.N.`` names; -1 for the others (as llama.cpp's
    sscanf leaves it)."""
    m = re.match(r"blk\.([+-]?\d+)", name)
    return int(m.group(1)) if m else -1


def weight_order(names: Sequence[str]) -> List[str]:
    """Names in the order llama.cpp's loader keeps its weights (and writes
    them): by block number (non-block tensors first), then by name."""
    return sorted(names, key=lambda n: (layer_of(n), n.encode()))


@dataclass(frozen=True)
class ModelFacts:
    """What the rules read from a model's metadata."""

    arch: str
    n_layer: int
    n_expert: int = 0
    n_head: int = 0
    n_head_kv: int = 0

    @classmethod
    def from_metadata(cls, md: Mapping[str, object]) -> "ModelFacts":
        arch = md.get("general.architecture")
        if not isinstance(arch, str):
            raise ValueError("the model has no general.architecture")

        def first(key: str, default: int) -> int:
            v = md.get(f"{arch}.{key}", default)
            if not isinstance(v, (int, float)):  # a per-layer array: llama.cpp's n_gqa() reads layer 0
                v = list(v)[0] if len(v) else default  # type: ignore[arg-type]
            return int(v)

        n_layer = first("block_count", 0)
        if n_layer <= 0:
            raise ValueError(f"the model has no {arch}.block_count")
        n_head = first("attention.head_count", 0)
        return cls(arch, n_layer, first("expert_count", 0), n_head, first("attention.head_count_kv", n_head))

    @property
    def n_gqa(self) -> int:
        return self.n_head // self.n_head_kv if self.n_head_kv else 0

    @property
    def is_70b(self) -> bool:
        if self.arch == "llama" and (self.n_expert == 8 or self.n_head == self.n_head_kv):
            return False
        return _SEVENTY_B_LAYERS.get(self.arch) == self.n_layer


@dataclass(frozen=True)
class MixOptions:
    """llama-quantize's options that change the types (None: not given)."""

    output_tensor_type: Optional[str] = None     # --output-tensor-type
    token_embedding_type: Optional[str] = None   # --token-embedding-type
    quantize_output_tensor: bool = True          # False: --leave-output-tensor
    pure: bool = False                           # --pure: the default type everywhere
    tensor_types: Tuple[Tuple[str, str], ...] = ()  # --tensor-type REGEX=TYPE, first match wins
    has_imatrix: bool = False


@dataclass(frozen=True)
class TensorPlan:
    name: str
    type: str               # the type it is written in
    quantized: bool         # False: left as it is (norms, biases, 1-D, ...)


def allows_quantization(name: str, n_dims: int, arch: str, opts: MixOptions) -> bool:
    """Whether llama-quantize quantizes this tensor at all."""
    if n_dims < 2 or not name.endswith("weight"):
        return False
    if not opts.quantize_output_tensor and name == "output.weight":
        return False
    if any(s in name for s in _NEVER_QUANTIZED) or name in _NEVER_QUANTIZED_EXACT:
        return False
    if arch == "glm5-next" and any(s in name for s in _NEVER_QUANTIZED_GLM5_NEXT):
        return False
    return True


def _more_bits(i: int, n: int) -> bool:
    """The layers the _M mixes give more bits: the first and last eighth and
    every third in between."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _c_div(a: int, b: int) -> int:
    """C's integer division (towards zero), which the rules' n/8 use."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _Mixer:
    """The counters llama.cpp keeps while it walks the tensors in order."""

    def __init__(self, facts: ModelFacts, ft: FileType, opts: MixOptions, names: Sequence[str]) -> None:
        self.f, self.ft, self.opts = facts, ft.name, opts
        self.n_attention_wv = sum(category(n) in _ATTN_V_LIKE for n in names)
        self.tied_embeddings = "output.weight" not in names
        self.n_ffn = facts.n_layer  # ffn_down / gate / up counts: the block count
        self.i_attention_wv = self.i_ffn_down = self.i_ffn_gate = self.i_ffn_up = 0
        self.patterns = [(re.compile(p), t) for p, t in opts.tensor_types]

    def layer(self, counter: int, name: str) -> Tuple[int, int]:
        if max(1, self.f.n_expert) > 1:  # experts of a layer are not consecutive: read the name
            m = re.match(r"blk\.([+-]?\d+)\.", name)
            if m is None:
                raise ValueError(f"cannot tell the layer of tensor {name}")
            i = int(m.group(1))
            if not 0 <= i < self.n_ffn:
                raise ValueError(f"bad layer {i} for tensor {name}: must be in [0, {self.n_ffn})")
            return i, self.n_ffn
        return counter, self.n_ffn

    def pick(self, name: str, ne0: int, ne2: int, default: str) -> str:
        """llama.cpp's choice for a tensor that may be quantized: the options,
        then the mix, then the fallback for rows that do not fit."""
        cat, o = category(name), self.opts
        if o.token_embedding_type and cat == TOKEN_EMBD:
            # per_layer_token_embd follows it unless a --tensor-type pattern names it
            if not (name == "per_layer_token_embd.weight" and any(p.search(name) for p, _ in self.patterns)):
                return o.token_embedding_type
        if o.output_tensor_type and cat == OUTPUT:
            return o.output_tensor_type
        new = default
        if default in _FLOAT_TYPES:  # F32 / F16 / BF16 files: no mix, no fallback
            return new
        manual = False
        for p, t in self.patterns:
            if p.search(name):
                new, manual = t, True
                break
        if not manual and not o.pure:
            new = self.mix(name, cat, ne0, ne2, new)
        return fit_row(ne0, new, name)

    def mix(self, name: str, cat: str, ne0: int, ne2: int, new: str) -> str:  # noqa: C901 (one table of rules)
        f, ft, o = self.f, self.ft, self.opts
        gqa, n_exp = f.n_gqa, f.n_expert
        iq2_family = ft in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M")
        if f.arch == "glm5-next" and any(s in name for s in ("attn_q_a", "attn_q_b", "nextn.eh_proj")):
            if new not in _FLOAT_TYPES:
                return "Q8_0"
        if cat == OUTPUT or (self.tied_embeddings and cat == TOKEN_EMBD):
            if o.output_tensor_type:
                return o.output_tensor_type
            if ft == "MXFP4_MOE" or f.arch == "falcon" or ne0 % _BLOCK[new] != 0:
                return "Q8_0"
            if ft in ("IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ2_S", "IQ2_M", "IQ1_M"):
                return "Q5_K"
            return new if new == "Q8_0" else "Q6_K"
        if ft == "MXFP4_MOE":
            # experts (3-D) -> MXFP4, the rest Q8_0; bailingmoe3's 3-D MLA projections are not experts
            expert = f.arch != "bailingmoe3" or cat in (FFN_UP, FFN_GATE, FFN_DOWN)
            return "MXFP4" if ne2 > 1 and expert else "Q8_0"
        if cat == TOKEN_EMBD:
            if o.token_embedding_type:
                return o.token_embedding_type
            if ft in ("IQ2_XXS", "IQ2_XS", "IQ1_S", "IQ1_M"):
                return "Q2_K"
            if ft in ("IQ2_S", "IQ2_M", "IQ3_XXS"):
                return "IQ3_S"
            if ft in ("TQ1_0", "TQ2_0"):
                return "Q4_K"
            return new
        if iq2_family:
            iq3s_or_q2k = "IQ3_S" if ft in ("IQ2_S", "IQ2_M") else "Q2_K"
            if cat in _ATTN_V_LIKE:
                new = "Q4_K" if gqa >= 4 or n_exp >= 4 else iq3s_or_q2k
                self.i_attention_wv += 1
            elif n_exp == 8 and cat == ATTN_K:
                new = "Q4_K"
            elif cat == FFN_DOWN:
                if self.i_ffn_down < _c_div(self.n_ffn, 8):
                    new = iq3s_or_q2k
                self.i_ffn_down += 1
            elif cat == ATTN_OUTPUT:
                if n_exp == 8:
                    new = "Q5_K"
                elif ft in ("IQ1_S", "IQ1_M"):
                    new = "IQ2_XXS"
                elif ft in ("IQ2_S", "IQ2_M"):
                    new = "IQ3_S"
            return new
        if cat in _ATTN_V_LIKE:
            i, n = self.i_attention_wv, self.n_attention_wv
            if ft == "Q2_K":
                new = "Q4_K" if gqa >= 4 else "Q3_K"
            elif ft == "Q2_K_S" and gqa >= 4:
                new = "Q4_K"
            elif ft == "IQ3_XXS":
                new = "Q4_K" if gqa >= 4 else ("IQ3_S" if not o.has_imatrix else "IQ3_XXS")
            elif ft in ("IQ3_XS", "IQ3_S") and gqa >= 4:
                new = "Q4_K"
            elif ft == "IQ3_M":
                new = "Q4_K"
            elif ft == "Q3_K_M":
                new = "Q5_K" if i < 2 else "Q4_K"
            elif ft == "Q3_K_L":
                new = "Q5_K"
            elif ft in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
                new = "Q5_K"
            elif ft in ("Q4_K_M", "Q5_K_M") and _more_bits(i, n):
                new = "Q6_K"
            elif ft == "Q4_K_S" and i < 4:
                new = "Q5_K"
            if f.is_70b and new in ("Q3_K", "Q4_K"):
                # 8 heads share each attn_v there: more bits cost little
                new = "Q5_K"
            if n_exp == 8:
                new = "Q8_0"
            self.i_attention_wv += 1
            return new
        if cat == ATTN_K:
            if n_exp == 8:
                return "Q8_0"
            if ft == "IQ3_XS":
                return "IQ3_XXS"
            if ft == "IQ3_XXS":
                return "IQ2_S"
            return new
        if cat == ATTN_Q:
            return {"IQ3_XS": "IQ3_XXS", "IQ3_XXS": "IQ2_S"}.get(ft, new)
        if cat == FFN_DOWN:
            i, n = self.layer(self.i_ffn_down, name)
            self.i_ffn_down += 1
            return self._ffn_down(ft, i, n, new)
        if cat == ATTN_OUTPUT:
            if f.arch == "falcon":
                return "Q4_K" if ft == "Q3_K_L" else new
            if n_exp == 8:
                bumped = ("Q2_K", "IQ3_XS", "IQ3_XXS", "Q3_K_S", "Q3_K_M", "IQ4_NL", "Q4_K_S", "Q4_K_M", "IQ3_S",
                          "IQ3_M", "IQ4_XS")
                return "Q5_K" if ft in bumped else new
            return {"Q2_K": "Q3_K", "IQ3_XXS": "IQ3_S", "Q3_K_M": "Q4_K", "Q3_K_L": "Q5_K",
                    "IQ3_M": "Q4_K"}.get(ft, new)
        if cat == ATTN_QKV:
            if ft in ("Q3_K_M", "Q3_K_L", "IQ3_M"):
                return "Q4_K"
            return {"Q4_K_M": "Q5_K", "Q5_K_M": "Q6_K"}.get(ft, new)
        if cat in (FFN_GATE, FFN_UP):
            counter = self.i_ffn_gate if cat == FFN_GATE else self.i_ffn_up
            i, n = self.layer(counter, name)
            if cat == FFN_GATE:
                self.i_ffn_gate += 1
            else:
                self.i_ffn_up += 1
            if ft == "IQ3_XS" and n // 8 <= i < 7 * n // 8:
                return "IQ3_XXS"
        return new

    def _ffn_down(self, ft: str, i: int, n: int, new: str) -> str:
        f, o = self.f, self.opts
        first_eighth = i < _c_div(n, 8)
        if ft == "Q2_K":
            return "Q3_K"
        if ft == "Q2_K_S":
            return "Q4_K" if first_eighth else new
        if ft == "IQ3_XXS" and not o.has_imatrix:
            return "Q4_K" if first_eighth else "Q3_K"
        if ft == "Q3_K_M":
            if i < _c_div(n, 16):
                return "Q5_K"
            return "Q4_K" if f.arch != "falcon" or _more_bits(i, n) else "Q3_K"
        if ft == "IQ3_M" and (first_eighth or (f.n_expert == 8 and _more_bits(i, n))):
            return "Q4_K"
        if ft == "Q3_K_L":
            return "Q4_K" if f.arch == "falcon" else "Q5_K"
        if ft == "Q4_K_M":
            if f.arch == "falcon":
                return "Q6_K" if i < _c_div(n, 16) else "Q5_K" if _more_bits(i, n) else "Q4_K"
            return "Q6_K" if _more_bits(i, n) else new
        if first_eighth and ft in ("IQ4_NL", "IQ4_XS") and not o.has_imatrix:
            return "Q5_K"
        if ft == "Q5_K_M" and _more_bits(i, n):
            return "Q6_K"
        if ft == "Q4_K_S" and f.arch != "falcon" and first_eighth:
            return "Q5_K"
        if ft in ("Q4_0", "Q5_0") and o.has_imatrix and first_eighth:
            # llama.cpp guards the first ffn_down layers of imatrix Q4_0/Q5_0 files
            return "Q4_1" if ft == "Q4_0" else "Q5_1"
        return new


def fit_row(ne0: int, wanted: str, name: str = "") -> str:
    """The type a tensor with rows of ``ne0`` elements gets instead of
    ``wanted`` when its rows are not whole blocks of it: the 32-element type
    of the same family, else F16."""
    block = _BLOCK.get(wanted)
    if block is None:
        raise ValueError(f"no block size known for type {wanted}")
    if ne0 % block == 0:
        return wanted
    if block <= 32:
        got = wanted  # already a 32-element type: only F16 is left
    elif wanted in _FALLBACK:
        got = _FALLBACK[wanted]
    else:
        raise ValueError(f"{name}: no tensor type fallback is defined for type {wanted}")
    got = got if ne0 % _BLOCK[got] == 0 else "F16"
    logger.warning("%s: rows of %d elements are not whole %s blocks: falling back to %s", name, ne0, wanted, got)
    return got


@dataclass(frozen=True)
class TensorShape:
    name: str
    type: str
    ne: Tuple[int, ...]  # ggml order: ne[0] is the row length

    @property
    def n_dims(self) -> int:
        """ggml_n_dims: trailing dimensions of 1 do not count."""
        n = len(self.ne)
        while n > 1 and self.ne[n - 1] == 1:
            n -= 1
        return max(n, 1)


def plan_types(facts: ModelFacts, ft: FileType, tensors: Sequence[TensorShape], opts: MixOptions) -> List[TensorPlan]:
    """The type of every tensor, in the order given (which must be
    ``weight_order``'s: the counters depend on it)."""
    mixer = _Mixer(facts, ft, opts, [t.name for t in tensors])
    plans = []
    for t in tensors:
        if not allows_quantization(t.name, t.n_dims, facts.arch, opts):
            plans.append(TensorPlan(t.name, t.type, False))
            continue
        got = mixer.pick(t.name, t.ne[0], t.ne[2] if len(t.ne) > 2 else 1, ft.default_type)
        plans.append(TensorPlan(t.name, got, True))
    return plans


def requires_imatrix(name: str, tensor_type: str, ft: FileType) -> bool:
    """Whether llama.cpp refuses to write this tensor without an importance matrix."""
    if name in _TOKEN_EMBD_NAMES or name == "output.weight":
        return False
    return tensor_type in _IMATRIX_TYPES or (tensor_type == "Q2_K" and ft.name == "Q2_K_S")
