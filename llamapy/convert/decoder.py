"""The shared writer for decoder-only language models (llama, qwen2, qwen3, ...): a Hugging
Face folder in, a GGUF file out, matching what llama.cpp 0.3.36's ``convert_hf_to_gguf.py``
writes key for key and tensor for tensor (apart from provenance such as general.name).

A family (one file each: llama.py, qwen2.py, ...) is a ``DecoderFamily``: the GGUF
architecture, its extra metadata, and a per-tensor hook (llama's q/k row permutation). This
module does the rest:

- hyperparameters -> ``<arch>.*`` keys (block_count, context_length, embedding_length,
  feed_forward_length, head counts, rope base / scaling, norm epsilons, key/value lengths);
- tensor names: Hugging Face's LLaMA-style names -> GGUF's (``_TENSOR_NAMES``);
- output types: F32 / F16 / BF16 / Q8_0 for weight matrices; vectors, norms and biases stay
  F32 as in llama.cpp; Q8_0 falls back to F16 for rows not a multiple of 32 (also as there);
- tensors are streamed: the header is written from shapes alone, then each tensor is read
  from its safetensors memory map, converted and written before the next is touched;
- the tokenizer through vocab.py.

Per-expert MoE matrices (``mlp.experts.<e>.{gate,up,down}_proj``, Mixtral's
``block_sparse_moe.experts.<e>.w{1,2,3}``) are stacked per layer into
``ffn_{gate,up,down}_exps`` (one layer's experts in memory at a time); routers stay F32.

Families split or rename what the shared table does not cover (fused experts, shared experts,
MLA) through the DecoderFamily hooks. Not here: multimodal projectors.
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from .checkpoint import Checkpoint
from .vocab import read_vocab, write_vocab

log = logging.getLogger("llamapy.convert")

OUTTYPES = ("f32", "f16", "bf16", "q8_0")
_FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}  # general.file_type (llama_ftype)
_GATING = {"softmax": 1, "sigmoid": 2, "sqrtsoftplus": 4}  # expert_gating_func (llama_expert_gating_func_type)

# Hugging Face name (LLaMA-style checkpoints) -> GGUF name; {0} is the layer.
_TENSOR_NAMES = [
    (r"model\.embed_tokens\.weight", "token_embd.weight"),
    (r"model\.norm\.weight", "output_norm.weight"),
    (r"lm_head\.weight", "output.weight"),
    (r"model\.layers\.(\d+)\.input_layernorm\.weight", "blk.{0}.attn_norm.weight"),
    (r"model\.layers\.(\d+)\.post_attention_layernorm\.weight", "blk.{0}.ffn_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.q_proj\.(weight|bias)", "blk.{0}.attn_q.{1}"),
    (r"model\.layers\.(\d+)\.self_attn\.k_proj\.(weight|bias)", "blk.{0}.attn_k.{1}"),
    (r"model\.layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)", "blk.{0}.attn_v.{1}"),
    (r"model\.layers\.(\d+)\.self_attn\.o_proj\.(weight|bias)", "blk.{0}.attn_output.{1}"),
    (r"model\.layers\.(\d+)\.self_attn\.q_norm\.weight", "blk.{0}.attn_q_norm.weight"),
    (r"model\.layers\.(\d+)\.self_attn\.k_norm\.weight", "blk.{0}.attn_k_norm.weight"),
    (r"model\.layers\.(\d+)\.mlp\.gate_proj\.(weight|bias)", "blk.{0}.ffn_gate.{1}"),
    (r"model\.layers\.(\d+)\.mlp\.up_proj\.(weight|bias)", "blk.{0}.ffn_up.{1}"),
    (r"model\.layers\.(\d+)\.mlp\.down_proj\.(weight|bias)", "blk.{0}.ffn_down.{1}"),
    (r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.gate\.weight", "blk.{0}.ffn_gate_inp.weight"),  # MoE router
    # DeepSeek-V3-style routing: the selection-only expert bias and the shared experts
    (r"model\.layers\.(\d+)\.mlp\.gate\.e_score_correction_bias", "blk.{0}.exp_probs_b.bias"),
    (r"model\.layers\.(\d+)\.mlp\.shared_experts\.(gate|up|down)_proj\.weight", "blk.{0}.ffn_{1}_shexp.weight"),
]
_TENSOR_RES = [(re.compile(p), out) for p, out in _TENSOR_NAMES]
# the non-text parts of vision / audio-language checkpoints, left out of the text model as
# llama.cpp's converter leaves them (prefixes, then names containing these)
_MULTIMODAL = re.compile(r"^(?:mlp|vit\.|vpm\.|siglip2\.|conformer\.|merger\.|resampler\.|sound_encoder\.|"
                         r"sound_projection\.|speech_embeddings\.)|visual\.|vision\.|audio\.|talker\.|vision_|"
                         r"audio_|token2wav\.|code2wav\.|projector\.|pre_mm_projector_norm|image_newline|"
                         r"view_seperator|patch_embed|patch_merger\.|patch_merge_mlp\.|model\.connector\.")
# buffers some checkpoints carry that no GGUF has
_SKIPPED = re.compile(r".*(\.rotary_emb\.inv_freq|\.attention\.masked_bias|\.attention\.bias)")

# hook(gguf_name, array, cfg) -> array: a family's change to one tensor (e.g. llama's permutation)
TensorHook = Callable[[str, np.ndarray, dict], np.ndarray]


@dataclass(frozen=True)
class DecoderFamily:
    arch: str                                   # general.architecture
    required: Tuple[str, ...]                   # per-layer GGUF tensors every checkpoint must have
    extra_kv: Optional[Callable[[object, dict, str], None]] = None   # (writer, cfg, hf_dir): family keys
    tensor_hook: Optional[TensorHook] = None
    # tensors a family adds that are not in the checkpoint (e.g. rope factors): cfg -> {name: array}
    extra_tensors: Optional[Callable[[dict], Dict[str, np.ndarray]]] = None
    # Hugging Face names this family maps differently from the shared table (checked first)
    tensor_names: Tuple[Tuple[str, str], ...] = ()
    # an embedding with more rows than the vocabulary is cut to it (Gemma 3), else refused
    trim_embedding: bool = False
    # config.json values a family assumes when the file leaves them out
    config_defaults: Tuple[Tuple[str, object], ...] = ()
    # (writer, cfg, n_layer): a family that writes its own hyperparameter set instead of the
    # shared one (Gemma 2); general.file_type is still written by the shared writer
    write_hparams: Optional[Callable[[object, dict, int], None]] = None
    # hf name, shape, cfg -> [(gguf name, shape, fn(array) -> array)] for a tensor the family
    # splits itself (Granite MoE's fused gate+up experts), or None to map it as usual
    split_tensor: Optional[Callable[[str, Tuple[int, ...], dict], Optional[list]]] = None
    # (hf name, cfg) -> True for a checkpoint tensor this family leaves out (Gemma 2's lm_head:
    # tied, but saved; DeepSeek's multi-token-prediction layers)
    skip: Optional[Callable[[str, dict], bool]] = None
    # whole-model GGUF tensors (no .weight) every checkpoint must have (LFM2: no output_norm)
    required_global: Tuple[str, ...] = ("token_embd", "output_norm")
    # (hf name, cfg) -> the name the family maps it under (Qwen3.5's mtp.* into layer form);
    # applied before everything else but skip
    rename: Optional[Callable[[str, dict], str]] = None
    # cfg -> cfg: a family's reading of its config before anything is written (Granite drops head_dim)
    prepare_config: Optional[Callable[[dict], dict]] = None
    # (ckpt, cfg) -> [(GGUF name, loader of its already encoded bytes, logical shape, GGML type
    # name)]: tensors a family writes as they are stored (gpt-oss's MXFP4 experts), placed
    # before the checkpoint's as llama.cpp does; with them, split_tensor skips their sources
    raw_tensors: Optional[Callable[[Checkpoint, dict], list]] = None
    # (cfg, outtype) -> general.file_type when the family's differs from the outtype's (None: it)
    file_type: Optional[Callable[[dict, str], Optional[int]]] = None
    # (hf_dir, cfg, tokenizer_pre) -> Vocab: a family's own tokenizer reader (Gemma 4)
    read_vocab: Optional[Callable[[str, dict, Optional[str]], object]] = None
    # (vocab, cfg, hf_dir): a family's changes to the tokenizer metadata
    adjust_vocab: Optional[Callable[[object, dict, str], None]] = None


def gguf_name(hf_name: str, family: Optional[DecoderFamily] = None) -> Optional[str]:
    if _SKIPPED.fullmatch(hf_name):
        return None
    own = [(re.compile(p), out) for p, out in family.tensor_names] if family else []
    for rx, out in own + _TENSOR_RES:
        m = rx.fullmatch(hf_name)
        if m:
            return out.format(*m.groups())
    raise NotImplementedError(f"tensor {hf_name!r} has no GGUF name in this converter")


def need(cfg: dict, key: str):
    """A config.json value the conversion cannot do without."""
    if key not in cfg or cfg[key] is None:
        raise ValueError(f"config.json lacks {key!r}")
    return cfg[key]


def first(cfg: dict, keys: Tuple[str, ...]):
    return next((cfg[k] for k in keys if k in cfg), None)


def rope_parameters(cfg: dict) -> dict:
    """transformers 5 keeps rope settings in ``rope_parameters``; older configs in
    ``rope_scaling`` + ``rope_theta``. One dict either way."""
    rp = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    if "full_attention" not in rp and "sliding_attention" not in rp:
        theta = first(cfg, ("global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta",
                            "rotary_emb_base"))
        if "rope_theta" not in rp and theta is not None:
            rp["rope_theta"] = theta
        if "rope_type" not in rp and rp.get("type") is not None:
            rp["rope_type"] = rp["type"]
        omax = cfg.get("original_max_position_embeddings")
        if "original_max_position_embeddings" not in rp and omax is not None:
            rp["original_max_position_embeddings"] = omax
    return rp


def write_gating_func(w, value: int) -> None:
    """``<arch>.expert_gating_func`` by number: gguf 0.19's enum lacks sqrt-softplus (4)."""
    import gguf

    w.add_uint32(gguf.Keys.LLM.EXPERT_GATING_FUNC.format(arch=w.arch), value)


def _write_hparams(w, cfg: dict, n_layer: int, file_type: int) -> None:
    import gguf

    w.add_block_count(n_layer)
    for keys, add in (
        (("max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length",
          "model_max_length"), w.add_context_length),
        (("hidden_size", "n_embd", "dim"), w.add_embedding_length),
        (("prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner",
          "hidden_dim"), w.add_feed_forward_length),
        (("num_attention_heads", "n_head", "n_heads"), w.add_head_count),
        (("num_key_value_heads", "n_kv_heads"), w.add_head_count_kv),
    ):
        v = first(cfg, keys)
        if v is not None:
            add(v)
    if cfg.get("is_causal") is False:
        w.add_causal_attention(False)
    rp = rope_parameters(cfg)
    full = rp.get("full_attention", rp)
    kind = full.get("rope_type")
    if kind not in (None, "default"):
        factor = full.get("factor")
        if kind == "linear" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
            w.add_rope_scaling_factor(factor)
        elif kind == "yarn" and factor is not None:
            w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            w.add_rope_scaling_factor(factor)
            w.add_rope_scaling_orig_ctx_len(need(full, "original_max_position_embeddings"))
            for key, add in (("extrapolation_factor", w.add_rope_scaling_yarn_ext_factor),
                             ("beta_fast", w.add_rope_scaling_yarn_beta_fast),
                             ("beta_slow", w.add_rope_scaling_yarn_beta_slow)):
                if full.get(key) is not None:
                    add(full[key])
            attn = full.get("attention_factor", full.get("attn_factor"))
            if attn is not None:
                w.add_rope_scaling_yarn_attn_factor(attn)
        elif kind in ("su", "longrope"):
            w.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        elif kind.lower() in ("llama3", "proportional"):
            pass  # no keys: llama.py / gemma4.py write the rope_freqs tensor
        else:
            raise NotImplementedError(f"rope type {kind!r} is not converted (linear, yarn, longrope, llama3)")
    if rp.get("mrope_section") is not None:  # multimodal rope: [time, height, width, extra]
        w.add_rope_dimension_sections((list(rp["mrope_section"]) + [0, 0, 0, 0])[:4])
    if full.get("rope_theta") is not None:
        w.add_rope_freq_base(full["rope_theta"])
    local = rp.get("sliding_attention", {}).get("rope_theta")
    if local is not None:
        w.add_rope_freq_base_swa(local)
    for keys, add in ((("rms_norm_eps", "norm_eps"), w.add_layer_norm_rms_eps),
                      (("layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"), w.add_layer_norm_eps)):
        v = first(cfg, keys)
        if v is not None:
            add(v)
    for keys, add in ((("num_local_experts", "num_experts", "n_routed_experts"), w.add_expert_count),
                      (("num_experts_per_tok", "num_experts_per_token", "top_k_experts"), w.add_expert_used_count)):
        v = first(cfg, keys)
        if v is not None:
            add(v)
    if cfg.get("n_group") is not None:
        w.add_expert_group_count(cfg["n_group"])
    if cfg.get("topk_group") is not None:
        w.add_expert_group_used_count(cfg["topk_group"])
    score = first(cfg, ("score_function", "scoring_func", "score_func", "moe_router_activation",
                        "moe_router_activation_func", "expert_selection_fn"))
    if score is not None:
        if score not in _GATING:
            raise NotImplementedError(f"expert score function {score!r} is not converted ({', '.join(_GATING)})")
        write_gating_func(w, _GATING[score])
    if cfg.get("head_dim") is not None:
        w.add_key_length(cfg["head_dim"])
        w.add_value_length(cfg["head_dim"])
    w.add_file_type(file_type)


# tensors llama.cpp keeps in F32 at every outtype: routers and the short convolutions
_ALWAYS_F32 = (".ffn_gate_inp.", ".ffn_gate_inp_shexp.", ".ssm_conv1d.", ".shortconv.conv.")


def _target_type(name: str, shape: Tuple[int, ...], outtype: str):
    """The GGML type llama.cpp's converter picks for a tensor."""
    import gguf

    T = gguf.GGMLQuantizationType
    if len(shape) <= 1 or name.endswith("_norm.weight") or not name.endswith(".weight") \
            or name == "rope_freqs.weight" or any(k in name for k in _ALWAYS_F32):
        return T.F32
    if outtype == "q8_0":
        return T.Q8_0 if shape[-1] % 32 == 0 else T.F16  # as there: Q8_0 needs whole blocks
    return {"f32": T.F32, "f16": T.F16, "bf16": T.BF16}[outtype]


def _encode(x: np.ndarray, qtype) -> np.ndarray:
    """float32 array -> the bytes (or float array) written for ``qtype``."""
    import gguf

    T = gguf.GGMLQuantizationType
    if qtype == T.F32:
        return np.ascontiguousarray(x, dtype=np.float32)
    if qtype == T.F16:
        return np.ascontiguousarray(x, dtype=np.float16)
    from .. import quants  # the engine's kernels (bit-compatible with llama.cpp's)

    return quants.quantize(np.ascontiguousarray(x, dtype=np.float32), qtype.name)


def _nbytes(shape: Tuple[int, ...], qtype) -> int:
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return n // block * size


def convert_decoder(family: DecoderFamily, hf_dir: str, cfg: dict, out_path: str, outtype: str = "f16",
                    tokenizer_pre: Optional[str] = None,
                    log_fn: Callable[[str], None] = lambda s: None) -> str:
    import gguf

    if outtype not in OUTTYPES:
        raise ValueError(f"outtype must be one of {', '.join(OUTTYPES)}, got {outtype!r}")
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    cfg = {**dict(family.config_defaults), **cfg}
    if family.prepare_config is not None:
        cfg = family.prepare_config(dict(cfg))
    n_layer = int(need(cfg, "num_hidden_layers"))
    for key in ("hidden_size", "num_attention_heads", "vocab_size"):
        need(cfg, key)
    ckpt = Checkpoint(hf_dir)

    raw = family.raw_tensors(ckpt, cfg) if family.raw_tensors is not None else []
    plan = _plan(family, ckpt, cfg, n_layer, [(name, load, shape) for name, load, shape, _ in raw])
    raw_types = {name: qtype for name, _, _, qtype in raw}
    have = {p[0] for p in plan}
    # "a|b": either (a dense FFN or its experts)
    needed = [[f"{t}.weight"] for t in family.required_global] + [
        [f"blk.{i}.{alt}.weight" for alt in t.split("|")] for i in range(n_layer) for t in family.required]
    missing = [alts[0] for alts in needed if not any(a in have for a in alts)]
    if missing:
        raise ValueError(f"{hf_dir}: the checkpoint lacks tensor {missing[0]}"
                         + (f" ({len(missing)} missing in all)" if len(missing) > 1 else ""))
    vocab = (family.read_vocab or read_vocab)(hf_dir, cfg, tokenizer_pre)
    if family.adjust_vocab is not None:
        family.adjust_vocab(vocab, cfg, hf_dir)
    n_vocab = len(vocab.tokens)
    for k, (name, load, shape) in enumerate(plan):
        if name in ("token_embd.weight", "output.weight") and shape[0] != n_vocab:
            if not (family.trim_embedding and shape[0] > n_vocab):
                raise ValueError(f"the vocabulary has {n_vocab} tokens but {name} has {shape[0]} rows")
            plan[k] = (name, load, (n_vocab,) + tuple(shape[1:]))

    n_params, n_shared, n_expert, n_experts = _param_counts(plan)
    with part_writer(out_path, family.arch) as w:
        w.add_type(gguf.GGUFType.MODEL)
        w.add_name(_model_name(hf_dir, cfg))
        w.add_size_label(gguf.size_label(n_params, n_shared, n_expert, n_experts))
        file_type = family.file_type(cfg, outtype) if family.file_type is not None else None
        file_type = _FILE_TYPE[outtype] if file_type is None else file_type
        if family.write_hparams is not None:
            family.write_hparams(w, cfg, n_layer)
            w.add_file_type(file_type)
        else:
            _write_hparams(w, cfg, n_layer, file_type)
        if family.extra_kv:
            family.extra_kv(w, cfg, hf_dir)
        w.add_quantization_version(gguf.GGML_QUANT_VERSION)
        write_vocab(w, vocab)
        types = []
        for name, _, shape in plan:
            qtype = gguf.GGMLQuantizationType[raw_types[name]] if name in raw_types else \
                _target_type(name, shape, outtype)
            types.append(qtype)
            w.add_tensor_info(name, shape, np.dtype(np.float32), _nbytes(shape, qtype), raw_dtype=qtype)
        w.write_header_to_file(path=w.path)
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for (name, load, shape), qtype in zip(plan, types):
            if name in raw_types:  # already encoded
                w.write_tensor_data(np.ascontiguousarray(load()))
                log_fn(f"{name:32s} {str(shape):16s} -> {qtype.name} (as stored)")
                continue
            x = load()
            x = x[:shape[0]] if x.shape != shape else x  # a trimmed embedding
            if family.tensor_hook is not None:
                x = family.tensor_hook(name, x, cfg)
            w.write_tensor_data(_encode(x, qtype))
            log_fn(f"{name:32s} {str(shape):16s} -> {qtype.name}")
    return out_path


# one expert's matrix in per-expert checkpoints: Qwen-MoE style (gate/up/down_proj) and Mixtral
# style (w1 gate, w2 down, w3 up). A layer's stacked tensors are written in the order of these
# names (down, gate, up / w1, w2, w3), as the reference does.
_EXPERT = re.compile(r"model\.layers\.(\d+)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\."
                     r"(gate_proj|up_proj|down_proj|w1|w2|w3)\.weight")
_EXPERT_KIND = {"gate_proj": "gate", "up_proj": "up", "down_proj": "down", "w1": "gate", "w2": "down", "w3": "up"}
Plan = List[Tuple[str, Callable[[], np.ndarray], Tuple[int, ...]]]


def _plan(family: DecoderFamily, ckpt: Checkpoint, cfg: dict, n_layer: int, raw: Plan) -> Plan:
    """(GGUF name, loader of its float32 data, shape) in the order llama.cpp's converter writes:
    family-made tensors first, then those it writes as stored, then the checkpoint's in file order, a layer's experts stacked
    into (n_expert, ...) tensors (down, gate, up) where its last expert matrix appears."""
    plan: Plan = []
    extra = family.extra_tensors(cfg) if family.extra_tensors else {}
    for name, arr in extra.items():
        plan.append((name, lambda a=arr: a, tuple(arr.shape)))
    plan.extend(raw)
    pending: Dict[int, Dict[Tuple[str, int], str]] = {}
    n_expert = first(cfg, ("num_local_experts", "num_experts", "n_routed_experts"))
    for src in ckpt.names():  # src: the checkpoint's name; hf_name: as the family reads it
        if _MULTIMODAL.search(src):
            continue  # a vision-language checkpoint's tower / projector: --mmproj writes those
        hf_name = src.replace("language_model.", "")  # its text model, named as a text checkpoint
        if family.skip is not None and family.skip(hf_name, cfg):
            continue
        hf_name = family.rename(hf_name, cfg) if family.rename is not None else hf_name
        m = _EXPERT.fullmatch(hf_name)
        if m:
            if not n_expert:
                raise ValueError(f"the checkpoint has expert tensors ({hf_name}) but config.json no num_experts")
            il, xid, kind = int(m.group(1)), int(m.group(2)), m.group(3)  # kind: the HF name
            if xid >= n_expert:
                raise ValueError(f"{hf_name}: expert {xid} but config.json's num_experts is {n_expert}")
            layer = pending.setdefault(il, {})
            layer[(kind, xid)] = src
            if len(layer) == 3 * n_expert:
                kinds = sorted({k for k, _ in layer})
                if len(kinds) != 3:
                    raise ValueError(f"layer {il} mixes expert naming styles: {kinds}")
                for kind in kinds:
                    names = [layer[(kind, x)] for x in range(n_expert)]
                    shape = (n_expert,) + tuple(ckpt.shape(names[0]))
                    if any(tuple(ckpt.shape(n)) != shape[1:] for n in names):
                        raise ValueError(f"layer {il}'s {kind} experts differ in shape")
                    load = (lambda ns=names: np.stack([np.asarray(ckpt.get(n), dtype=np.float32) for n in ns]))
                    plan.append((f"blk.{il}.ffn_{_EXPERT_KIND[kind]}_exps.weight", load, shape))
                del pending[il]
            continue
        parts = family.split_tensor(hf_name, tuple(ckpt.shape(src)), cfg) if family.split_tensor else None
        if parts is not None:
            for name, shape, cut in parts:
                plan.append((name, lambda n=src, f=cut: f(np.asarray(ckpt.get(n), dtype=np.float32)), shape))
            continue
        name = gguf_name(hf_name, family)
        if name is not None:
            plan.append((name, lambda n=src: np.asarray(ckpt.get(n), dtype=np.float32), tuple(ckpt.shape(src))))
    if pending:
        il, layer = next(iter(pending.items()))
        raise ValueError(f"layer {il} has {len(layer)} of its {3 * n_expert} expert matrices")
    return plan


@contextlib.contextmanager
def part_writer(out_path: str, arch: str) -> Iterator[Any]:
    """A GGUFWriter on OUT.part, renamed to OUT when the block ends and removed
    when it raises: an interrupted or failed conversion leaves no half-written
    OUT (and an existing OUT untouched)."""
    import gguf

    part = os.path.abspath(out_path) + ".part"
    w = gguf.GGUFWriter(part, arch)
    try:
        yield w
    except BaseException:
        w.close()
        if os.path.exists(part):
            os.remove(part)
        raise
    w.close()
    os.replace(part, out_path)


def _param_counts(plan: Plan) -> Tuple[int, int, int, int]:
    """(total, shared, per-expert, expert count) parameters, for general.size_label."""
    total = shared = expert = n_sum = n_t = 0
    for name, _, shape in plan:
        size = int(np.prod(shape, dtype=np.int64))
        total += size
        if "_exps." in name and len(shape) >= 3:
            count = shape[-2 if ".bias" in name else -3]
            expert += size // count
            n_sum += count
            n_t += 1
        else:
            shared += size
    return total, shared, expert, (n_sum // n_t if n_t else 0)


def _model_name(hf_dir: str, cfg: dict) -> str:
    return os.path.basename(os.path.normpath(cfg.get("_name_or_path") or hf_dir)) or "model"
