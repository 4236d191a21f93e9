"""Image preprocessing per projector type, as llama.cpp's mtmd preprocessors do it.

An RGB image -> the uint8 tiles llama.cpp builds (``preprocess_u8``) -> normalised float32
``(3, H, W)`` arrays (``preprocess``). Each step replicates tools/mtmd/mtmd-image.cpp of the
vendored llama.cpp, including its float32 / int arithmetic, so the pixels are the same:

- ``resize_u8``: ``img_tool::resize_pillow``, Pillow's separable resampler (bilinear,
  bicubic with a = -0.5, lanczos-3): float64 filter weights normalised per output pixel,
  turned into 22-bit fixed point (round half away from zero), a horizontal then a vertical
  pass with integer accumulation, ``>> 22`` and a clamp to 0..255 after each pass. Equal to
  Pillow's ``Image.resize(..., reducing_gap=None)`` one axis at a time, which the tests use as
  an oracle (Pillow 13 itself sometimes runs the vertical pass first when both sides change,
  which can differ by rounding; llama.cpp, and so this module, always goes horizontal first).
  Filter weights are float64 as in the C++; a build of llama.cpp that contracts them into
  FMAs could differ in a last bit, and so, rarely, in one fixed-point weight.
- ``resize_pad_u8``: ``img_tool::resize`` with ``PAD_CEIL`` (aspect kept, ``ceil`` of the
  float32 scaled size, centred on a solid colour), or ``PAD_NONE`` (stretch).
- ``smart_resize_size``: ``img_tool::calc_size_preserved_ratio`` ("smart_resize"): sides
  rounded to multiples of patch x merge, then shrunk/grown into [min_pixels, max_pixels], in
  float32 like the C++.
- per projector type (``mtmd_context::init_vision`` picks the preprocessor):
  - ``mlp`` without pinpoints (LLaVA 1.5): fixed size, bicubic, padded with (122, 116, 104);
  - ``mlp`` with ``image_grid_pinpoints`` (LLaVA 1.6 anyres): llava-uhd slicing: an overview
    stretched to image_size (bicubic) and, when a side exceeds image_size, the image resized
    with black padding to the best pinpoint resolution and cut into image_size tiles;
  - ``gemma3``: fixed size, bilinear, black padding;
  - ``qwen2vl_merger`` / ``qwen2.5vl_merger``: smart-resize within 8..4096 merged tokens, bicubic;
  - ``idefics3``: longest edge -> ``preproc_image_size``, then up to a multiple of image_size
    (lanczos), cut into tiles, plus the refined image resized to one tile as the global image.
    (Where the short side truncates to 0 px llama.cpp throws; we keep 1 px, rounded up to even.)
- ``normalize``: ``clip_image_f32::from_u8`` + ``normalize``: ``(u8 / 255 - mean) / std``
  in float32, laid out channels first.

Checked bit for bit (float32 output) against the vendored mtmd-image.cpp built into a small
harness, on about 400 (image size, projector setting) cases (tests keep digests of nine),
and against llama.cpp's recorded encoder input for the converted models in tests/data/vlm.
The one deliberate difference is noted under idefics3. Input is the RGB image ``load_image``
returns; any difference in JPEG decoding (see image_input.py) carries through. An image it
decoded reduced for this projector (``reduce_for``; ``source_size_needed`` says how many pixels
the resizes read) is laid out from its original size (``info[REDUCED_FROM_KEY]``) and resampled
over exactly the original's extent (Pillow's resize ``box``), so only pixel values differ.

Not here: the token layout around tiles (mtmd's slice templates) and the encoders.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .mmproj import MmprojInfo

# info key of an image decoded reduced (image_input.py): (width, height, factor), the original
# upright size and the reduction (pixel i stands for original pixels [i * factor, (i + 1) * factor)).
REDUCED_FROM_KEY = "llamapy.reduced_from"

__all__ = [
    "BICUBIC", "BILINEAR", "LANCZOS", "PAD_CEIL", "PAD_NONE", "PreprocessParams", "Preprocessed",
    "normalize", "preprocess", "preprocess_params", "preprocess_u8", "resize_pad_u8", "resize_u8",
    "select_best_resolution", "smart_resize_size", "source_size_needed",
]

BILINEAR, BICUBIC, LANCZOS = "bilinear", "bicubic", "lanczos"
PAD_NONE, PAD_CEIL = "none", "ceil"

_SUPPORT = {BILINEAR: 1.0, BICUBIC: 2.0, LANCZOS: 3.0}
_PRECISION_BITS = 32 - 8 - 2
_F32 = np.float32


# -- resampling (img_tool::resize_pillow) ----------------------------------------------------

def _filter(algo: str, x: np.ndarray) -> np.ndarray:
    """Filter weight at distance x (float64), as Pillow / mtmd define it."""
    if algo == LANCZOS:
        def sinc(v):
            pv = v * math.pi
            safe = np.where(v == 0.0, 1.0, pv)
            return np.where(v == 0.0, 1.0, np.sin(safe) / safe)
        return np.where((x >= -3.0) & (x < 3.0), sinc(x) * sinc(x / 3.0), 0.0)
    x = np.abs(x)
    if algo == BILINEAR:
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _coefficients(in_size: int, out_size: int, algo: str,
                  extent: Optional[float] = None) -> Tuple[np.ndarray, np.ndarray]:
    """Fixed-point filter taps for one axis: (first input index (out,), weights (out, ksize) int32).

    ``extent``: the input span the output covers, from 0 (Pillow's resize box); default in_size.
    """
    scale = (in_size if extent is None else extent) / out_size
    filterscale = max(scale, 1.0)
    support = _SUPPORT[algo] * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size, dtype=np.float64) + 0.5) * scale
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin
    taps = np.arange(ksize)
    valid = taps[None, :] < xmax[:, None]
    w = _filter(algo, (taps[None, :] + xmin[:, None] - center[:, None] + 0.5) * (1.0 / filterscale))
    w = np.where(valid, w, 0.0)
    total = np.zeros(out_size)
    for j in range(ksize):  # sequential sum over taps, as the C loop adds them
        total = total + w[:, j]
    w = np.where(total[:, None] != 0.0, w / np.where(total == 0.0, 1.0, total)[:, None], w)
    scaled = w * float(1 << _PRECISION_BITS)
    fixed = np.trunc(scaled + np.where(w < 0, -0.5, 0.5)).astype(np.int32)
    return xmin, fixed


def _resample_axis(src: np.ndarray, out_size: int, algo: str, axis: int,
                   extent: Optional[float] = None) -> np.ndarray:
    """One separable pass over ``axis`` (0: rows, 1: columns) of an (H, W, 3) uint8 array.

    The resampled axis is moved to the front so each filter tap gathers whole contiguous
    rows; accumulators are int32 as in the C++ (the 2 headroom bits keep them from overflowing).
    """
    lines = src if axis == 0 else np.ascontiguousarray(src.transpose(1, 0, 2))   # (in_size, n, 3)
    in_size = lines.shape[0]
    xmin, weights = _coefficients(in_size, out_size, algo, extent)
    shape = (out_size,) + lines.shape[1:]
    acc = np.full(shape, 1 << (_PRECISION_BITS - 1), dtype=np.int32)
    gathered = np.empty(shape, np.uint8)
    product = np.empty(shape, np.int32)
    for j in range(weights.shape[1]):  # one step per filter tap, all pixels at once
        k = weights[:, j]
        if not k.any():
            continue
        np.take(lines, np.minimum(xmin + j, in_size - 1), axis=0, out=gathered)
        np.multiply(gathered, k[:, None, None], out=product, dtype=np.int32)
        acc += product
    out = np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)
    return out if axis == 0 else np.ascontiguousarray(out.transpose(1, 0, 2))


def _as_u8(image) -> np.ndarray:
    arr = np.asarray(image.convert("RGB") if hasattr(image, "convert") and getattr(image, "mode", "RGB") != "RGB"
                     else image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"expected an RGB image or (height, width, 3) uint8 pixels, got {arr.dtype} {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"image is {arr.shape[1]}x{arr.shape[0]}: an image needs at least one pixel on each side")
    return arr


def resize_u8(image, size: Tuple[int, int], algo: str = BICUBIC,
              extent: Optional[Tuple[float, float]] = None) -> np.ndarray:
    """(H, W, 3) uint8 -> resized to ``size = (width, height)`` with Pillow's arithmetic.

    ``extent``: (width, height), fractional if need be, of the part of the image from its
    top-left corner that becomes the output (Pillow's ``box=(0, 0, *extent)``); default all of it.
    """
    src = _as_u8(image)
    width, height = size
    if algo not in _SUPPORT:
        raise ValueError(f"unknown resize filter {algo!r} (known: {', '.join(_SUPPORT)})")
    if not (0 < width <= 65536 and 0 < height <= 65536):
        raise ValueError(f"resize target {width}x{height} is out of range (1..65536)")
    ext_w, ext_h = (None, None) if extent is None else extent
    out = src
    if width != src.shape[1] or ext_w not in (None, src.shape[1]):
        out = _resample_axis(out, width, algo, axis=1, extent=ext_w)
    if height != src.shape[0] or ext_h not in (None, src.shape[0]):
        out = _resample_axis(out, height, algo, axis=0, extent=ext_h)
    return out if out is not src else src.copy()


def _fit_size(src_size: Tuple[int, int], size: Tuple[int, int]) -> Tuple[int, int]:
    """PAD_CEIL's inner size: ``src_size`` scaled to fit inside ``size``, aspect kept, float32 as the C++."""
    (src_w, src_h), (width, height) = src_size, size
    scale = min(_F32(width) / _F32(src_w), _F32(height) / _F32(src_h))
    return min(int(math.ceil(_F32(src_w) * scale)), width), min(int(math.ceil(_F32(src_h) * scale)), height)


def resize_pad_u8(image, size: Tuple[int, int], algo: str, pad: str = PAD_CEIL,
                  pad_color: Sequence[int] = (0, 0, 0),
                  reduced_from: Optional[Tuple[int, int, int]] = None) -> np.ndarray:
    """``img_tool::resize``: stretch (PAD_NONE) or fit inside ``size`` keeping the aspect, centred on ``pad_color``.

    ``reduced_from``: (width, height, factor) when ``image`` is that image decoded reduced by
    ``factor`` (``load_image(..., reduce_for=...)``; its last row and column may stand for fewer
    pixels). The layout is computed from the original size and the resampling covers exactly
    the original's extent, so a reduced decode changes pixel values a little but never sizes.
    """
    src = _as_u8(image)
    width, height = size
    src_h, src_w = src.shape[:2]
    orig, extent = (src_w, src_h), None
    if reduced_from is not None:
        orig_w, orig_h, factor = reduced_from
        orig, extent = (orig_w, orig_h), (orig_w / factor, orig_h / factor)
    if orig == (width, height) == (src_w, src_h):
        return src.copy()
    if pad == PAD_NONE:
        return resize_u8(src, size, algo, extent)
    if pad != PAD_CEIL:
        raise ValueError(f"unknown padding {pad!r}")
    new_w, new_h = _fit_size(orig, size)
    inner = resize_u8(src, (new_w, new_h), algo, extent)
    out = np.empty((height, width, 3), np.uint8)
    out[:] = np.asarray(pad_color, np.uint8)
    x0, y0 = (width - new_w) // 2, (height - new_h) // 2
    out[y0:y0 + new_h, x0:x0 + new_w] = inner
    return out


# -- sizes -----------------------------------------------------------------------------------

def _roundf(x: np.float32) -> int:
    """C's roundf for x >= 0 (half away from zero), on a float32 value."""
    r = math.floor(x)
    return int(r + 1 if x - _F32(r) >= 0.5 else r)


def smart_resize_size(size: Tuple[int, int], align: int, min_pixels: int = 0, max_pixels: int = 0,
                      longest_edge: int = 0) -> Tuple[int, int]:
    """``img_tool::calc_size_preserved_ratio``: (width, height) -> aligned (width, height), float32 arithmetic."""
    width, height = size
    if width <= 0 or height <= 0:
        return (0, 0)
    f = _F32(align)

    def round_by(x):
        return _roundf(_F32(x) / f) * align

    def ceil_by(x):
        return int(math.ceil(_F32(x) / f)) * align

    def floor_by(x):
        return int(math.floor(_F32(x) / f)) * align

    if longest_edge > 0:
        scale = min(_F32(longest_edge) / _F32(width), _F32(longest_edge) / _F32(height))
        w_bar, h_bar = ceil_by(_F32(width) * scale), ceil_by(_F32(height) * scale)
    else:
        w_bar, h_bar = max(align, round_by(width)), max(align, round_by(height))
    if max_pixels > 0 and h_bar * w_bar > max_pixels:
        beta = np.sqrt(_F32(height) * _F32(width) / _F32(max_pixels))
        h_bar = max(align, floor_by(_F32(height) / beta))
        w_bar = max(align, floor_by(_F32(width) / beta))
    elif min_pixels > 0 and h_bar * w_bar < min_pixels:
        beta = np.sqrt(_F32(min_pixels) / (_F32(height) * _F32(width)))
        h_bar = ceil_by(_F32(height) * beta)
        w_bar = ceil_by(_F32(width) * beta)
    return (w_bar, h_bar)


def select_best_resolution(size: Tuple[int, int], candidates: Sequence[Tuple[int, int]]) -> Tuple[int, int]:
    """LLaVA 1.6 anyres: the (width, height) candidate keeping the most resolution, then wasting the least."""
    width, height = size
    best, best_effective, least_waste = (0, 0), 0, None
    for cw, ch in candidates:
        scale = min(_F32(cw) / _F32(width), _F32(ch) / _F32(height))
        tw, th = int(_F32(width) * scale), int(_F32(height) * scale)
        effective = min(tw * th, width * height)
        waste = cw * ch - effective
        if effective > best_effective or (effective == best_effective and (least_waste is None or waste < least_waste)):
            best, best_effective, least_waste = (cw, ch), effective, waste
    return best


# -- per projector type -------------------------------------------------------------------------

@dataclass(frozen=True)
class PreprocessParams:
    """The preprocessing half of llama.cpp's clip_hparams, as clip.cpp sets it per projector type."""

    kind: str                       # "fixed", "anyres", "dynamic" or "idefics3"
    image_size: int
    align: int                      # patch_size * n_merge
    algo: str = BICUBIC
    pad: str = PAD_CEIL
    pad_color: Tuple[int, int, int] = (0, 0, 0)
    algo_overview: str = BICUBIC    # llava-uhd overview image
    pad_overview: str = PAD_NONE
    algo_refined: str = BICUBIC     # llava-uhd image before slicing
    pad_refined: str = PAD_CEIL
    pad_color_refined: Tuple[int, int, int] = (0, 0, 0)
    pinpoints: Tuple[Tuple[int, int], ...] = ()
    min_pixels: int = -1
    max_pixels: int = -1
    longest_edge: int = 0
    mean: Tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: Tuple[float, float, float] = (1.0, 1.0, 1.0)


def preprocess_params(info: MmprojInfo, *, image_min_tokens: Optional[int] = None,
                      image_max_tokens: Optional[int] = None) -> PreprocessParams:
    """llama.cpp's preprocessing settings for a projector (``image_*_tokens``: mtmd's overrides)."""
    ptype = info.projector_type
    common = dict(image_size=info.image_size, align=info.patch_size * info.n_merge,
                  mean=info.image_mean, std=info.image_std)
    area = info.patch_size * info.patch_size * info.n_merge * info.n_merge
    for name, value in (("image_min_tokens", image_min_tokens), ("image_max_tokens", image_max_tokens)):
        if value is not None and value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
    if ptype == "mlp":
        if info.image_grid_pinpoints:
            return PreprocessParams(kind="anyres", pinpoints=info.image_grid_pinpoints, **common)
        return PreprocessParams(kind="fixed", pad_color=(122, 116, 104), **common)
    if ptype == "gemma3":
        return PreprocessParams(kind="fixed", algo=BILINEAR, **common)
    if ptype in ("qwen2vl_merger", "qwen2.5vl_merger"):
        min_px = (image_min_tokens or 8) * area
        max_px = (image_max_tokens or 4096) * area
        if max_px < min_px:
            raise ValueError(f"image_max_tokens gives {max_px} pixels, below the {min_px} of image_min_tokens")
        return PreprocessParams(kind="dynamic", min_pixels=min_px, max_pixels=max_px, **common)
    if ptype == "idefics3":
        return PreprocessParams(kind="idefics3", algo=LANCZOS, longest_edge=info.preproc_image_size,
                                min_pixels=image_min_tokens * area if image_min_tokens else -1,
                                max_pixels=image_max_tokens * area if image_max_tokens else -1, **common)
    raise NotImplementedError(f"no preprocessing for projector type {ptype!r}")


@dataclass
class Preprocessed:
    """One image ready for the encoder: tiles (row-major), an optional overview, the tile grid.

    Arrays are (H, W, 3) uint8 from ``preprocess_u8`` and (3, H, W) float32 from ``preprocess``.
    ``grid`` is (columns, rows); (0, 0) when the image is not tiled.
    """

    tiles: List[np.ndarray]
    overview: Optional[np.ndarray] = None
    grid: Tuple[int, int] = (0, 0)
    original_size: Tuple[int, int] = (0, 0)   # (width, height)
    extra: dict = field(default_factory=dict)

    def in_chunk_order(self) -> List[np.ndarray]:
        """Tiles, then the overview: the order mtmd's tokenizer emits image chunks for these
        projector types (``ov_img_first`` is false for all of them)."""
        return self.tiles + ([self.overview] if self.overview is not None else [])


def _crop_grid(img: np.ndarray, tile: int) -> Tuple[List[np.ndarray], Tuple[int, int]]:
    """Row-major crops of at most tile x tile (``img_tool::crop`` over the llava-uhd slice list)."""
    h, w = img.shape[:2]
    tiles = [img[y:y + tile, x:x + tile].copy() for y in range(0, h, tile) for x in range(0, w, tile)]
    return tiles, (w // tile, h // tile)


@dataclass(frozen=True)
class _Resize:
    """One resize that reads the source image: to ``size`` with ``algo``, stretched or padded."""

    size: Tuple[int, int]
    algo: str
    pad: str = PAD_NONE
    pad_color: Tuple[int, int, int] = (0, 0, 0)

    def content(self, src_size: Tuple[int, int]) -> Tuple[int, int]:
        """The part of the output the source fills (the rest is padding)."""
        return self.size if self.pad == PAD_NONE else _fit_size(src_size, self.size)


def _idefics3_resized_size(p: PreprocessParams, size: Tuple[int, int]) -> Optional[Tuple[int, int]]:
    """The longest-edge resize of idefics3's own path, or None on llama.cpp's generic path."""
    if not (p.longest_edge > 0 and p.min_pixels <= 0 and p.max_pixels <= 0):
        return None
    w, h = size
    aspect = w / h
    # llama.cpp throws when the short side truncates to 0 px (aspect > longest_edge); we keep 1 px.
    if w >= h:
        rw, rh = p.longest_edge, max(1, int(p.longest_edge / aspect))
        rh += rh % 2
    else:
        rw, rh = max(1, int(p.longest_edge * aspect)), p.longest_edge
        rw += rw % 2
    return rw, rh


def _source_resizes(p: PreprocessParams, size: Tuple[int, int]) -> List[_Resize]:
    """Every resize ``preprocess_u8`` makes of the source image of ``size`` = (width, height), in order.

    The layout (sizes, tiles, tokens) depends on ``size`` alone; only these resizes read the
    source's pixels (idefics3 resizes its first result further).
    """
    w, h = size
    if p.kind == "fixed":
        return [_Resize((p.image_size, p.image_size), p.algo, p.pad, p.pad_color)]
    if p.kind == "dynamic":
        return [_Resize(smart_resize_size(size, p.align, p.min_pixels, p.max_pixels), p.algo, p.pad, p.pad_color)]
    if p.kind == "anyres":
        overview = _Resize((p.image_size, p.image_size), p.algo_overview, p.pad_overview)
        if w <= p.image_size and h <= p.image_size:
            return [overview]
        return [overview, _Resize(select_best_resolution(size, p.pinpoints), p.algo_refined, p.pad_refined,
                                  p.pad_color_refined)]
    if p.kind == "idefics3":
        resized = _idefics3_resized_size(p, size)
        if resized is not None:
            return [_Resize(resized, p.algo)]
        # llama.cpp's generic path (no preproc_image_size, or token limits given): llava-uhd slicing.
        tile = p.image_size
        refined = smart_resize_size(size, tile, max(0, p.min_pixels), max(0, p.max_pixels), p.longest_edge)
        return [_Resize((tile, tile), p.algo_overview, p.pad_overview),
                _Resize(refined, p.algo_refined, p.pad_refined, p.pad_color_refined)]
    raise ValueError(f"unknown preprocessing kind {p.kind!r}")


def source_size_needed(size: Tuple[int, int], info_or_params, **overrides) -> Tuple[int, int]:
    """(width, height): per axis, the largest extent the preprocessing resizes an image of
    ``size`` to. A source much larger than this is averaged down by those resizes anyway;
    ``load_image(..., reduce_for=...)`` decodes it reduced while it keeps several times this.
    """
    p = _params(info_or_params, overrides)
    contents = [r.content(size) for r in _source_resizes(p, size)]
    return max(c[0] for c in contents), max(c[1] for c in contents)


def _anyres(resized: List[np.ndarray], p: PreprocessParams, size: Tuple[int, int]) -> Preprocessed:
    overview = resized[0]
    if len(resized) == 1:
        return Preprocessed(tiles=[], overview=overview, original_size=size)
    refined = resized[1]
    tiles, grid = _crop_grid(refined, p.image_size)
    return Preprocessed(tiles=tiles, overview=overview, grid=grid, original_size=size,
                        extra={"refined_size": (refined.shape[1], refined.shape[0])})


def _idefics3(resized: List[np.ndarray], p: PreprocessParams, size: Tuple[int, int]) -> Preprocessed:
    tile = p.image_size
    if len(resized) == 1:  # the longest-edge path
        rh, rw = resized[0].shape[:2]
        grid_x, grid_y = (rw + tile - 1) // tile, (rh + tile - 1) // tile
        refined = resize_u8(resized[0], (grid_x * tile, grid_y * tile), p.algo)
        overview = resize_u8(refined, (tile, tile), p.algo)
        tiles, _ = _crop_grid(refined, tile)
        return Preprocessed(tiles=tiles, overview=overview, grid=(grid_x, grid_y), original_size=size,
                            extra={"resized_size": (rw, rh)})
    overview, refined = resized
    tiles, _ = _crop_grid(refined, tile)
    grid = (int(math.ceil(_F32(refined.shape[1]) / _F32(tile))), int(math.ceil(_F32(refined.shape[0]) / _F32(tile))))
    return Preprocessed(tiles=tiles, overview=overview, grid=grid, original_size=size)


def _params(info_or_params, overrides) -> PreprocessParams:
    if isinstance(info_or_params, PreprocessParams):
        if overrides:
            raise ValueError(f"token overrides {sorted(overrides)} go to preprocess_params, not with PreprocessParams")
        return info_or_params
    return preprocess_params(info_or_params, **overrides)


def _reduced_from(image, src: np.ndarray) -> Optional[Tuple[int, int, int]]:
    """(width, height, factor) of the image ``image`` is a reduced decode of (its
    REDUCED_FROM_KEY), checked against its pixels; None for any other image."""
    info = getattr(image, "info", None)
    value = info.get(REDUCED_FROM_KEY) if isinstance(info, dict) else None
    if value is None:
        return None
    h, w = src.shape[:2]
    ok = isinstance(value, tuple) and len(value) == 3 and all(isinstance(v, int) and v > 0 for v in value)
    if not ok or -(-value[0] // value[2]) != w or -(-value[1] // value[2]) != h:
        raise ValueError(f"image.info[{REDUCED_FROM_KEY!r}] = {value!r} is not the (width, height, factor) of an "
                         f"image that reduces to {w}x{h}")
    return value


def preprocess_u8(image, info_or_params, **overrides) -> Preprocessed:
    """The uint8 images llama.cpp hands to the encoder for ``image``, before normalisation.

    An image ``load_image(..., reduce_for=...)`` decoded reduced is laid out as its original
    (``Preprocessed.original_size`` is that one); only its pixels come from fewer samples.
    """
    p = _params(info_or_params, overrides)
    src = _as_u8(image)
    reduced_from = _reduced_from(image, src)
    size = (src.shape[1], src.shape[0]) if reduced_from is None else reduced_from[:2]
    resizes = _source_resizes(p, size)
    resized = [resize_pad_u8(src, r.size, r.algo, r.pad, r.pad_color, reduced_from) for r in resizes]
    if p.kind in ("fixed", "dynamic"):
        return Preprocessed(tiles=resized, original_size=size)
    if p.kind == "anyres":
        return _anyres(resized, p, size)
    return _idefics3(resized, p, size)


def normalize(pixels: np.ndarray, mean: Sequence[float], std: Sequence[float]) -> np.ndarray:
    """(H, W, 3) uint8 -> (3, H, W) float32 ``(u8 / 255 - mean) / std``, in float32 as clip_image_f32."""
    x = pixels.astype(_F32) / _F32(255.0)
    x = (x - np.asarray(mean, _F32)) / np.asarray(std, _F32)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def preprocess(image, info_or_params, **overrides) -> Preprocessed:
    """``preprocess_u8`` then ``normalize``: float32 (3, H, W) tiles and overview."""
    p = _params(info_or_params, overrides)
    out = preprocess_u8(image, p)
    out.tiles = [normalize(t, p.mean, p.std) for t in out.tiles]
    if out.overview is not None:
        out.overview = normalize(out.overview, p.mean, p.std)
    return out
