"""``llamapy.plan_memory``: the bytes a model will take once loaded, predicted
from its GGUF file alone (metadata and tensor table), without loading it or
creating a context.

The parts, as the engine allocates them (vendor/engine/):
- weights: every tensor's bytes (the mmap touches them all: the forward pass
  reads every matrix; the token embeddings are read in full where the output
  head is tied to them, else a row per token seen);
- KV cache (kv_cache.h, context.cpp): n_ctx cells of every layer's keys and
  values, or, for a model with sliding-window layers, n_ctx cells of the
  global layers plus ``n_swa * n_seq_max + n_batch`` cells of the window
  layers (when that is smaller); encoders keep one cell;
- compute buffers (model/blocks.h run_state, backend/cpu_backend.h): the
  activations of n_ubatch rows, the masks and RoPE tables, the quantized or
  packed activations of the widest matmul input
  (``_engine.packed_act_bytes_max``), and the attention path's work
  memory (``_engine.ops.attention_scratch_bytes``: the explicit path's grows
  with n_ctx, flash's does not). This equals the ``activation_bytes`` of
  ``Context.device_memory()``;
- runtime: the file's metadata pages (read when the vocabulary is built), the
  tokenizer's tables (estimated from the token count and text lengths: two
  strings per token, an index entry, and a merge table for BPE), the GGUF
  readers' indexes of string arrays, the output
  rows (logits of one row) and Llama's token buffer (n_ctx int32);
- mmproj: a projector's tensor bytes and metadata pages (the vision
  encoder's work buffers, a few MiB for one image, are not counted).

Placement (``devices``): as the engine's placement plan (placement.h) puts
the parts where ``Llama(n_gpu_layers=..., main_gpu, split_mode, tensor_split,
offload_kqv)`` will: the input part (embedding lookups) on the CPU; with
GPU layers, the last n_gpu_layers repeating layers (and the output part when
n_gpu_layers > n_layer) on the Vulkan devices this process finds, split as
llama.cpp splits layers; each layer's KV cache beside it (on the CPU with
offload_kqv=False); the compute buffers on the device of the first GPU part,
as ``Context.device_memory()`` reports them (a device's own work memory,
staging arena and attention scores, is not predicted). Without a Vulkan
build or device everything is on the CPU, as Llama then runs it.
Not here: measuring (tests/test_memory_plan.py compares with Context and RSS),
deciding what to evict (llamapy/server/router.py).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

from . import _engine
from ._params import gpu_layers_value, gpu_unavailable
from .experts import expert_summary
from .gguf_file import GGUFFile

__all__ = ["MemoryPlan", "plan_memory"]

_MAX_SEQUENCES = _engine.max_sequences  # kv_cache.h kMaxSequences; Llama's embedding contexts use min(n_batch, it)


@dataclass(frozen=True)
class MemoryPlan:
    """Predicted bytes of a loaded model (see the module docstring)."""

    model_path: str
    n_ctx: int
    n_parallel: int
    n_batch: int
    n_ubatch: int
    flash_attn: bool
    type_k: str
    type_v: str
    weights_bytes: int
    kv_bytes: int
    compute_bytes: int
    runtime_bytes: int
    mmproj_bytes: int = 0
    kv_cells: int = 0          # cells of the main cache
    kv_swa_cells: int = 0      # cells of the sliding-window cache (0: none)
    # Models with recurrent layers (the hybrids): the per-sequence states (each layer's on
    # the layer's device) and, at most, n_state_checkpoints copies of each (host
    # memory; recurrent_state.h).
    state_bytes: int = 0
    devices: List[Dict[str, Any]] = field(default_factory=list)
    # A mixture-of-experts model's experts, total / active parameters and the
    # weight bytes a decode step reads (llamapy.experts.ExpertSummary); None: dense.
    experts: Optional[Dict[str, Any]] = None

    @property
    def total_bytes(self) -> int:
        return (self.weights_bytes + self.kv_bytes + self.compute_bytes + self.runtime_bytes + self.mmproj_bytes
                + self.state_bytes)

    def as_dict(self) -> Dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["total_bytes"] = self.total_bytes
        return d


def _kv_type(what: str, name: Union[str, int]) -> str:
    types = _engine.kv_cache_types()  # {ggml id: name}, the engine's list (kv_cache.h)
    if isinstance(name, int) and not isinstance(name, bool):
        if name not in types:
            raise ValueError(f"{what}: KV cache type id {name} is not supported (ids: {sorted(types)})")
        return types[name]
    by_name = {v.lower(): v for v in types.values()}
    key = str(name).strip().lower()
    if key not in by_name:
        raise ValueError(f"{what}: KV cache type {name!r} is not supported ({', '.join(by_name)})")
    return by_name[key]


class _Shape:
    """The hyperparameters the engine's buffers depend on, read from metadata
    as model/model.cpp reads them."""

    def __init__(self, f: GGUFFile) -> None:
        md = f.metadata
        self.arch = arch = f.architecture or ""
        if arch not in _engine.Model.supported_archs:
            raise ValueError(f"{f.path}: model architecture {arch!r} is not supported "
                             f"(supported: {', '.join(_engine.Model.supported_archs)})")

        def key(suffix: str, default: Any = None) -> Any:
            v = md.get(f"{arch}.{suffix}", default)
            if v is None:
                raise ValueError(f"{f.path}: model metadata lacks {arch}.{suffix}")
            # one value per layer (Gemma 4's head_count_kv, feed_forward_length):
            # buffers are sized for the largest, as the engine's loader does
            return max(v) if isinstance(v, list) and v else v

        self.n_ctx_train = int(key("context_length"))
        self.n_embd = int(key("embedding_length"))
        self.n_ff = int(key("feed_forward_length", 0))  # (qwen35moe has none: the engine's shape has it)
        self.n_head = int(key("attention.head_count"))
        self.n_head_kv = int(key("attention.head_count_kv", self.n_head))
        self.head_dim_k = int(key("attention.key_length", self.n_embd // self.n_head))
        self.head_dim_v = int(key("attention.value_length", self.head_dim_k))
        self.pooling = int(md.get(f"{arch}.pooling_type", -1))
        # What the engine's loader derives (model.h read_hparams: the
        # architecture's facts and setup, the window's layers, the experts,
        # the activation rows), asked of it rather than repeated here.
        shape = _engine.model_shape(str(f.path))
        self.n_layer = int(shape["n_layer"])  # without next-token-prediction layers
        self.n_rot = int(shape["n_rot"])
        self.encoder = bool(shape["encoder"])
        self.n_swa = int(shape["n_swa"])
        self.swa_layers = [bool(x) for x in shape["swa_layers"]]
        self.n_expert = int(shape["n_expert"])
        self.n_expert_used = int(shape["n_expert_used"])
        self.n_ff_exp = int(shape["n_ff_exp"])
        self.n_ff_shexp = int(shape["n_ff_shexp"])
        self.activation_bytes_per_row = int(shape["activation_bytes_per_row"])
        self.kv_values_in_keys = bool(shape["kv_values_in_keys"])
        # Recurrent layers (delta-net, short convolution, Mamba-2) keep no KV cells but a state per
        # sequence, and the context keeps up to n_state_checkpoints copies of it.
        self.recurrent_layers = [bool(x) for x in shape["recurrent_layers"]]
        self.recurrent_bytes_per_seq = int(shape["recurrent_bytes_per_seq"])
        # Per layer (models whose layers differ in shape, as Gemma 4's): head
        # sizes, and the key / value elements each layer stores in the cache
        # (0 for a layer that reuses another's); the attention shapes the
        # CPU backend's scratch is sized for.
        self.layer_head_dim_k = [int(x) for x in shape["layer_head_dim_k"]]
        self.layer_head_dim_v = [int(x) for x in shape["layer_head_dim_v"]]
        self.layer_kv_k = [int(x) for x in shape["layer_kv_k"]]
        self.layer_kv_v = [int(x) for x in shape["layer_kv_v"]]
        self.attention_shapes = [tuple(int(v) for v in a) for a in shape["attention_shapes"]]
        tensors = {t.name: t for t in f.tensors}
        if "token_embd.weight" not in tensors:
            raise ValueError(f"{f.path}: the file lacks tensor token_embd.weight")
        self.n_vocab = int(tensors["token_embd.weight"].ne[1])
        self.weight_bytes = sum(t.nbytes for t in f.tensors)
        self.tensor_bytes = [(t.name, t.nbytes) for t in f.tensors]
        self.layer_weight_bytes = [0] * self.n_layer
        self.output_weight_bytes = 0  # "output*": the final norm and head (placement.h's output part)
        for t in f.tensors:
            parts = t.name.split(".")
            if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) < self.n_layer:
                self.layer_weight_bytes[int(parts[1])] += t.nbytes
            elif t.name.startswith("output"):
                self.output_weight_bytes += t.nbytes

    @property
    def n_embd_k(self) -> int:
        return self.n_head_kv * self.head_dim_k

    @property
    def n_embd_v(self) -> int:
        return self.n_head_kv * self.head_dim_v


def _header_bytes(f: GGUFFile) -> int:
    """Bytes before the first tensor's data: metadata and tensor table, read
    (so resident) when the model and its vocabulary load; summed over the
    files of a split model."""
    first: Dict[int, int] = {}
    for t in f.tensors:
        first[t.part] = min(first.get(t.part, t.offset), t.offset)
    return sum(first.get(p.index, p.size) for p in f.parts)


def _vocab_bytes(f: GGUFFile) -> int:
    """The tokenizer's tables (vocab/vocab.h), estimated for libstdc++: per
    token two std::string (text, piece: 32 bytes each, plus a heap block past
    15 bytes), score and attributes, a hash-index node and bucket, the
    special-token rank; BPE adds per merge a hash node and per token a symbol
    entry (text view, token, index node). Plus the open readers' indexes."""
    md = f.metadata
    tokens = md.get("tokenizer.ggml.tokens")
    if tokens is None:
        return 0
    n = len(tokens)
    heap = 0
    for t in tokens:
        k = len(t.encode("utf-8")) if isinstance(t, str) else len(t)
        if k > 15:
            heap += 2 * (((k + 1 + 8 + 15) // 16) * 16)  # two copies, malloc's 16-byte chunks with a header
    per_token = 64 + 8 + 48 + 8 + 4
    total = n * per_token + heap
    merges = md.get("tokenizer.ggml.merges")
    n_merges = len(merges) if merges is not None else 0
    if str(md.get("tokenizer.ggml.model", "")) == "gpt2":
        total += n_merges * (48 + 8) + n * (16 + 4 + 48 + 8)
    # Each open GGUF reader indexes string-array elements (8 bytes each,
    # gguf.h elem_pos); a Llama keeps two open: its GGUFFile and the model's.
    return total + 2 * 8 * (n + n_merges)


def _compute_bytes(s: _Shape, n_ctx: int, n_ubatch: int, n_threads: int, flash: bool, pooled: bool) -> int:
    """run_state + cpu_backend scratch + the pooled-hidden rows, as
    Context.device_memory() counts them ("activation_bytes")."""
    E, ub = s.n_embd, n_ubatch
    run = s.activation_bytes_per_row * ub
    mask_words = (n_ctx + 63) // 64
    for _ in range(2 if any(s.swa_layers) else 1):
        run += 4 * ub * max(s.n_rot, 2) + 8 * ub * mask_words + 2 * 4 * ub
    widest = max(s.n_embd, s.n_ff, s.n_ff_shexp, s.n_head * s.head_dim_v)
    # the engine's own reserve (float products pack their activations in
    # tiles; quantized ones need at most 4 bytes an element)
    matmul_act = int(_engine.packed_act_bytes_max(ub, widest)) + 1024
    if s.n_expert:
        matmul_act += int(_engine.moe_scratch_bytes(ub * s.n_expert_used, s.n_expert, max(E, s.n_ff_exp)))
    attn = _engine.ops.attention_scratch_bytes("flash" if flash else "explicit", n_threads, n_ctx,
                                               s.n_head // s.n_head_kv, s.head_dim_k, s.head_dim_v,
                                               n_head_kv=s.n_head_kv, shapes=s.attention_shapes)
    hidden = 4 * ub * E if (s.encoder or pooled) else 0
    return run + matmul_act + int(attn) + hidden


def _part_devices(s: _Shape, n_gpu_layers: Any, main_gpu: int, split_mode: int,
                  tensor_split: Optional[List[float]]) -> List[str]:
    """The device of each part (input, blk.0 .. blk.<n_layer-1>, output) as
    a context would place them on this process's Vulkan devices (the
    engine's own rule: context.h planned_part_devices); all "cpu" without."""
    # Parsed as Llama's options are: by the context option carrier.
    p = _engine.ContextParams(n_gpu_layers=gpu_layers_value(n_gpu_layers), main_gpu=main_gpu,
                              split_mode=split_mode, tensor_split=tensor_split)
    if p.n_gpu_layers == 0 or gpu_unavailable() is not None:
        return ["cpu"] * (s.n_layer + 2)
    # split_mode 2 (row) places layers whole, as 1 (Llama notes it)
    return [str(d) for d in _engine.planned_part_devices(s.n_layer, p.n_gpu_layers, p.main_gpu,
                                                           min(p.split_mode, 1), list(p.tensor_split))]


def _host_kept_bytes(s: _Shape, n_cpu_moe: int, override_tensor: Any) -> List[int]:
    """Each part's weight bytes kept in host memory (n_cpu_moe, override_tensor),
    by the engine's rule (placement.h host_kept), in part order."""
    p = _engine.ContextParams(n_cpu_moe=n_cpu_moe, override_tensor=override_tensor)
    kept = _engine.host_kept([name for name, _ in s.tensor_bytes], s.n_layer, p)
    out = [0] * (s.n_layer + 2)
    for (name, nbytes), k in zip(s.tensor_bytes, kept):
        if k:
            out[_part_of(name, s.n_layer)] += nbytes
    return out


def _part_of(name: str, n_layer: int) -> int:
    """The part index of a tensor: 1 + il for blk.<il>.*, the last for output*, else 0 (input)."""
    parts = name.split(".")
    if parts[0] == "blk" and len(parts) > 2 and parts[1].isdigit() and int(parts[1]) < n_layer:
        return int(parts[1]) + 1
    return n_layer + 1 if name.startswith("output") else 0


def _devices(s: _Shape, per_layer_kv: List[int], compute: int, runtime: int, mmproj: int, parts: List[str],
             offload_kqv: bool, host_kept: Optional[List[int]] = None,
             per_layer_state: Optional[List[int]] = None) -> List[Dict[str, Any]]:
    """Bytes per device, in order of first appearance (placement_plan::totals).
    per_layer_state: each recurrent layer's live state, held on the layer's device
    whatever offload_kqv says (its ops advance it there)."""
    out: Dict[str, Dict[str, Any]] = {}

    def at(dev: str) -> Dict[str, Any]:
        if dev not in out:
            out[dev] = {"device": dev, "weight_bytes": 0, "kv_bytes": 0, "compute_bytes": 0, "other_bytes": 0}
        return out[dev]

    input_bytes = s.weight_bytes - sum(s.layer_weight_bytes) - s.output_weight_bytes
    kept = host_kept or [0] * (s.n_layer + 2)

    def place(i: int, nbytes: int) -> None:  # what part i keeps on the host goes there
        k = kept[i] if parts[i] != "cpu" else 0
        at(parts[i])["weight_bytes"] += nbytes - k
        if k:
            at("cpu")["weight_bytes"] += k

    place(0, input_bytes)
    for il in range(s.n_layer):
        place(il + 1, s.layer_weight_bytes[il])
        kv_dev = parts[il + 1] if (offload_kqv or parts[il + 1] == "cpu") else "cpu"
        at(kv_dev)["kv_bytes"] += per_layer_kv[il]
        if per_layer_state:
            at(parts[il + 1])["other_bytes"] += per_layer_state[il]
    place(s.n_layer + 1, s.output_weight_bytes)
    compute_dev = next((d for d in parts if d != "cpu"), "cpu")
    at(compute_dev)["compute_bytes"] += compute
    at("cpu")["other_bytes"] += runtime  # the tokenizer, outputs, Llama's buffers: host memory
    at(compute_dev)["other_bytes"] += mmproj  # the vision encoder runs beside the GPU layers (use_gpu)
    for d in out.values():
        d["total_bytes"] = d["weight_bytes"] + d["kv_bytes"] + d["compute_bytes"] + d["other_bytes"]
    return list(out.values())


def plan_memory(model_path: Union[str, "os.PathLike[str]"], n_ctx: Optional[int] = None, n_parallel: int = 1,
                type_k: Union[str, int] = "f16", type_v: Union[str, int] = "f16", n_gpu_layers: int = 0,
                mmproj: Optional[Union[str, "os.PathLike[str]"]] = None, n_batch: Optional[int] = None,
                n_ubatch: Optional[int] = None, flash_attn: Union[str, bool] = "auto",
                n_threads: Optional[int] = None, embedding: bool = False, main_gpu: int = 0,
                split_mode: int = 1, tensor_split: Optional[List[float]] = None,
                offload_kqv: bool = True, n_cpu_moe: int = 0, override_tensor: Any = None,
                n_state_checkpoints: int = 8) -> MemoryPlan:
    """Predict the memory of ``Llama(model_path, n_ctx=..., ...)`` with
    ``n_parallel`` sequences, from the file alone.

    n_ctx None or 0: the model's trained length. n_batch / n_ubatch None:
    512 (Llama's defaults), capped as the engine caps them. flash_attn:
    "auto" (flash for decoders with one sequence, explicit for encoders
    and several sequences), "on"/"off" or a bool.
    n_threads None: the engine's default (physical cores); it sizes the
    attention work memory. n_gpu_layers, main_gpu, split_mode, tensor_split
    and offload_kqv: as Llama takes them (``devices``: the bytes each device
    gets). n_state_checkpoints: the context's (models with recurrent layers:
    ``state_bytes`` counts each sequence's state and that many copies of it,
    the most the checkpoints can hold). Raises ValueError for a file that is not a supported model or an
    option out of range.
    """
    path = os.fspath(model_path)
    if not os.path.isfile(path):
        raise ValueError(f"model file does not exist: {path}")
    if isinstance(n_parallel, bool) or not isinstance(n_parallel, int):
        raise TypeError(f"n_parallel must be an int, got {type(n_parallel).__name__}")
    if not 1 <= n_parallel <= _MAX_SEQUENCES:
        raise ValueError(f"n_parallel must be in [1, {_MAX_SEQUENCES}], got {n_parallel}")
    tk, tv = _kv_type("type_k", type_k), _kv_type("type_v", type_v)
    with GGUFFile(path) as f:
        s = _Shape(f)
        runtime = _header_bytes(f) + _vocab_bytes(f)
        experts = expert_summary(path, f)
    # The engine's resolve_params (context.cpp).
    ctx = s.n_ctx_train if not n_ctx else int(n_ctx)
    if ctx < 0 or ctx > (1 << 24):
        raise ValueError(f"n_ctx must be in [0, {1 << 24}], got {n_ctx}")
    nb = min(int(n_batch or 512), ctx)
    nub = min(int(n_ubatch or 512), nb)
    if s.encoder:
        nub = nb
    if flash_attn in ("auto", None, -1):
        # The engine's rule (vendor/engine/context.cpp auto_flash_attn).
        flash = not s.encoder and n_parallel <= 1
    elif flash_attn in ("on", True, 1):
        flash = True
    elif flash_attn in ("off", False, 0):
        flash = False
    else:
        raise ValueError(f"flash_attn must be 'on', 'off' or 'auto', got {flash_attn!r}")
    threads = int(n_threads) if n_threads else int(_engine.system_info()["default_n_threads"])
    n_seq_max = min(nb, _MAX_SEQUENCES) if embedding else n_parallel
    pooling = (0 if s.pooling < 0 else s.pooling) if embedding else 0

    # KV cache: row bytes per cell and layer, main and window caches.
    for t, dims, what in ((tk, s.layer_head_dim_k, "type_k"), (tv, s.layer_head_dim_v, "type_v")):
        bs = int(_engine.type_info(t)["block_size"])
        bad = [d for d in dims if bs > 1 and d % bs]  # every layer's (Gemma 4's differ)
        if bad:
            raise ValueError(f"{what}={t} needs head sizes that are a multiple of {bs}; this model's is {bad[0]}")

    # (multi-head latent attention: the values are the keys' latent, no room of their own)
    def row(il: int) -> int:
        return int(_engine.row_size(tk, s.layer_kv_k[il])) + \
            (0 if s.kv_values_in_keys else int(_engine.row_size(tv, s.layer_kv_v[il])))
    any_swa, all_swa = any(s.swa_layers), all(s.swa_layers) and s.n_layer > 0
    swa_cells = 0
    if not s.encoder and s.n_swa > 0 and any_swa and not all_swa:
        w = s.n_swa * n_seq_max + nb
        swa_cells = w if w < ctx else 0
    main_cells = 1 if s.encoder else ctx
    per_layer_kv = [0 if s.recurrent_layers[il] else
                    row(il) * (swa_cells if (swa_cells and s.swa_layers[il]) else main_cells) for il in range(s.n_layer)]
    # (the engine's default: context_params.h n_state_checkpoints)
    state = s.recurrent_bytes_per_seq * n_seq_max * (1 + int(n_state_checkpoints))
    n_rec = sum(s.recurrent_layers)
    live = [s.recurrent_bytes_per_seq * n_seq_max // n_rec if (n_rec and r) else 0 for r in s.recurrent_layers]
    kv = sum(per_layer_kv)

    compute = _compute_bytes(s, ctx, nub, threads, flash, pooling != 0)
    outputs = 0 if s.encoder else 4 * s.n_vocab  # logits of the last row
    if embedding:
        outputs += 4 * s.n_embd + (4 * n_seq_max * s.n_embd if pooling else 0)
    runtime += outputs + 4 * ctx + 3 * 4 * nb  # + Llama's input_ids, the context's per-row cell tables

    mm = 0
    if mmproj is not None:
        mp = os.fspath(mmproj)
        if not os.path.isfile(mp):
            raise ValueError(f"mmproj file does not exist: {mp}")
        with GGUFFile(mp) as g:
            mm = sum(t.nbytes for t in g.tensors) + _header_bytes(g)

    devices = _devices(s, per_layer_kv, compute, runtime + state - sum(live), mm,
                       _part_devices(s, n_gpu_layers, main_gpu, split_mode, tensor_split), offload_kqv,
                       _host_kept_bytes(s, n_cpu_moe, override_tensor), live)
    return MemoryPlan(model_path=path, n_ctx=ctx, n_parallel=n_parallel, n_batch=nb, n_ubatch=nub, flash_attn=flash,
                      type_k=tk, type_v=tv, weights_bytes=s.weight_bytes, kv_bytes=kv, compute_bytes=compute,
                      runtime_bytes=runtime, mmproj_bytes=mm, kv_cells=main_cells, kv_swa_cells=swa_cells,
                      state_bytes=state,
                      devices=devices, experts=experts.as_dict() if experts else None)
