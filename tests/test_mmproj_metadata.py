"""llamapy.multimodal.mmproj: projector GGUF metadata, validation, tensor inventory, width check.

Small projector files are written with gguf.GGUFWriter in tmp_path (metadata + tiny tensors);
the converted VLM fixtures in tests/data/vlm/ are read too when they exist.
"""
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from llamapy.multimodal.mmproj import SUPPORTED_PROJECTOR_TYPES, MmprojInfo, check_compatible, read_mmproj

N_EMBD, PATCH, IMAGE, LM = 8, 4, 16, 24   # vision width, patch px, image px, language-model width
V = "clip.vision."

_BASE_KV = {
    "clip.has_vision_encoder": True,
    V + "embedding_length": N_EMBD,
    V + "feed_forward_length": 16,
    V + "block_count": 2,
    V + "projection_dim": 12,
    V + "attention.head_count": 2,
    V + "attention.layer_norm_epsilon": 1e-6,
    V + "image_size": IMAGE,
    V + "patch_size": PATCH,
    V + "image_mean": [0.5, 0.5, 0.5],
    V + "image_std": [0.25, 0.5, 1.0],
}


def _f16(*shape):
    return np.zeros(shape, np.float16)


_PROJ_TENSORS = {  # numpy shapes: ggml's ne is reversed
    "mlp": {"mm.0.weight": _f16(LM, N_EMBD), "mm.0.bias": _f16(LM), "mm.2.weight": _f16(LM, LM), "mm.2.bias": _f16(LM)},
    "gemma3": {"mm.input_projection.weight": _f16(N_EMBD, LM), "mm.soft_emb_norm.weight": _f16(N_EMBD)},
    "idefics3": {"mm.model.fc.weight": _f16(LM, N_EMBD * 4)},
    "qwen2vl_merger": {"mm.0.weight": _f16(32, 32), "mm.0.bias": _f16(32), "mm.2.weight": _f16(LM, 32),
                       "mm.2.bias": _f16(LM)},
}
_PROJ_TENSORS["qwen2.5vl_merger"] = _PROJ_TENSORS["qwen2vl_merger"]

_TYPE_KV = {
    "mlp": {},
    "gemma3": {"clip.use_gelu": True},
    "idefics3": {"clip.use_gelu": True, V + "projector.scale_factor": 2, V + "preproc_image_size": 64},
    "qwen2vl_merger": {},
    "qwen2.5vl_merger": {"clip.use_silu": True, V + "n_wa_pattern": 2},
}


def _add(writer, key, value):
    if isinstance(value, bool):
        writer.add_bool(key, value)
    elif isinstance(value, int):
        writer.add_uint32(key, value)
    elif isinstance(value, float):
        writer.add_float32(key, value)
    elif isinstance(value, str):
        writer.add_string(key, value)
    elif isinstance(value, list) and value and isinstance(value[0], float):
        writer.add_array(key, [float(v) for v in value])
    else:
        writer.add_array(key, value)


def write_mmproj(path, ptype="mlp", kv=None, drop=(), tensors=None, arch="clip", type_key="clip.projector_type"):
    """A tiny projector GGUF: base metadata + per-type keys + ``kv`` overrides, minus ``drop``."""
    writer = gguf.GGUFWriter(str(path), arch)
    values = dict(_BASE_KV)
    if ptype is not None:
        values[type_key] = ptype
        values.update(_TYPE_KV.get(ptype, {}))
    values.update(kv or {})
    for key, value in values.items():
        if key not in drop and value is not None:
            _add(writer, key, value)
    all_tensors = {"v.patch_embd.weight": _f16(N_EMBD, 3, PATCH, PATCH), "v.class_embd": _f16(N_EMBD)}
    all_tensors.update(_PROJ_TENSORS.get(ptype or "mlp", _PROJ_TENSORS["mlp"]))
    all_tensors.update(tensors or {})
    for name, array in all_tensors.items():
        if array is not None:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("ptype", SUPPORTED_PROJECTOR_TYPES)
def test_every_supported_type_reads(tmp_path, ptype):
    info = read_mmproj(write_mmproj(tmp_path / "p.gguf", ptype))
    assert isinstance(info, MmprojInfo)
    assert info.projector_type == ptype
    assert (info.n_embd, info.n_layer, info.n_head, info.n_head_kv, info.n_embd_head) == (N_EMBD, 2, 2, 2, 4)
    assert (info.n_ff, info.projection_dim, info.image_size, info.patch_size) == (16, 12, IMAGE, PATCH)
    assert info.eps == pytest.approx(1e-6)
    assert info.image_mean == (0.5, 0.5, 0.5) and info.image_std == (0.25, 0.5, 1.0)
    assert info.n_mmproj_embd == LM
    check_compatible(info, LM)


def test_per_type_defaults(tmp_path):
    mlp = read_mmproj(write_mmproj(tmp_path / "a.gguf", "mlp"))
    assert (mlp.n_merge, mlp.ffn_op, mlp.has_class_embd) == (1, "gelu_quick", True)
    gemma = read_mmproj(write_mmproj(tmp_path / "b.gguf", "gemma3"))
    assert (gemma.n_merge, gemma.ffn_op) == (4, "gelu")
    idefics = read_mmproj(write_mmproj(tmp_path / "c.gguf", "idefics3"))
    assert (idefics.n_merge, idefics.preproc_image_size) == (2, 64)
    qwen = read_mmproj(write_mmproj(tmp_path / "d.gguf", "qwen2.5vl_merger"))
    assert (qwen.n_merge, qwen.ffn_op, qwen.n_wa_pattern) == (2, "silu", 2)
    area = PATCH * PATCH * 2 * 2  # llama.cpp: set_limit_image_tokens(8, 4096)
    assert (qwen.image_min_pixels, qwen.image_max_pixels) == (8 * area, 4096 * area)
    merged = read_mmproj(write_mmproj(tmp_path / "e.gguf", "qwen2vl_merger", kv={V + "spatial_merge_size": 1}))
    assert merged.n_merge == 1


def test_optional_hyperparameters(tmp_path):
    kv = {V + "feature_layer": [1, 2], V + "image_grid_pinpoints": [16, 32, 32, 16, 32, 32],
          V + "mm_patch_merge_type": "spatial_unpad", V + "attention.head_count_kv": 1,
          V + "window_size": 112, V + "wa_layer_indexes": [0, 1], "general.name": "tiny llava"}
    info = read_mmproj(write_mmproj(tmp_path / "p.gguf", "mlp", kv=kv, tensors={"v.image_newline": _f16(N_EMBD)}))
    assert info.feature_layers == (1, 2)
    assert info.image_grid_pinpoints == ((16, 32), (32, 16), (32, 32))
    assert info.mm_patch_merge_type == "spatial_unpad"
    assert (info.n_head_kv, info.window_size, info.wa_layer_indexes, info.name) == (1, 112, (0, 1), "tiny llava")
    assert info.has_image_newline


def test_projector_type_sources(tmp_path):
    vision_key = write_mmproj(tmp_path / "a.gguf", "gemma3", type_key=V + "projector_type")
    assert read_mmproj(vision_key).projector_type == "gemma3"
    omni = write_mmproj(tmp_path / "b.gguf", "qwen2.5o", kv=_TYPE_KV["qwen2.5vl_merger"],
                        tensors=_PROJ_TENSORS["qwen2vl_merger"])
    assert read_mmproj(omni).projector_type == "qwen2.5vl_merger"
    legacy = write_mmproj(tmp_path / "c.gguf", None)  # old llava files: no projector_type key
    assert read_mmproj(legacy).projector_type == "mlp"


def test_tensor_inventory(tmp_path):
    info = read_mmproj(write_mmproj(tmp_path / "p.gguf", "mlp"))
    names = [t.name for t in info.tensors]
    assert names[:2] == ["v.patch_embd.weight", "v.class_embd"] and "mm.2.weight" in names
    patch = info.tensor("v.patch_embd.weight")
    assert (patch.type_name, patch.shape, patch.ne) == ("F16", (N_EMBD, 3, PATCH, PATCH), (PATCH, PATCH, 3, N_EMBD))
    assert info.tensor("nope") is None


@pytest.mark.parametrize("ptype,match", [
    ("ldp", "'ldp' is not supported; supported: mlp, gemma3"),
    ("pixtral", "'pixtral' is not supported"),
    ("my_new_projector", "llama.cpp does not know it either"),
])
def test_unsupported_projector_type(tmp_path, ptype, match):
    with pytest.raises(NotImplementedError, match=match):
        read_mmproj(write_mmproj(tmp_path / "p.gguf", ptype))


def test_yi_style_mlp_norm_is_unsupported(tmp_path):
    path = write_mmproj(tmp_path / "p.gguf", "mlp", tensors={"mm.3.weight": _f16(LM, LM), "mm.3.bias": _f16(LM)})
    with pytest.raises(NotImplementedError, match="mlp_norm"):
        read_mmproj(path)


@pytest.mark.parametrize("key", [
    "clip.has_vision_encoder", V + "embedding_length", V + "feed_forward_length", V + "block_count",
    V + "projection_dim", V + "attention.head_count", V + "attention.layer_norm_epsilon", V + "image_size",
    V + "patch_size", V + "image_mean", V + "image_std",
])
def test_missing_required_key(tmp_path, key):
    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        read_mmproj(write_mmproj(tmp_path / "p.gguf", "mlp", drop=(key,)))


def test_qwen25_needs_window_pattern(tmp_path):
    with pytest.raises(ValueError, match="n_wa_pattern"):
        read_mmproj(write_mmproj(tmp_path / "p.gguf", "qwen2.5vl_merger", drop=(V + "n_wa_pattern",)))


@pytest.mark.parametrize("ptype,kv,match", [
    ("mlp", {V + "image_size": 0}, "image_size = 0"),
    ("mlp", {V + "patch_size": 0}, "patch_size = 0"),
    ("mlp", {V + "embedding_length": 0}, "embedding_length = 0"),
    ("mlp", {V + "block_count": 0}, "block_count = 0"),
    ("mlp", {V + "image_size": 18}, "does not divide"),
    ("mlp", {V + "image_size": 9000}, "too large"),
    ("mlp", {V + "image_mean": [0.5, 0.5]}, "image_mean must hold 3"),
    ("mlp", {V + "image_std": [0.5, 0.5, 0.5, 0.5]}, "image_std must hold 3"),
    ("mlp", {V + "image_std": [0.5, 0.0, 0.5]}, "image_std .* positive"),
    ("mlp", {V + "image_size": 16.0}, "image_size must be an integer, got f32"),
    ("mlp", {V + "image_mean": [1, 2, 3]}, "image_mean must be an array of f32"),
    ("mlp", {V + "attention.layer_norm_epsilon": 0.0}, "layer_norm_epsilon = 0.0"),
    ("mlp", {V + "attention.head_count": 3}, "not divisible"),
    ("mlp", {V + "feature_layer": [1, 5]}, "feature_layer holds 5"),
    ("mlp", {V + "image_grid_pinpoints": [16, 32, 32]}, "pairs"),
    ("mlp", {V + "mm_patch_merge_type": "diagonal"}, "mm_patch_merge_type"),
    ("mlp", {"clip.use_gelu": True, "clip.use_silu": True}, "both true"),
    ("mlp", {"clip.has_vision_encoder": False}, "has_vision_encoder"),
    ("gemma3", {V + "projector.scale_factor": 3}, "scale_factor = 3"),
    ("idefics3", {V + "projector.scale_factor": 0}, "scale_factor = 0"),
    ("qwen2vl_merger", {V + "feed_forward_length": 0}, None),  # old Qwen surgery files: n_ff = 0 is fine
])
def test_bad_values(tmp_path, ptype, kv, match):
    path = write_mmproj(tmp_path / "p.gguf", ptype, kv=kv)
    if match is None:
        assert read_mmproj(path).n_ff == 0
        return
    with pytest.raises(ValueError, match=match):
        read_mmproj(path)


def test_bad_tensors_and_architecture(tmp_path):
    with pytest.raises(ValueError, match="'mm.2.weight', which is missing"):
        read_mmproj(write_mmproj(tmp_path / "a.gguf", "mlp", tensors={"mm.2.weight": None}))
    with pytest.raises(ValueError, match="v.patch_embd.weight"):
        read_mmproj(write_mmproj(tmp_path / "b.gguf", "mlp", tensors={"v.patch_embd.weight": _f16(N_EMBD, 3, 5, 5)}))
    with pytest.raises(ValueError, match="not 'clip'"):
        read_mmproj(write_mmproj(tmp_path / "c.gguf", "mlp", arch="llama"))
    garbage = tmp_path / "d.gguf"
    garbage.write_bytes(b"GGUF" + b"\xff" * 40)
    with pytest.raises(ValueError):
        read_mmproj(garbage)


def test_check_compatible_names_both_widths(tmp_path):
    info = read_mmproj(write_mmproj(tmp_path / "p.gguf", "gemma3"))
    check_compatible(info, LM)
    with pytest.raises(ValueError, match=r"width 24.*n_embd is 640"):
        check_compatible(info, 640)


_VLM_DIR = Path(__file__).parent / "data" / "vlm"
_VLM_EXPECT = {  # fixture type -> (projector type, n_merge, ffn_op, extra checks)
    "llava15": ("mlp", 1, "gelu_quick", {"image_grid_pinpoints": ()}),
    "llava16": ("mlp", 1, "gelu_quick", {"mm_patch_merge_type": "spatial_unpad",
                                         "image_grid_pinpoints": ((28, 56), (56, 28), (56, 56), (28, 84), (84, 28))}),
    "gemma3": ("gemma3", 2, "gelu", {}),
    "idefics3": ("idefics3", 2, "gelu", {"preproc_image_size": 128}),
    "qwen2vl": ("qwen2vl_merger", 2, "gelu_quick", {}),
    "qwen25vl": ("qwen2.5vl_merger", 2, "silu", {"n_wa_pattern": 2}),
}
_VLM_FILES = sorted(_VLM_DIR.glob("*/*-mmproj-*.gguf")) if _VLM_DIR.is_dir() else []


@pytest.mark.skipif(not _VLM_FILES, reason="no converted VLM fixtures in tests/data/vlm/")
@pytest.mark.parametrize("path", _VLM_FILES, ids=lambda p: p.name)
def test_converted_vlm_fixtures(path):
    from llamapy.gguf_file import GGUFFile
    info = read_mmproj(path)
    ptype, n_merge, ffn_op, extra = _VLM_EXPECT[path.parent.name]
    assert (info.projector_type, info.n_merge, info.ffn_op) == (ptype, n_merge, ffn_op)
    for key, value in extra.items():
        assert getattr(info, key) == value, key
    text = next(path.parent.glob("*-text-*.gguf"))
    with GGUFFile(text) as f:
        n_embd = f.metadata[f"{f.architecture}.embedding_length"]
    check_compatible(info, n_embd)
    with pytest.raises(ValueError, match=f"width {info.n_mmproj_embd}.*n_embd is {n_embd + 1}"):
        check_compatible(info, n_embd + 1)
