"""llamapy.multimodal.preprocess: llama.cpp's per-projector preprocessing, shapes and hand-checked values.

The resampler is checked against Pillow one axis at a time (llama.cpp runs the horizontal
pass, then the vertical one; Pillow 13 may run them in the other order when both change),
and against a literal scalar port of the C loops on tiny images. The last test compares
whole preprocessor outputs with digests recorded from llama.cpp's own code.
"""
import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from conftest import needs

Image = needs("PIL.Image")

from llamapy.multimodal.mmproj import MmprojInfo
from llamapy.multimodal.preprocess import (BICUBIC, BILINEAR, LANCZOS, PAD_NONE, normalize, preprocess,
                                           preprocess_params, preprocess_u8, resize_pad_u8, resize_u8,
                                           select_best_resolution, smart_resize_size)

RNG = np.random.default_rng(1234)
PIL_FILTERS = {BILINEAR: Image.BILINEAR, BICUBIC: Image.BICUBIC, LANCZOS: Image.LANCZOS}
MEAN, STD = (0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711)


def info(ptype="mlp", image_size=16, patch_size=4, n_merge=1, **kw):
    base = dict(path="p.gguf", projector_type=ptype, name="", n_embd=8, n_ff=16, n_layer=2, n_head=2,
                n_head_kv=2, n_embd_head=4, projection_dim=8, eps=1e-6, image_size=image_size,
                patch_size=patch_size, image_mean=MEAN, image_std=STD, ffn_op="gelu", n_merge=n_merge)
    base.update(kw)
    return MmprojInfo(**base)


def rand_image(w, h):
    return RNG.integers(0, 256, (h, w, 3), dtype=np.uint8)


def pillow_h_then_v(a, size, algo):
    """Pillow's resampler one axis at a time: the pass order llama.cpp uses."""
    im = Image.fromarray(a)
    im = im.resize((size[0], im.height), PIL_FILTERS[algo], reducing_gap=None)
    im = im.resize(size, PIL_FILTERS[algo], reducing_gap=None)
    return np.asarray(im)


def scalar_reference_resize(a, size, algo):
    """A literal, per-pixel port of mtmd's resize_pillow (slow: tiny images only)."""
    support0 = {BILINEAR: 1.0, BICUBIC: 2.0, LANCZOS: 3.0}[algo]

    def filt(x):
        if algo == LANCZOS:
            sinc = lambda v: 1.0 if v == 0.0 else math.sin(v * math.pi) / (v * math.pi)
            return sinc(x) * sinc(x / 3.0) if -3.0 <= x < 3.0 else 0.0
        x = abs(x)
        if algo == BILINEAR:
            return 1.0 - x if x < 1.0 else 0.0
        if x < 1.0:
            return ((-0.5 + 2.0) * x - (-0.5 + 3.0)) * x * x + 1
        return (((x - 5) * x + 8) * x - 4) * -0.5 if x < 2.0 else 0.0

    def coeffs(n_in, n_out):
        scale = n_in / n_out
        fs = max(scale, 1.0)
        support = support0 * fs
        out = []
        for xx in range(n_out):
            center = (xx + 0.5) * scale
            xmin = max(int(center - support + 0.5), 0)
            xmax = min(int(center + support + 0.5), n_in) - xmin
            w = [filt((x + xmin - center + 0.5) * (1.0 / fs)) for x in range(xmax)]
            total = 0.0
            for v in w:
                total += v
            w = [v / total if total != 0.0 else v for v in w]
            out.append((xmin, [int(v * (1 << 22) + (-0.5 if v < 0 else 0.5)) for v in w]))
        return out

    def clip8(v):
        return min(max(v >> 22, 0), 255)

    img = a.astype(np.int64)
    h, w = img.shape[:2]
    if size[0] != w:
        cs = coeffs(w, size[0])
        img = np.array([[[clip8((1 << 21) + sum(int(img[y, xmin + i, c]) * k for i, k in enumerate(ks)))
                          for c in range(3)] for xmin, ks in cs] for y in range(h)], np.int64)
    if size[1] != h:
        cs = coeffs(h, size[1])
        img = np.array([[[clip8((1 << 21) + sum(int(img[ymin + i, x, c]) * k for i, k in enumerate(ks)))
                          for c in range(3)] for x in range(img.shape[1])] for ymin, ks in cs], np.int64)
    return img.astype(np.uint8)


# -- resampling ------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", [BILINEAR, BICUBIC, LANCZOS])
def test_resize_matches_pillow_one_axis_at_a_time(algo):
    for _ in range(12):
        w, h = (int(v) for v in RNG.integers(1, 120, 2))
        tw, th = (int(v) for v in RNG.integers(1, 160, 2))
        a = rand_image(w, h)
        np.testing.assert_array_equal(resize_u8(a, (tw, th), algo), pillow_h_then_v(a, (tw, th), algo))


@pytest.mark.parametrize("algo", [BILINEAR, BICUBIC, LANCZOS])
def test_resize_extent_matches_pillows_box(algo):
    """``extent`` (a reduced decode's span of its original) is Pillow's resize box from the corner."""
    for _ in range(12):
        w, h = (int(v) for v in RNG.integers(2, 120, 2))
        tw, th = (int(v) for v in RNG.integers(1, 60, 2))
        # float32 values: Pillow's C resize takes its box as floats
        ew, eh = (float(np.float32(RNG.uniform(n / 2, n))) for n in (w, h))
        a = rand_image(w, h)
        im = Image.fromarray(a).resize((tw, h), PIL_FILTERS[algo], box=(0, 0, ew, h), reducing_gap=None)
        im = im.resize((tw, th), PIL_FILTERS[algo], box=(0, 0, tw, eh), reducing_gap=None)
        np.testing.assert_array_equal(resize_u8(a, (tw, th), algo, extent=(ew, eh)), np.asarray(im))
    a = rand_image(9, 7)  # the same size, but less than all of it: still resampled
    assert not np.array_equal(resize_u8(a, (9, 7), BICUBIC, extent=(8.5, 7)), a)


@pytest.mark.parametrize("algo", [BILINEAR, BICUBIC, LANCZOS])
@pytest.mark.parametrize("src,dst", [((7, 5), (9, 3)), ((5, 9), (3, 4)), ((1, 1), (4, 3)), ((6, 2), (1, 1))])
def test_resize_matches_scalar_reference(algo, src, dst):
    a = rand_image(*src)
    np.testing.assert_array_equal(resize_u8(a, dst, algo), scalar_reference_resize(a, dst, algo))


def test_resize_hand_values():
    a = np.array([[[10, 0, 255], [20, 100, 0]]], np.uint8)   # 2x1
    assert resize_u8(a, (1, 1), BILINEAR).tolist() == [[[15, 50, 128]]]  # two taps of 0.5, +0.5 rounding
    same = resize_u8(a, (2, 1), BICUBIC)
    np.testing.assert_array_equal(same, a)
    assert same is not a


def test_resize_pad_ceil_centres_on_colour():
    a = np.full((2, 4, 3), 200, np.uint8)                    # 4 wide, 2 tall
    out = resize_pad_u8(a, (8, 8), BICUBIC, pad_color=(1, 2, 3))
    assert out.shape == (8, 8, 3)
    assert (out[2:6] == 200).all()
    assert (out[:2] == (1, 2, 3)).all() and (out[6:] == (1, 2, 3)).all()
    stretched = resize_pad_u8(a, (8, 8), BICUBIC, PAD_NONE)
    assert (stretched == 200).all()


# -- sizes -----------------------------------------------------------------------------------

def test_smart_resize_sizes():
    align, area = 28, 28 * 28
    lo, hi = 8 * area, 4096 * area
    assert smart_resize_size((100, 50), align, lo, hi) == (112, 56)
    assert smart_resize_size((10, 10), align, lo, hi) == (84, 84)        # grown to min_pixels
    assert smart_resize_size((5000, 4000), align, lo, hi) == (1988, 1596)  # shrunk to max_pixels
    assert smart_resize_size((70, 300), align, 0, 0) == (84, 308)        # 2.5 rounds away from zero
    assert smart_resize_size((1, 1000), align, lo, hi)[0] == 28
    assert smart_resize_size((0, 5), align, lo, hi) == (0, 0)


def test_select_best_resolution():
    pins = ((32, 16), (16, 32), (32, 32))
    assert select_best_resolution((40, 20), pins) == (32, 16)
    assert select_best_resolution((20, 40), pins) == (16, 32)
    assert select_best_resolution((40, 40), pins) == (32, 32)


# -- per projector type ----------------------------------------------------------------------

def test_llava15_pads_with_mean_colour():
    tall = np.full((40, 10, 3), 255, np.uint8)
    out = preprocess_u8(tall, info("mlp"))
    (tile,) = out.tiles
    assert tile.shape == (16, 16, 3) and out.overview is None
    assert (tile[:, :6] == (122, 116, 104)).all() and (tile[:, 10:] == (122, 116, 104)).all()
    assert (tile[:, 6:10] == 255).all()
    (norm,) = preprocess(tall, info("mlp")).tiles
    assert norm.shape == (3, 16, 16) and norm.dtype == np.float32
    expect = (np.float32(122) / np.float32(255) - np.float32(MEAN[0])) / np.float32(STD[0])
    assert norm[0, 0, 0] == expect


def test_gemma3_bilinear_black_padding():
    wide = rand_image(33, 11)
    (tile,) = preprocess_u8(wide, info("gemma3", n_merge=4)).tiles
    scale = min(np.float32(16) / np.float32(33), np.float32(16) / np.float32(11))
    new_h = math.ceil(np.float32(11) * scale)
    y0 = (16 - new_h) // 2
    np.testing.assert_array_equal(tile[y0:y0 + new_h], resize_u8(wide, (16, new_h), BILINEAR))
    assert (tile[:y0] == 0).all() and (tile[y0 + new_h:] == 0).all()


def test_llava16_anyres_tiles():
    p = info("mlp", image_grid_pinpoints=((32, 16), (16, 32), (32, 32)))
    img = rand_image(40, 20)
    out = preprocess_u8(img, p)
    assert out.grid == (2, 1) and len(out.tiles) == 2
    assert out.overview.shape == (16, 16, 3) and all(t.shape == (16, 16, 3) for t in out.tiles)
    np.testing.assert_array_equal(out.overview, resize_u8(img, (16, 16), BICUBIC))   # stretched overview
    refined = resize_pad_u8(img, (32, 16), BICUBIC, pad_color=(0, 0, 0))
    np.testing.assert_array_equal(np.concatenate(out.tiles, axis=1), refined)
    small = preprocess_u8(rand_image(10, 12), p)
    assert small.tiles == [] and small.grid == (0, 0) and small.overview.shape == (16, 16, 3)


def test_qwen_dynamic_size():
    p = info("qwen2vl_merger", image_size=560, patch_size=14, n_merge=2)
    for w, h in [(100, 50), (10, 10), (600, 400), (3, 700)]:
        (tile,) = preprocess(rand_image(w, h), p).tiles
        assert tile.shape[0] == 3 and tile.shape[1] % 28 == 0 and tile.shape[2] % 28 == 0
        assert tile.shape[1:] == smart_resize_size((w, h), 28, 8 * 784, 4096 * 784)[::-1]
    few = preprocess_params(p, image_max_tokens=16)
    (tile,) = preprocess_u8(rand_image(1500, 1000), few).tiles
    assert tile.shape[0] * tile.shape[1] <= 16 * 784
    with pytest.raises(ValueError, match="image_max_tokens"):
        preprocess_params(p, image_min_tokens=64, image_max_tokens=8)


def test_idefics3_tiles_and_global_image():
    p = info("idefics3", image_size=16, patch_size=4, n_merge=2, preproc_image_size=64)
    out = preprocess_u8(rand_image(100, 50), p)
    assert out.extra["resized_size"] == (64, 32) and out.grid == (4, 2) and len(out.tiles) == 8
    assert out.overview.shape == (16, 16, 3)
    tall = preprocess_u8(rand_image(30, 90), p)
    assert tall.extra["resized_size"] == (22, 64) and tall.grid == (2, 4) and len(tall.tiles) == 8
    img = rand_image(100, 50)
    resized = resize_u8(img, (64, 32), LANCZOS)
    refined = resize_u8(resized, (64, 32), LANCZOS)
    out = preprocess_u8(img, p)
    np.testing.assert_array_equal(out.tiles[5], refined[16:32, 16:32])
    np.testing.assert_array_equal(out.overview, resize_u8(refined, (16, 16), LANCZOS))
    generic = preprocess_u8(rand_image(40, 20), info("idefics3", image_size=16, n_merge=2))
    assert generic.grid == (3, 1) and len(generic.tiles) == 3


@pytest.mark.parametrize("ptype,kw", [
    ("mlp", {}), ("mlp", {"image_grid_pinpoints": ((32, 16), (16, 32), (32, 32))}), ("gemma3", {"n_merge": 4}),
    ("qwen2.5vl_merger", {"n_merge": 2}), ("idefics3", {"n_merge": 2, "preproc_image_size": 48}),
])
@pytest.mark.parametrize("size", [(1, 1), (3, 200), (200, 3), (17, 17), (1200, 900)])
def test_every_type_on_odd_sizes(ptype, kw, size):
    out = preprocess(rand_image(*size), info(ptype, **kw))
    arrays = out.tiles + ([out.overview] if out.overview is not None else [])
    assert arrays and all(a.dtype == np.float32 and a.ndim == 3 and a.shape[0] == 3 for a in arrays)
    assert all(np.isfinite(a).all() for a in arrays)
    assert out.original_size == size


def test_rgba_and_grey_inputs_become_rgb():
    rgb = rand_image(9, 7)
    rgba = Image.fromarray(np.dstack([rgb, np.zeros((7, 9), np.uint8)]), "RGBA")
    p = info("gemma3", n_merge=4)
    np.testing.assert_array_equal(preprocess_u8(rgba, p).tiles[0], preprocess_u8(rgb, p).tiles[0])
    grey = rgb[:, :, 0]
    from_grey = preprocess_u8(Image.fromarray(grey), p).tiles[0]
    np.testing.assert_array_equal(from_grey, preprocess_u8(np.repeat(grey[:, :, None], 3, 2), p).tiles[0])


def test_normalize_values_and_layout():
    px = np.array([[[0, 128, 255], [255, 255, 255]]], np.uint8)  # 2 wide, 1 tall
    out = normalize(px, MEAN, STD)
    assert out.shape == (3, 1, 2) and out.dtype == np.float32 and out.flags.c_contiguous
    for c in range(3):
        for x in range(2):
            v = (np.float32(px[0, x, c]) / np.float32(255) - np.float32(MEAN[c])) / np.float32(STD[c])
            assert out[c, 0, x] == v


def test_bad_inputs():
    p = info("mlp")
    with pytest.raises(ValueError, match="0x0"):
        preprocess(np.zeros((0, 0, 3), np.uint8), p)
    with pytest.raises(ValueError, match="uint8"):
        preprocess(np.zeros((4, 4, 3), np.float32), p)
    with pytest.raises(ValueError, match="uint8"):
        preprocess(np.zeros((4, 4), np.uint8), p)
    with pytest.raises(ValueError, match="filter"):
        resize_u8(rand_image(4, 4), (2, 2), "nearest")
    with pytest.raises(ValueError, match="out of range"):
        resize_u8(rand_image(4, 4), (0, 2))
    with pytest.raises(NotImplementedError):
        preprocess_params(info("ldp"))


# -- recorded llama.cpp outputs ----------------------------------------------------------------
# sha256 (first 32 hex digits) of llama.cpp's float32 output, overview first, then tiles, each
# channels-first: the vendored tools/mtmd/mtmd-image.cpp (llama-cpp-python 0.3.36 sdist) built
# into a small harness that sets clip_hparams as clip.cpp's load_hparams does for the type, on
# the deterministic _llama_cpp_pattern images, with mean/std below. Bit-exact, so well within 1e-6.
REF_MEAN = tuple(float(np.float32(0.48145466) + np.float32(0.01) * np.float32(i)) for i in range(3))
REF_STD = tuple(float(np.float32(0.26862954) + np.float32(0.02) * np.float32(i)) for i in range(3))
REF_PINS = ((32, 64), (64, 32), (64, 64), (96, 32), (32, 96))
LLAMA_CPP_REFERENCE = [  # (case, info kwargs, overrides, (width, height), n tiles, grid, digest)
    ("llava15_tall", dict(ptype="mlp", image_size=48, patch_size=8), {}, (23, 71), 1, (0, 0),
     "a5e8a14b21c3ff56afdb1d602257d512"),
    ("llava15_wide", dict(ptype="mlp", image_size=48, patch_size=8), {}, (130, 9), 1, (0, 0),
     "0577289ac0aea6806547deb5aa7a3925"),
    ("llava16_wide", dict(ptype="mlp", image_size=32, patch_size=8, image_grid_pinpoints=REF_PINS), {}, (101, 40), 3,
     (3, 1), "0c278cfac0099b3680b1e410358179ff"),
    ("llava16_tiny", dict(ptype="mlp", image_size=32, patch_size=8, image_grid_pinpoints=REF_PINS), {}, (5, 3), 0,
     (0, 0), "46d708b63b2142485d08e74066a0528a"),
    ("gemma3_odd", dict(ptype="gemma3", image_size=64, patch_size=4, n_merge=4), {}, (77, 51), 1, (0, 0),
     "3dbbe7b3e39e22d1146425ca8c6efa7a"),
    ("qwen_tiny", dict(ptype="qwen2vl_merger", image_size=56, patch_size=14, n_merge=2), {}, (3, 2), 1, (0, 0),
     "fa978eb5d12e97d265a75e99c078306d"),
    ("qwen_huge", dict(ptype="qwen2.5vl_merger", image_size=56, patch_size=14, n_merge=2), {"image_max_tokens": 64},
     (1203, 817), 1, (0, 0), "a7b540680c74b974c2e56628e436e42c"),
    ("idefics3_wide", dict(ptype="idefics3", image_size=32, patch_size=8, n_merge=2, preproc_image_size=80), {},
     (150, 61), 3, (3, 1), "a904e3fcee9aab5eb732b64542ebafa7"),
    ("idefics3_generic", dict(ptype="idefics3", image_size=32, patch_size=8, n_merge=2), {}, (45, 70), 2, (1, 2),
     "fc84296a15115f0db4efdb265c6504a2"),
]


def _llama_cpp_pattern(w, h):
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([(x * 37 + y * 11) % 256, (x * 5 + y * 91) % 256, ((x ^ y) * 53) % 256], 2).astype(np.uint8)


@pytest.mark.parametrize("case,kw,overrides,size,n_tiles,grid,digest", LLAMA_CPP_REFERENCE,
                         ids=[c[0] for c in LLAMA_CPP_REFERENCE])
def test_equals_llama_cpp_bit_for_bit(case, kw, overrides, size, n_tiles, grid, digest):
    out = preprocess(_llama_cpp_pattern(*size), info(image_mean=REF_MEAN, image_std=REF_STD, **kw), **overrides)
    assert len(out.tiles) == n_tiles and (out.grid == grid or n_tiles == 0)
    h = hashlib.sha256()
    for a in ([out.overview] if out.overview is not None else []) + out.tiles:
        h.update(a.tobytes())
    assert h.hexdigest()[:32] == digest


# -- converted VLM fixtures (tests/data/vlm): llama.cpp's decoded RGB and its encoder input ---------

VLM = Path(__file__).parent / "data" / "vlm"
VLM_TYPES = ["llava15", "llava16", "gemma3", "idefics3", "qwen2vl", "qwen25vl"]


def _vlm_cases():
    if not (VLM / "images").is_dir():
        return []
    # Only images llama.cpp decoded and whose bitmap the fixture keeps whole
    # (the huge image is stored as a summary only).
    cases = []
    for t in VLM_TYPES:
        if not (VLM / t / "arrays.npz").is_file():
            continue
        keys = set(np.load(VLM / t / "arrays.npz").files)
        cases += [(t, p.name) for p in sorted((VLM / "images").iterdir())
                  if p.suffix in (".png", ".jpg") and f"{p.name}.mmproj_f16.decoded_rgb" in keys]
    return cases


@pytest.mark.skipif(not _vlm_cases(), reason="no converted VLM fixtures in tests/data/vlm/")
@pytest.mark.parametrize("vlm_type,image", _vlm_cases())
def test_equals_llama_cpp_on_vlm_fixtures(vlm_type, image):
    from llamapy.multimodal.image_input import load_image
    from llamapy.multimodal.mmproj import read_mmproj
    arrays = np.load(VLM / vlm_type / "arrays.npz")
    key = f"{image}.mmproj_f16"
    decoded = arrays[key + ".decoded_rgb"]
    ours_rgb = np.asarray(load_image(VLM / "images" / image, apply_exif=False))
    if image.endswith(".png"):
        np.testing.assert_array_equal(ours_rgb, decoded)  # stb_image and we agree on PNG, RGBA and grey too
    else:  # colour JPEG: libjpeg-turbo vs stb_image IDCT/upsampling
        assert ours_rgb.shape == decoded.shape
        assert np.abs(ours_rgb.astype(int) - decoded.astype(int)).max() <= 3
    refs, k = [], 0
    while f"{key}.chunk{k}.pixels0" in arrays:
        j = 0
        while f"{key}.chunk{k}.pixels{j}" in arrays:
            refs.append(arrays[f"{key}.chunk{k}.pixels{j}"][0])
            j += 1
        k += 1
    out = preprocess(decoded, read_mmproj(VLM / vlm_type / f"{vlm_type}-mmproj-f16.gguf")).in_chunk_order()
    assert [a.shape for a in out] == [r.shape for r in refs]
    for ours, ref in zip(out, refs):
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-6)
