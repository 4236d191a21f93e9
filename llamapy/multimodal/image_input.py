"""Image input for multimodal chat: any accepted image source -> a decoded RGB ``PIL.Image``.

Accepted sources (``load_image``): a path (``str`` / ``os.PathLike``), a ``file://`` URL,
a ``data:image/...;base64,`` URI, raw ``bytes`` / ``bytearray`` / ``memoryview``, a
``PIL.Image.Image``, an ``http(s)://`` URL (fetched with a timeout and a size cap), and the
OpenAI message shapes ``{"type": "image_url", "image_url": {"url": ...}}`` /
``{"type": "image_url", "image_url": "..."}`` (``image_url_from_part`` extracts the URL).

How decoding relates to llama.cpp. llama-cpp-python hands the raw file bytes to
``mtmd_helper_bitmap_init_from_buf``, which decodes with ``stbi_load_from_memory(..., 3)``:
- alpha is *dropped*, not composited: an RGBA / LA / palette-with-tRNS pixel keeps the RGB it
  stores, whatever its alpha. ``background=None`` (the default) does the same; pass an RGB
  tuple to composite on that colour instead (not what llama.cpp sees).
- GIF: stb renders the first frame into a zeroed buffer and skips transparent pixels, so
  they come out black; we do the same.
- 16-bit PNG channels become 8-bit by ``v >> 8`` (stb's ``stbi__convert_16_to_8``).
- greyscale is replicated into R, G and B.
- stb ignores EXIF. We apply the EXIF orientation by default (a phone photo then reaches the
  model upright); ``apply_exif=False`` keeps the stored orientation, as llama.cpp does.

Checked against the vendored stb_image (llama-cpp-python 0.3.36): PNG RGBA / LA / palette
with tRNS / 16-bit grey, GIF with a transparent index, BMP and greyscale JPEG decode to the
same bytes. Colour JPEG does not: Pillow's libjpeg-turbo and stb differ in IDCT and chroma
upsampling, by up to 2 levels on a few per cent of pixels, so bit-exact JPEG parity with
llama.cpp needs an stb-compatible decoder (not here). WebP is a superset: stb cannot decode
it, so llama.cpp rejects WebP files that we accept.

Every bad image raises ``ValueError`` naming the problem: an empty or truncated file, bytes
that are no image of a supported format, a 0-pixel side, a decompression bomb (the size is
checked from the header, before any pixel is decoded), an unreadable path, an unreachable or
failing URL, an oversized download, an unsupported URL scheme.

Pixel budget and reduced decoding. ``max_pixels`` caps the pixels actually decoded, checked
from the header before decoding (Pillow opens lazily). ``reduce_for=PreprocessParams`` (the
chat handlers pass their projector's) lets a large image decode smaller when the projector
reads far fewer pixels (``preprocess.source_size_needed``): a JPEG decodes at 1/2, 1/4 or 1/8
scale (Pillow's ``draft``: libjpeg's DCT scaling, before the budget check, so a header
claiming 65500 px costs what its reduced size costs) and any image is then box-reduced
(``Image.reduce``) by an integer factor, each step only while every side keeps at least
``REDUCING_GAP`` times what the preprocessing reads. Such an image carries its original size
and the factor in ``info[REDUCED_FROM_KEY]``, from which ``preprocess`` computes the layout and
resamples exactly the original's extent, so sizes, tiles and token counts stay those of the
full image and only pixel values move, by a level or two on average. PNG, WebP, GIF and BMP
are box-reduced only past ``EXACT_DECODE_PIXELS`` (16 MP): below it they keep their bit-exact
match with llama.cpp (JPEG never had one: its decoders differ); an image that needs no
reduction decodes exactly as without ``reduce_for``. Pillow's own bomb check (``PIL.Image.MAX_IMAGE_PIXELS``) still refuses headers claiming more
than twice its value; its warning below that is silenced, the budget deciding instead.

Not here: resizing and normalisation for a projector (``preprocess.py``).
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import http.client
import io
import os
import time
import urllib.error
import urllib.parse
import urllib.request
import warnings
from typing import Any, Mapping, Optional, Tuple, Union

import numpy as np

from .preprocess import REDUCED_FROM_KEY, source_size_needed

__all__ = [
    "DEFAULT_MAX_BYTES", "DEFAULT_MAX_PIXELS", "DEFAULT_TIMEOUT", "REDUCED_FROM_KEY", "REDUCING_GAP",
    "SUPPORTED_FORMATS", "decode_image", "image_hash", "image_url_from_part", "load_image", "read_image_bytes",
]

DEFAULT_TIMEOUT = 30.0                 # seconds, for a whole http(s) download
DEFAULT_MAX_BYTES = 64 * 1024 * 1024   # encoded size cap (files, URLs, data: URIs)
# Width * height of what is decoded, checked from the header before decoding: 8192 x 8192, 192 MiB
# as RGB, above the largest common camera sensors (61 MP); larger JPEGs still load where a
# projector needs fewer pixels, decoded reduced.
DEFAULT_MAX_PIXELS = 8192 * 8192
# A reduced decode keeps at least this many times, per side, the pixels the preprocessing reads:
# Pillow's resize documents a reducing_gap of 3 as indistinguishable from a full resample in
# most cases (tests/test_image_reduce.py measures it).
REDUCING_GAP = 3
# Decoded images up to this size are box-reduced only after a reduced JPEG decode: PNG, WebP,
# GIF and BMP decode bit-exactly as llama.cpp's stb_image does, so their pixels (and tokens)
# match it there; past it (4096 x 4096, 48 MiB as RGB) the preprocessing's cost wins.
EXACT_DECODE_PIXELS = 4096 * 4096
_ROTATING_ORIENTATIONS = (5, 6, 7, 8)  # EXIF orientations that swap width and height

# Pillow format names we decode (MPO is how Pillow names many camera JPEGs).
SUPPORTED_FORMATS = ("JPEG", "MPO", "PNG", "WEBP", "GIF", "BMP")
_OPEN_FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP")

_CHUNK = 64 * 1024

ImageSource = Union[str, "os.PathLike[str]", bytes, bytearray, memoryview, Mapping[str, Any], Any]


def _pil():
    """Import Pillow on first use, with a clear error if it is missing."""
    try:
        from PIL import Image, ImageOps
    except ImportError as e:  # pragma: no cover - exercised only without Pillow
        raise ImportError("llamapy's image input needs Pillow: pip install Pillow") from e
    return Image, ImageOps


# -- the OpenAI message shapes -----------------------------------------------------------

def image_url_from_part(part: Any) -> str:
    """The URL of an OpenAI ``image_url`` content part (or of its inner ``{"url": ...}``).

    ``{"type": "image_url", "image_url": {"url": U}}`` and ``{"type": "image_url",
    "image_url": U}`` (llama-cpp-python accepts both) -> ``U``.
    """
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        raise ValueError(f"an image_url content part must be a dict or str, got {type(part).__name__}")
    if "image_url" in part:
        if part.get("type", "image_url") != "image_url":
            raise ValueError(f"content part of type {part.get('type')!r} is not an image_url part")
        inner = part["image_url"]
        if isinstance(inner, str):
            return inner
        if isinstance(inner, Mapping) and isinstance(inner.get("url"), str):
            return inner["url"]
        raise ValueError("image_url must be a string or a dict with a string 'url'")
    if isinstance(part.get("url"), str):
        return part["url"]
    raise ValueError(f"not an image_url content part: keys {sorted(map(str, part))}")


# -- source -> encoded bytes ----------------------------------------------------------------

def _read_path(path: str, max_bytes: int) -> bytes:
    try:
        size = os.stat(path).st_size
    except OSError as e:
        raise ValueError(f"cannot read image file {path!r}: {e.strerror or e}") from None
    if not os.path.isfile(path):
        raise ValueError(f"image path {path!r} is not a file")
    if size > max_bytes:
        raise ValueError(f"image file {path!r} is {size} bytes, over the {max_bytes}-byte limit")
    try:
        with open(path, "rb") as f:
            return f.read(max_bytes + 1)
    except OSError as e:
        raise ValueError(f"cannot read image file {path!r}: {e.strerror or e}") from None


def _file_url_path(url: str) -> str:
    parts = urllib.parse.urlparse(url)
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"file:// URL {url!r} names a remote host {parts.netloc!r}; only local files are read")
    return urllib.request.url2pathname(parts.path)


def _decode_data_uri(uri: str, max_bytes: int) -> bytes:
    header, comma, payload = uri[len("data:"):].partition(",")
    if not comma:
        raise ValueError("data: URI has no ',' before its payload")
    params = [p.strip() for p in header.split(";")]
    media_type, flags = params[0].lower(), params[1:]
    if "base64" not in (f.lower() for f in flags):
        raise ValueError("data: URI is not base64-encoded (expected 'data:image/...;base64,...')")
    if media_type and not media_type.startswith("image/"):
        raise ValueError(f"data: URI has media type {media_type!r}, not image/...")
    payload = "".join(payload.split())
    if len(payload) // 4 * 3 > max_bytes + 3:
        raise ValueError(f"data: URI payload is over the {max_bytes}-byte limit")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ValueError(f"data: URI has invalid base64: {e}") from None


def _fetch_url(url: str, timeout: float, max_bytes: int) -> bytes:
    """GET ``url``: ``timeout`` bounds each socket wait and the whole download."""
    request = urllib.request.Request(url, headers={"User-Agent": "llamapy"})
    deadline = time.monotonic() + timeout
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > max_bytes:
                raise ValueError(f"image at {url} is {int(length)} bytes, over the {max_bytes}-byte limit")
            chunks, total = [], 0
            while True:
                chunk = response.read(_CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise ValueError(f"image at {url} is over the {max_bytes}-byte limit")
                if time.monotonic() > deadline:
                    raise ValueError(f"fetching image {url} took longer than {timeout} s")
                chunks.append(chunk)
            if length is not None and length.isdigit() and total < int(length):
                raise ValueError(f"image at {url} ended after {total} of its {int(length)} bytes")
            return b"".join(chunks)
    except urllib.error.HTTPError as e:
        raise ValueError(f"cannot fetch image {url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        raise ValueError(f"cannot fetch image {url}: {e.reason}") from None
    except TimeoutError:
        raise ValueError(f"fetching image {url} timed out after {timeout} s") from None
    except (OSError, http.client.HTTPException) as e:  # connection reset, short body, bad status line
        raise ValueError(f"cannot fetch image {url}: {type(e).__name__}: {e}") from None


def read_image_bytes(src: Union[str, "os.PathLike[str]", bytes, bytearray, memoryview], *,
                     timeout: float = DEFAULT_TIMEOUT, max_bytes: int = DEFAULT_MAX_BYTES) -> bytes:
    """The encoded bytes behind a path, URL, data: URI or bytes-like object."""
    if isinstance(src, (bytes, bytearray, memoryview)):
        data = bytes(src)
        if len(data) > max_bytes:
            raise ValueError(f"image data is {len(data)} bytes, over the {max_bytes}-byte limit")
        return data
    if isinstance(src, os.PathLike):
        return _read_path(os.fspath(src), max_bytes)
    if not isinstance(src, str):
        raise ValueError(f"unsupported image source type {type(src).__name__}")
    if src[:5].lower() == "data:":
        return _decode_data_uri(src, max_bytes)
    scheme = urllib.parse.urlparse(src).scheme.lower() if "://" in src else ""
    if scheme in ("http", "https"):
        return _fetch_url(src, timeout, max_bytes)
    if scheme == "file":
        return _read_path(_file_url_path(src), max_bytes)
    if scheme:
        raise ValueError(f"unsupported URL scheme {scheme!r} in {src!r} (supported: http, https, file, data)")
    return _read_path(src, max_bytes)


# -- bytes -> RGB image ----------------------------------------------------------------------

def _check_sides(size: Tuple[int, int], what: str) -> None:
    w, h = size
    if w <= 0 or h <= 0:
        raise ValueError(f"{what} is {w}x{h}: an image needs at least one pixel on each side")


def _check_size(size: Tuple[int, int], max_pixels: int, what: str,
                decoded: Optional[Tuple[int, int]] = None) -> None:
    """``size``: the image's; ``decoded``: what a reduced decode makes of it (default: the same)."""
    _check_sides(size, what)
    w, h = size
    dw, dh = decoded or size
    if dw * dh > max_pixels:
        reduced = "" if (dw, dh) == (w, h) else f", decoded reduced to {dw}x{dh}"
        raise ValueError(f"{what} is {w}x{h}{reduced} = {dw * dh} pixels, over the {max_pixels}-pixel limit "
                         f"(max_pixels; a decompression bomb?)")


_SIGNATURES = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"),
               (b"GIF89a", "GIF"), (b"BM", "BMP"))


def _sniff(data: bytes) -> Optional[str]:
    """The format a file's signature claims, for messages about files Pillow refuses."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WEBP"
    for magic, name in _SIGNATURES:
        if data.startswith(magic):
            return name
    return None


def _unreadable(data: bytes, error: BaseException) -> ValueError:
    fmt = _sniff(data)
    if fmt is None:
        return ValueError(f"data is not an image of a supported format ({', '.join(SUPPORTED_FORMATS)}); "
                          f"starts with {bytes(data[:8])!r}")
    if fmt == "PNG" and len(data) >= 24 and data[12:16] == b"IHDR":
        w, h = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
        if w == 0 or h == 0:
            return ValueError(f"PNG image is {w}x{h}: an image needs at least one pixel on each side")
    return ValueError(f"{fmt} image is truncated or corrupt: {error}")


def _check_background(background: Optional[Tuple[int, int, int]]) -> Optional[Tuple[int, int, int]]:
    if background is None:
        return None
    try:
        rgb = tuple(int(c) for c in background)
    except (TypeError, ValueError):
        raise ValueError(f"background must be an (r, g, b) tuple, got {background!r}") from None
    if len(rgb) != 3 or not all(0 <= c <= 255 for c in rgb):
        raise ValueError(f"background must be three integers in 0..255, got {background!r}")
    return rgb  # type: ignore[return-value]


def _has_alpha(im) -> bool:
    return im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info


def _to_rgb(im, background: Optional[Tuple[int, int, int]], fmt: Optional[str] = None):
    """Any Pillow mode -> RGB, as stb_image's 3-channel load does (see module docstring).

    ``fmt`` is the file format (``im.format`` is lost by copies such as ``exif_transpose``).
    """
    Image, _ = _pil()
    if background is not None and _has_alpha(im):
        rgba = im.convert("RGBA")
        base = Image.new("RGBA", rgba.size, background + (255,))
        return Image.alpha_composite(base, rgba).convert("RGB")
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        # 16-bit greyscale: stb keeps the high byte.
        grey = (np.clip(np.asarray(im, dtype=np.int64), 0, 65535) >> 8).astype(np.uint8)
        return Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2), "RGB")
    if im.mode == "F":
        grey = np.clip(np.rint(np.asarray(im)), 0, 255).astype(np.uint8)
        return Image.fromarray(np.repeat(grey[:, :, None], 3, axis=2), "RGB")
    fmt = fmt or im.format
    transparent = im.info.get("transparency") if fmt == "GIF" and im.mode in ("P", "L") else None
    if im.mode == "PA":
        im = im.convert("RGBA")
    rgb = im if im.mode == "RGB" else im.convert("RGB")
    if isinstance(transparent, int):
        mask = np.asarray(im) == transparent
        if mask.any():
            arr = np.array(rgb)
            arr[mask] = 0
            rgb = Image.fromarray(arr, "RGB")
    return rgb


def _orientation(im) -> int:
    """The EXIF orientation, 1 (as stored) when absent or unreadable."""
    try:
        value = im.getexif().get(0x0112, 1)
    except Exception:  # a broken EXIF block
        return 1
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def _reduced_need(reduce_for, size: Tuple[int, int]) -> Tuple[int, int]:
    """(width, height) a reduced decode of an upright ``size`` image must keep: REDUCING_GAP
    times what the preprocessing ``reduce_for`` reads of it."""
    w, h = source_size_needed(size, reduce_for)
    return max(1, w) * REDUCING_GAP, max(1, h) * REDUCING_GAP


def _finish(im, max_pixels: int, background, apply_exif: bool, what: str, reduce_for=None, own: bool = False):
    """Decode the pixels of an opened image and return it upright, in RGB (see the module
    docstring for ``reduce_for``). ``own``: ``im`` was opened here, so it may be drafted."""
    Image, ImageOps = _pil()
    stored = im.size
    _check_sides(stored, what)
    drafted = 1
    if reduce_for is not None and own and im.format in ("JPEG", "MPO"):
        # A JPEG has its EXIF at hand before decoding (other formats may need a load for it).
        turned = apply_exif and _orientation(im) in _ROTATING_ORIENTATIONS
        need_w, need_h = _reduced_need(reduce_for, stored[::-1] if turned else stored)
        need = (need_h, need_w) if turned else (need_w, need_h)
        if min(stored[0] // need[0], stored[1] // need[1]) >= 2:  # else draft would not reduce
            # libjpeg's DCT scaling by 2, 4 or 8: the box it returns is the original's extent in
            # the reduced pixels
            result = im.draft(im.mode, need)
            if result is not None:
                drafted = round(stored[0] / result[1][2])
    _check_size(stored, max_pixels, what, decoded=im.size)
    try:
        im.load()
    except Image.DecompressionBombError as e:  # a GIF frame larger than the header's screen
        raise ValueError(f"{what} is a decompression bomb: {e}") from None
    except (OSError, SyntaxError, ValueError, EOFError, IndexError) as e:
        raise ValueError(f"{what} is truncated or corrupt: {e}") from None
    fmt = im.format
    turned = False
    if apply_exif:
        try:
            orientation = _orientation(im)
            im = ImageOps.exif_transpose(im)
            turned = orientation in _ROTATING_ORIENTATIONS
        except Exception:  # a broken EXIF block: keep the stored orientation
            pass
    out = _to_rgb(im, background, fmt)
    _check_size(out.size, max_pixels, what)
    if reduce_for is None or REDUCED_FROM_KEY in out.info:  # (a PIL image this function reduced before)
        return out
    original = (stored[1], stored[0]) if turned else stored
    need_w, need_h = _reduced_need(reduce_for, original)
    factor = min(out.width // need_w, out.height // need_h)
    if factor >= 2 and (drafted > 1 or out.width * out.height > EXACT_DECODE_PIXELS):
        out = out.reduce(factor)  # box averages; the last row and column average what is left
    else:
        factor = 1
    if drafted * factor > 1:
        out.info[REDUCED_FROM_KEY] = original + (drafted * factor,)
    return out


def decode_image(data: bytes, *, max_pixels: int = DEFAULT_MAX_PIXELS,
                 background: Optional[Tuple[int, int, int]] = None, apply_exif: bool = True,
                 reduce_for: Any = None):
    """Encoded JPEG / PNG / WebP / GIF (first frame) / BMP bytes -> an RGB ``PIL.Image``."""
    Image, _ = _pil()
    background = _check_background(background)
    if not data:
        raise ValueError("image data is empty")
    with warnings.catch_warnings():
        # Pillow warns from PIL.Image.MAX_IMAGE_PIXELS on; max_pixels decides instead, on the
        # size actually decoded (a JPEG may decode reduced).
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            im = Image.open(io.BytesIO(data), formats=_OPEN_FORMATS)
        except Image.DecompressionBombError as e:
            fmt = _sniff(data) or "the"
            raise ValueError(f"{fmt} image is too large for Pillow to open: {e} (PIL.Image.MAX_IMAGE_PIXELS = "
                             f"{Image.MAX_IMAGE_PIXELS}; llamapy's limit, max_pixels, is {max_pixels})") from None
        except (OSError, SyntaxError, ValueError, EOFError, IndexError) as e:  # UnidentifiedImageError too
            raise _unreadable(data, e) from None
        if im.format not in SUPPORTED_FORMATS:
            raise ValueError(f"unsupported image format {im.format} (supported: {', '.join(SUPPORTED_FORMATS)})")
        return _finish(im, max_pixels, background, apply_exif, f"{im.format} image", reduce_for, own=True)


def load_image(src: ImageSource, *, timeout: float = DEFAULT_TIMEOUT, max_bytes: int = DEFAULT_MAX_BYTES,
               max_pixels: int = DEFAULT_MAX_PIXELS, background: Optional[Tuple[int, int, int]] = None,
               apply_exif: bool = True, reduce_for: Any = None):
    """Any accepted image source (see the module docstring) -> an RGB ``PIL.Image``.

    ``timeout`` bounds an http(s) download; ``max_bytes`` caps the encoded size;
    ``max_pixels`` caps width*height before decoding; ``background`` composites
    transparency on that colour (default: drop alpha, as llama.cpp does);
    ``apply_exif`` rotates by the EXIF orientation (llama.cpp does not); ``reduce_for``
    (a ``PreprocessParams`` or ``MmprojInfo``) decodes a much larger image than that
    preprocessing reads reduced (module docstring). A PIL image passed in is reduced after
    decoding, never drafted (it is the caller's object).
    """
    Image, _ = _pil()
    if isinstance(src, Mapping):
        src = image_url_from_part(src)
    if isinstance(src, Image.Image):
        return _finish(src, max_pixels, _check_background(background), apply_exif, "PIL image", reduce_for)
    data = read_image_bytes(src, timeout=timeout, max_bytes=max_bytes)
    return decode_image(data, max_pixels=max_pixels, background=background, apply_exif=apply_exif,
                        reduce_for=reduce_for)


def image_hash(image: Any) -> str:
    """sha256 hex digest of an image's decoded RGB pixels and size: the image-embedding cache key.

    Takes an RGB ``PIL.Image`` (other modes are converted as ``load_image`` converts them) or
    an ``(height, width, 3)`` uint8 array. Equal pixels give equal keys, however they were encoded;
    an image decoded reduced also keys its original size (its layout depends on it).
    """
    original = None
    if isinstance(image, np.ndarray):
        arr = image
    else:
        Image, _ = _pil()
        if not isinstance(image, Image.Image):
            raise ValueError(f"image_hash takes a PIL image or a uint8 array, got {type(image).__name__}")
        arr = np.asarray(image if image.mode == "RGB" else _to_rgb(image, None))
        original = image.info.get(REDUCED_FROM_KEY)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"image_hash needs (height, width, 3) uint8 pixels, got {arr.dtype} {arr.shape}")
    h = hashlib.sha256(b"rgb8:%dx%d:" % (arr.shape[1], arr.shape[0]))
    if original is not None:  # a reduced decode: preprocess lays it out as the original size
        h.update(b"of:%dx%dx%d:" % tuple(original))
    h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()
