"""llamapy.multimodal.encoder: the native vision encoders against llama.cpp's recordings.

tests/data/vlm/<type>/arrays.npz holds, per image and projector file, the pixels llama.cpp's
clip fed its graph and the projector output (tests/data/vlm/README.md). Here:
- the recorded pixels of every image chunk, encoded, equal the recorded embeddings;
- preprocess(image) -> encode_image equals them end to end (PNG decoded by us; JPEG from
  llama.cpp's decoded bitmap, since libjpeg-turbo and stb_image differ by a few levels;
  WebP has no reference);
- bad pixels and broken projector files raise ValueError, unsupported types NotImplementedError;
- results do not depend on the thread count;
- both self-attention paths (flash_attn=False: explicit softmax, True: flash) meet the
  recordings' tolerances and agree with each other; "auto" picks flash for many patches.

Tolerances are relative to the largest |value| of the reference chunk. llama.cpp's vision
attention accumulates values in F16 (its CPU flash-attention kernel); ours rounds queries,
keys, values and softmax weights to F16 and sums in F32, so F16 projectors agree to ~1e-3.
Q8_0 projectors quantize every activation to 8 bits per block, which turns those
differences into occasional one-step flips: ~1e-2.
"""
import shutil
from pathlib import Path

import numpy as np
import pytest

from llamapy.multimodal import (ENCODER_PROJECTOR_TYPES, SUPPORTED_PROJECTOR_TYPES, VisionEncoder, preprocess,
                                read_mmproj)

VLM = Path(__file__).parent / "data" / "vlm"
TYPES = {"llava15": ("f16",), "llava16": ("f16",), "gemma3": ("f16", "q8_0"), "idefics3": ("f16", "q8_0"),
         "qwen2vl": ("f16", "q8_0"), "qwen25vl": ("f16", "q8_0")}
TOL = {"f16": 2.5e-3, "q8_0": 3e-2}
CASES = [(t, v) for t, vs in TYPES.items() for v in vs if (VLM / t / f"{t}-mmproj-{v}.gguf").is_file()]

_encoders = {}


def encoder(vlm_type, variant, n_threads=2, flash_attn="auto"):
    key = (vlm_type, variant, n_threads, flash_attn)
    if key not in _encoders:
        _encoders[key] = VisionEncoder(VLM / vlm_type / f"{vlm_type}-mmproj-{variant}.gguf", n_threads=n_threads,
                                       flash_attn=flash_attn)
    return _encoders[key]


def recorded_chunks(arrays, image, variant):
    """[(pixels (1, 3, H, W), embd (n_tokens, n_embd))] of every image chunk, in order."""
    out, k = [], 0
    base = f"{image}.mmproj_{variant}"
    while f"{base}.chunk{k}.embd" in arrays:
        assert f"{base}.chunk{k}.pixels1" not in arrays  # one image per chunk for these types
        out.append((arrays[f"{base}.chunk{k}.pixels0"], arrays[f"{base}.chunk{k}.embd"]))
        k += 1
    return out


def rel_err(got, ref):
    return float(np.abs(got - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("flash_attn", [False, True])
@pytest.mark.parametrize("vlm_type,variant", CASES)
def test_recorded_pixels_give_recorded_embeddings(vlm_type, variant, flash_attn):
    enc = encoder(vlm_type, variant, flash_attn=flash_attn)
    assert enc.attention_path(*_first_pixels(vlm_type, variant).shape[2:]) == ("flash" if flash_attn else "explicit")
    arrays = np.load(VLM / vlm_type / "arrays.npz")
    images = sorted({k.split(".mmproj_")[0] for k in arrays.files})
    n_chunks = 0
    for image in images:
        for pixels, ref in recorded_chunks(arrays, image, variant):
            got = enc.encode(pixels)
            n_tokens = enc.n_tokens or pixels.shape[2] * pixels.shape[3] // (4 * enc.info.patch_size ** 2)
            assert got.shape == ref.shape == (n_tokens, enc.n_embd) and got.dtype == np.float32
            assert rel_err(got, ref) <= TOL[variant], f"{image}: {rel_err(got, ref):.2e}"
            # the typical error is far below the worst one
            assert np.abs(got - ref).mean() <= TOL[variant] / 5 * np.abs(ref).max()
            n_chunks += 1
    assert n_chunks >= 5  # every decodable image but the huge one (a summary only for Qwen)


def _end_to_end_cases():
    cases = []
    for t, v in CASES:
        arrays = np.load(VLM / t / "arrays.npz")
        for p in sorted((VLM / "images").iterdir()):
            if p.suffix in (".png", ".jpg") and f"{p.name}.mmproj_{v}.decoded_rgb" in arrays.files:
                cases.append((t, v, p.name))
    return cases


@pytest.mark.parametrize("vlm_type,variant,image", _end_to_end_cases())
def test_preprocess_then_encode_image_matches_llama_cpp(vlm_type, variant, image):
    from llamapy.multimodal.image_input import load_image
    enc = encoder(vlm_type, variant)
    arrays = np.load(VLM / vlm_type / "arrays.npz")
    if image.endswith(".png"):  # stb_image and we decode PNG identically (test_image_preprocess)
        rgb = np.asarray(load_image(VLM / "images" / image, apply_exif=False))
    else:                       # colour JPEG: start from llama.cpp's own bitmap
        rgb = arrays[f"{image}.mmproj_{variant}.decoded_rgb"]
    refs = recorded_chunks(arrays, image, variant)
    got = enc.encode_image(preprocess(rgb, enc.info))
    assert len(got) == len(refs)
    for ours, (_, ref) in zip(got, refs):
        assert ours.shape == ref.shape
        assert rel_err(ours, ref) <= TOL[variant]


@pytest.mark.parametrize("flash_attn", [False, True])
@pytest.mark.parametrize("vlm_type,variant", CASES)
def test_independent_of_threads(vlm_type, variant, flash_attn):
    arrays = np.load(VLM / vlm_type / "arrays.npz")
    pixels, _ = recorded_chunks(arrays, "tall_37x91.png", variant)[0]
    one = encoder(vlm_type, variant, n_threads=1, flash_attn=flash_attn).encode(pixels)
    two = encoder(vlm_type, variant, n_threads=2, flash_attn=flash_attn).encode(pixels)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, encoder(vlm_type, variant, n_threads=1, flash_attn=flash_attn).encode(pixels[0]))


def _first_pixels(vlm_type, variant):
    arrays = np.load(VLM / vlm_type / "arrays.npz")
    return recorded_chunks(arrays, "tall_37x91.png", variant)[0][0]


@pytest.mark.parametrize("vlm_type,variant", CASES)
def test_flash_matches_explicit(vlm_type, variant):
    # The two attention paths differ only in float rounding (flash: online softmax over
    # 64-cell tiles, F32 queries; explicit: F16-rounded queries and weights), well inside
    # the recordings' tolerance (Q8_0: the activation quantizer turns them into one-step
    # flips, as against llama.cpp); Qwen2.5-VL's windowed layers run the same masks on both.
    arrays = np.load(VLM / vlm_type / "arrays.npz")
    images = sorted({k.split(".mmproj_")[0] for k in arrays.files})
    for image in images:
        for pixels, _ in recorded_chunks(arrays, image, variant)[:1]:
            a = encoder(vlm_type, variant, flash_attn=False).encode(pixels)
            b = encoder(vlm_type, variant, flash_attn=True).encode(pixels)
            assert rel_err(b, a) <= (TOL[variant] / 2 if variant == "f16" else TOL[variant]), image


def test_flash_attn_option():
    path = VLM / "qwen2vl" / "qwen2vl-mmproj-f16.gguf"
    auto = encoder("qwen2vl", "f16")
    assert auto.flash_attn == -1
    # auto: explicit for a few patches, flash from 128 rows on (vision_model.cpp)
    assert auto.attention_path(56, 168) == "explicit"  # 48 patches
    assert auto.attention_path(28 * 8, 28 * 8) == "flash"  # 256 patches
    assert encoder("qwen2vl", "f16", flash_attn=False).attention_path(28 * 8, 28 * 8) == "explicit"
    assert encoder("qwen2vl", "f16", flash_attn=True).attention_path(28, 28) == "flash"
    big = np.random.default_rng(3).standard_normal((3, 28 * 8, 28 * 6)).astype(np.float32)
    got = auto.encode(big)
    np.testing.assert_array_equal(got, encoder("qwen2vl", "f16", flash_attn=True).encode(big))
    assert rel_err(got, encoder("qwen2vl", "f16", flash_attn=False).encode(big)) <= TOL["f16"] / 2
    for bad in ("yes", 2, -2, 1.0):
        with pytest.raises(ValueError, match="flash_attn"):
            VisionEncoder(path, flash_attn=bad)
    from llamapy import _engine
    with pytest.raises(ValueError, match="flash_attn"):
        _engine.VisionModel(str(path), 1, 3)
    with pytest.raises(ValueError):
        auto.attention_path(27, 28)  # not a size the projector takes


def test_properties():
    enc = encoder("gemma3", "f16")
    assert enc.projector_type == "gemma3" and enc.info.projector_type == "gemma3"
    assert (enc.n_embd, enc.n_tokens) == (64, 4) and enc.info.n_mmproj_embd == 64
    assert encoder("llava15", "f16").n_tokens == 4
    assert set(ENCODER_PROJECTOR_TYPES) == set(SUPPORTED_PROJECTOR_TYPES)
    qwen = encoder("qwen2vl", "f16")
    assert qwen.dynamic_size and qwen.n_tokens == 0 and qwen.n_embd == 64
    assert qwen.encode(np.zeros((3, 56, 84), np.float32)).shape == (6, 64)
    assert qwen.encode(np.zeros((3, 28, 28), np.float32)).shape == (1, 64)


def test_bad_pixels_raise_value_error():
    enc = encoder("llava15", "f16")
    good = np.zeros((3, 28, 28), np.float32)
    bad = {
        "shape": np.zeros((3, 27, 28), np.float32),
        "channels last": np.zeros((28, 28, 3), np.float32),
        "2-D": np.zeros((28, 28), np.float32),
        "batch of 2": np.zeros((2, 3, 28, 28), np.float32),
        "float64": good.astype(np.float64),
        "uint8": good.astype(np.uint8),
        "list": good.tolist(),
    }
    for name, pixels in bad.items():
        with pytest.raises(ValueError):
            enc.encode(pixels)
    nan = good.copy()
    nan[1, 5, 7] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        enc.encode(nan)
    # the native entry point checks for itself too
    with pytest.raises(ValueError):
        enc._model.encode(np.zeros((3, 14, 28), np.float32))
    with pytest.raises(ValueError):
        enc._model.encode(np.zeros((3, 28, 28), np.float64))
    assert enc.encode(good).shape == (4, 64)  # still fine afterwards
    qwen = encoder("qwen2vl", "f16")
    for shape in [(3, 28, 42), (3, 0, 28), (3, 14, 28), (1, 28, 28), (3, 2576, 2576)]:  # the last: 33856 patches
        with pytest.raises(ValueError):
            qwen.encode(np.zeros(shape, np.float32))
        with pytest.raises(ValueError):
            qwen._model.encode(np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match="no tiles"):
        from llamapy.multimodal import Preprocessed
        enc.encode_image(Preprocessed(tiles=[]))


def test_broken_files_raise_value_error(tmp_path):
    from llamapy import _engine
    src = VLM / "gemma3" / "gemma3-mmproj-f16.gguf"
    data = src.read_bytes()
    for n, cut in enumerate((len(data) // 2, len(data) - 1, 200, 10)):
        path = tmp_path / f"cut{n}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError):
            VisionEncoder(path)
        with pytest.raises(ValueError):
            _engine.VisionModel(str(path), 1)
    # a valid file whose tower tensors are missing: the native loader names the tensor
    gguf = pytest.importorskip("gguf")
    from test_mmproj_metadata import write_mmproj
    path = write_mmproj(tmp_path / "tiny.gguf", "gemma3")
    assert read_mmproj(path).projector_type == "gemma3"
    with pytest.raises(ValueError, match=r"tensor v\.blk\.0\.ln1\.weight is missing"):
        VisionEncoder(path)
    # a non-projector GGUF
    text = VLM / "gemma3" / "gemma3-text-f16.gguf"
    with pytest.raises(ValueError, match="clip"):
        _engine.VisionModel(str(text), 1)


def test_bad_n_threads():
    with pytest.raises(ValueError, match="n_threads"):
        VisionEncoder(VLM / "gemma3" / "gemma3-mmproj-f16.gguf", n_threads=0)
    from llamapy import _engine
    with pytest.raises(ValueError, match="n_threads"):
        _engine.VisionModel(str(VLM / "gemma3" / "gemma3-mmproj-f16.gguf"), 100000)


def test_unsupported_projector_types(tmp_path):
    pytest.importorskip("gguf")
    from llamapy import _engine
    from test_mmproj_metadata import write_mmproj
    for ptype in ("pixtral", "mlp_norm", "ldp"):
        path = write_mmproj(tmp_path / f"{ptype}.gguf", ptype)
        with pytest.raises(NotImplementedError, match=ptype):
            VisionEncoder(path)
        with pytest.raises(NotImplementedError,
                           match="mlp, gemma3, idefics3, qwen2vl_merger, qwen2.5vl_merger|mlp_norm"):
            _engine.VisionModel(str(path), 1)


def test_qwen25_image_over_two_windows():
    """The wide image's 6 x 2 merged blocks fall into two 112 px windows (4 and 2 block
    columns): its recording is matched only with the windows and their token order right."""
    enc = encoder("qwen25vl", "f16")
    arrays = np.load(VLM / "qwen25vl" / "arrays.npz")
    pixels, ref = recorded_chunks(arrays, "wide_120x33.jpg", "f16")[0]
    assert pixels.shape[2:] == (56, 168)
    got = enc.encode(pixels)
    assert rel_err(got, ref) <= TOL["f16"]
    # changing only the right window moves the rows of both (block 1 attends over everything)
    right = pixels.copy()
    right[..., 112:] = 0.0
    moved = np.abs(enc.encode(right) - got).max(axis=1)
    assert (moved > 0).all()


def test_qwen25_huge_image_against_recorded_summary():
    """1536 x 1152 -> 1540 x 1148 (110 x 82 patches, 2255 tokens, 14 x 11 windows). llama.cpp
    kept only a strided subset of this output; the JPEG is decoded by Pillow here (stb_image
    differs by a few levels), so the tolerance is wider than for the recorded pixels."""
    import json
    from llamapy.multimodal.image_input import load_image
    rec = json.loads((VLM / "qwen25vl" / "record.json").read_text())
    chunk = [c for c in rec["images"]["huge_1536x1152.jpg"]["mmproj_f16"]["chunks"] if c["type"] == "image"][0]
    summary = chunk["embd"]
    enc = encoder("qwen25vl", "f16")
    rgb = np.asarray(load_image(VLM / "images" / "huge_1536x1152.jpg", apply_exif=False))
    (got,) = enc.encode_image(preprocess(rgb, enc.info))
    assert list(got.shape) == summary["shape"] == [2255, 64]
    subset = np.asarray(summary["subset"], np.float32)
    ours = got.ravel()[::summary["subset_stride"]][:len(subset)]
    assert rel_err(ours, subset) <= 1.5e-2
    assert abs(float(got.mean()) - summary["mean"]) <= 1e-3 * summary["std"] * 10


def test_gpu_needs_a_vulkan_build():
    """gpu=N asks for the Vulkan backend; without it (or without the device) the
    encoder refuses with a ValueError naming what is missing, never a crash.
    (With the backend: tests/test_vulkan_vision.py.)"""
    from llamapy import _engine as E

    t, v = CASES[0]
    path = VLM / t / f"{t}-mmproj-{v}.gguf"
    if "vulkan" not in E.backends():
        with pytest.raises(ValueError, match="no GPU backend"):
            VisionEncoder(path, gpu=0)
    else:
        with pytest.raises(ValueError, match="Vulkan device"):
            VisionEncoder(path, gpu=len(E.gpu_devices()))
    with pytest.raises(ValueError, match="gpu must be"):
        VisionEncoder(path, gpu="0")
    assert VisionEncoder(path).gpu is None
