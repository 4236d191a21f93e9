"""Image decoding under a pixel budget, and reduced decoding for a projector (issue 31, item 19).

A 73 KB JPEG whose header claimed 65500 px wide used to cost 1.5 GB and 33 s: it was decoded
whole and then resized. Now (llamapy/multimodal/image_input.py):
- ``max_pixels`` is checked against what would be decoded, from the header, before decoding;
  the error names the image's size and the limit;
- ``load_image(..., reduce_for=params)`` (what the chat handlers do) decodes a JPEG at 1/2, 1/4
  or 1/8 scale and box-reduces any image, while it keeps REDUCING_GAP times the pixels the
  preprocessing reads; the layout comes from the original size, and the pixels stay close to a
  full decode followed by the same preprocessing; an image that needs no reduction decodes
  exactly as before.

The bombs are built without materialising their pixels: a real small JPEG with the SOF width
patched, and a valid baseline JPEG of uniform grey written block by block (2 bits per block).
"""
import io
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

from llamapy.multimodal import image_input, preprocess_params, preprocess_u8, read_mmproj  # noqa: E402
from llamapy.multimodal.image_input import (DEFAULT_MAX_PIXELS, REDUCED_FROM_KEY, REDUCING_GAP,  # noqa: E402
                                            image_hash, load_image)
from llamapy.multimodal.preprocess import source_size_needed  # noqa: E402
from corrupt_bytes import corrupted  # noqa: E402

VLM = Path(__file__).parent / "data" / "vlm"
FIXTURE_TYPES = ("llava15", "llava16", "gemma3", "idefics3", "qwen2vl")


def params(vtype, **overrides):
    return preprocess_params(read_mmproj(VLM / vtype / f"{vtype}-mmproj-f16.gguf"), **overrides)


def _segment(marker, body):
    return b"\xff" + bytes([marker]) + struct.pack(">H", len(body) + 2) + body


def uniform_jpeg(width, height):
    """A valid baseline greyscale JPEG of width x height mid-grey pixels. Its Huffman tables
    have one 1-bit code each (DC difference 0, end of block), so every 8x8 block is two zero
    bits and the file stays small however large the image claims to be."""
    one_code = b"\x01" + b"\x00" * 15 + b"\x00"  # 16 code-length counts, then the symbol
    n_blocks = -(-width // 8) * -(-height // 8)
    return (b"\xff\xd8" + _segment(0xDB, b"\x00" + b"\x01" * 64)
            + _segment(0xC0, struct.pack(">BHHB", 8, height, width, 1) + b"\x01\x11\x00")
            + _segment(0xC4, b"\x00" + one_code + b"\x10" + one_code)
            + _segment(0xDA, b"\x01\x01\x00\x00\x3f\x00") + bytes(-(-2 * n_blocks // 8)) + b"\xff\xd9")


def patched_width_jpeg(width, height):
    """A real JPEG of 16 x height whose SOF0 then claims ``width``: its data ends early."""
    buf = io.BytesIO()
    Image.fromarray(np.full((height, 16, 3), 90, np.uint8)).save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    assert struct.unpack(">H", data[sof + 7:sof + 9])[0] == 16
    data[sof + 7:sof + 9] = struct.pack(">H", width)
    return bytes(data)


def photo(w=1000, h=750, seed=0):
    """Gradients, seeded noise and flat rectangles with hard edges: (h, w, 3) uint8."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w]
    img = np.stack([x * 255.0 / w, y * 255.0 / h, (x + y) % 256.0], -1) + rng.normal(0, 20, (h, w, 3))
    for _ in range(25):
        x0, y0 = rng.integers(0, w - 50), rng.integers(0, h - 50)
        img[y0:y0 + rng.integers(5, 200), x0:x0 + rng.integers(5, 200)] = rng.integers(0, 256, 3)
    return np.clip(img, 0, 255).astype(np.uint8)


def encode(arr, fmt, **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, fmt, **kw)
    return buf.getvalue()


# -- the budget ---------------------------------------------------------------------------------

def test_header_claiming_65500_px_is_refused_before_decoding():
    data = patched_width_jpeg(65500, 1200)  # 78.6 MP claimed, 2 KB of data
    assert 65500 * 1200 > DEFAULT_MAX_PIXELS
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"JPEG image is 65500x1200 = 78600000 pixels, over the "
                                         rf"{DEFAULT_MAX_PIXELS}-pixel limit"):
        load_image(data)
    assert time.monotonic() - start < 1.0
    # a budget given by the caller is the one named
    with pytest.raises(ValueError, match=r"65500x1200 = 78600000 pixels, over the 1000000-pixel limit"):
        load_image(data, max_pixels=1_000_000)


def test_header_bomb_beyond_pillows_limit_names_both_limits():
    data = patched_width_jpeg(65500, 65500)  # 4.3 G pixels: Pillow refuses to open it at all
    for kw in ({}, {"reduce_for": params("llava15")}):
        with pytest.raises(ValueError, match=r"JPEG image is too large for Pillow to open: Image size \(4290250000 "
                                             r"pixels\).*MAX_IMAGE_PIXELS.*max_pixels"):
            load_image(data, **kw)


def test_huge_claim_within_the_budget_costs_what_is_decoded():
    """A header patched to 65500 x 64 (4.2 MP) with 16 x 64 px of data: libjpeg pads the missing
    blocks, so it decodes (quickly); for llava it decodes at 1/8 and reduced further."""
    data = patched_width_jpeg(65500, 64)
    start = time.monotonic()
    assert load_image(data).size == (65500, 64)
    small = load_image(data, reduce_for=params("llava15"))
    assert small.info[REDUCED_FROM_KEY][:2] == (65500, 64) and small.width * small.height < 20_000
    assert time.monotonic() - start < 2.0


def test_truncated_jpeg_stays_a_clear_error():
    data = uniform_jpeg(4000, 3000)[:-5000]
    for kw in ({}, {"reduce_for": params("llava15")}):
        with pytest.raises(ValueError, match="JPEG image is truncated or corrupt"):
            load_image(data, **kw)


def test_corrupted_files_reduced_raise_only_value_error():
    """Seeded byte flips, truncations and insertions, decoded reduced (draft, then reduce):
    an image laid out as its original, or a ValueError."""
    rng = np.random.default_rng(1)
    p = params("llava15")
    sources = [encode(photo(400, 300), "JPEG"), encode(photo(400, 300), "JPEG", progressive=True),
               encode(photo(400, 300), "PNG")]
    for i in range(150):
        data = corrupted(sources[i % len(sources)], rng, i)
        try:
            im = load_image(data, reduce_for=p)
        except ValueError:
            continue
        assert im.mode == "RGB" and preprocess_u8(im, p).tiles[0].shape == (28, 28, 3)


def test_valid_65500_px_jpeg_decodes_reduced_for_a_projector():
    data = uniform_jpeg(65500, 1100)  # 72 MP of grey in 280 KB
    with pytest.raises(ValueError, match="over the .*-pixel limit"):
        load_image(data)
    p = params("llava15")
    start = time.monotonic()
    im = load_image(data, reduce_for=p)
    assert time.monotonic() - start < 2.0
    # drafted at 1/8 (8188 x 138), then box-reduced by 46 while keeping 3x what a 28 px tile
    # reads (84 x 3): 368 in all
    need = source_size_needed((65500, 1100), p)
    assert need == (28, 1)
    assert im.info[REDUCED_FROM_KEY] == (65500, 1100, 8 * 46) and im.size == (178, 3)
    assert im.width >= REDUCING_GAP * need[0] and im.height >= REDUCING_GAP * need[1]
    pre = preprocess_u8(im, p)
    assert pre.original_size == (65500, 1100)
    (tile,) = pre.tiles
    assert tile.shape == (28, 28, 3)
    assert np.abs(tile[13].astype(int) - 128).max() <= 1   # the one content row: mid-grey
    assert (tile[0] == (122, 116, 104)).all()                # the rest: llava's pad colour


def test_reduced_decode_memory_is_bounded():
    """In a fresh interpreter: decoding the 72 MP JPEG for llava raises the peak resident
    memory by far less than its 72 MB of grey (216 MB as RGB) would."""
    code = f"""
import resource, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from test_image_reduce import uniform_jpeg, params
from llamapy.multimodal import preprocess_u8
from llamapy.multimodal.image_input import load_image
data, p = uniform_jpeg(65500, 1100), params("llava15")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
preprocess_u8(load_image(data, reduce_for=p), p)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).parents[1]),
                                                                    os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout.strip().splitlines()[-1]) < 40  # MiB


# -- reduced decoding stays close ---------------------------------------------------------------

def _layout(pre):
    return ([t.shape for t in pre.tiles], None if pre.overview is None else pre.overview.shape, pre.grid,
            pre.original_size)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("vtype", FIXTURE_TYPES)
def test_reduced_decode_is_close_to_a_full_decode(vtype, fmt, monkeypatch):
    """Same layout as decoding everything; pixels within a few levels (JPEG: libjpeg's DCT
    scaling, then a box reduce; PNG: a box reduce, here made to apply to a small image), though
    each reduction here is large."""
    monkeypatch.setattr(image_input, "EXACT_DECODE_PIXELS", 0)
    # Qwen reads up to 4096 merged tokens (3.2 MP) by default: a smaller budget makes it reduce
    p = params(vtype, **({"image_max_tokens": 16} if vtype == "qwen2vl" else {}))
    data = encode(photo(), fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    full_im, small_im = load_image(data), load_image(data, reduce_for=p)
    assert small_im.width <= full_im.width // 2 and small_im.info[REDUCED_FROM_KEY][:2] == (1000, 750)
    full, small = preprocess_u8(full_im, p), preprocess_u8(small_im, p)
    assert _layout(small) == _layout(full)
    a = np.concatenate([x.ravel() for x in full.in_chunk_order()]).astype(int)
    b = np.concatenate([x.ravel() for x in small.in_chunk_order()]).astype(int)
    diff = np.abs(a - b)
    # the worst pixels lie on the last row or column, whose reduced pixel stands for a partial box
    assert diff.mean() <= 0.5 and np.percentile(diff, 99) <= 4 and diff.max() <= 16, (diff.mean(), diff.max())
    assert image_hash(small_im) != image_hash(np.asarray(small_im))  # keyed with its original size


def test_rotated_jpeg_is_reduced_upright():
    """EXIF orientation 6 (stored 1000 x 750, shown 750 x 1000): the draft request follows the
    stored axes, the layout the upright ones."""
    p = params("qwen2vl", image_max_tokens=16)
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(photo(), "JPEG", quality=90, exif=exif.tobytes())
    full_im, small_im = load_image(data), load_image(data, reduce_for=p)
    assert full_im.size == (750, 1000)
    assert small_im.info[REDUCED_FROM_KEY][:2] == (750, 1000) and small_im.height > small_im.width
    full, small = preprocess_u8(full_im, p), preprocess_u8(small_im, p)
    assert _layout(small) == _layout(full)
    assert np.abs(small.tiles[0].astype(int) - full.tiles[0]).mean() <= 0.6
    # without EXIF handling the stored orientation is both what is decoded and laid out
    flat = load_image(data, reduce_for=p, apply_exif=False)
    assert flat.info[REDUCED_FROM_KEY][:2] == (1000, 750) and flat.width > flat.height


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
@pytest.mark.parametrize("vtype,size", [("qwen2vl", (600, 450)), ("gemma3", (350, 260))])
def test_no_reduction_needed_decodes_exactly_as_before(vtype, size, fmt):
    """Sides under 2 x REDUCING_GAP times what the projector reads (Qwen: the image itself;
    gemma3's fixture: 64 x 48 of a 64 px tile): nothing is reduced, so the same pixels, no
    reduced-from key, the same hash and preprocessing."""
    p = params(vtype)
    data = encode(photo(*size, seed=3), fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    need = source_size_needed(size, p)
    assert min(size[0] // (REDUCING_GAP * need[0]), size[1] // (REDUCING_GAP * need[1])) < 2
    plain, for_p = load_image(data), load_image(data, reduce_for=p)
    np.testing.assert_array_equal(np.asarray(for_p), np.asarray(plain))
    assert REDUCED_FROM_KEY not in for_p.info and image_hash(for_p) == image_hash(plain)
    np.testing.assert_array_equal(preprocess_u8(for_p, p).tiles[0], preprocess_u8(plain, p).tiles[0])


def test_pil_image_input_is_reduced_not_drafted(monkeypatch):
    """A PIL image the caller opened is theirs: it is decoded as is (no draft) and reduced after
    (past EXACT_DECODE_PIXELS, made 0 here)."""
    monkeypatch.setattr(image_input, "EXACT_DECODE_PIXELS", 0)
    p = params("llava15")
    src = Image.open(io.BytesIO(encode(photo(), "JPEG", quality=90)))
    out = load_image(src, reduce_for=p)
    # reduce(11): 1000 // (3 * 28) and 750 // (3 * 21); sizes rounded up
    assert src.size == (1000, 750) and out.info[REDUCED_FROM_KEY] == (1000, 750, 11) and out.size == (91, 69)
    # handing the result back (a caller's loop) keeps it and what it was reduced from
    again = load_image(out, reduce_for=p)
    assert again.size == (91, 69) and again.info[REDUCED_FROM_KEY] == (1000, 750, 11)


@pytest.mark.parametrize("fmt", ["PNG", "BMP"])
def test_lossless_images_below_the_exact_limit_are_decoded_exactly(fmt):
    """A 1000 x 750 PNG for the LLaVA 1.5 fixture (28 px tiles) could be box-reduced 11x, but below
    EXACT_DECODE_PIXELS it is not: its pixels stay those llama.cpp decodes. A JPEG of the same
    size is drafted (its decoders never agreed bit for bit)."""
    p = params("llava15")
    data = encode(photo(), fmt)
    assert REDUCED_FROM_KEY not in load_image(data, reduce_for=p).info
    np.testing.assert_array_equal(np.asarray(load_image(data, reduce_for=p)), np.asarray(load_image(data)))
    assert REDUCED_FROM_KEY in load_image(encode(photo(), "JPEG", quality=90), reduce_for=p).info


def test_bad_original_size_key():
    im = Image.fromarray(np.zeros((30, 40, 3), np.uint8))
    im.info[REDUCED_FROM_KEY] = (40, 30, 2)  # would be 20 x 15 pixels
    with pytest.raises(ValueError, match="reduced_from"):
        preprocess_u8(im, params("llava15"))


def test_handler_lays_out_a_65500_px_jpeg_from_its_original_size(tmp_path):
    """The chat handlers load images reduced for their projector: the 72 MP JPEG (over the
    budget if decoded whole) becomes llava's one 4-token image chunk."""
    from vlm_recorded_encoder import model_paths

    from llamapy import Llama
    from llamapy.multimodal import handlers as H
    from llamapy.multimodal.chunks import ImageChunk
    path = tmp_path / "wide.jpg"
    path.write_bytes(uniform_jpeg(65500, 1100))
    text, proj = model_paths("llava15")
    handler = H.MTMDChatHandler(clip_model_path=proj, verbose=False)
    llm = Llama(text, n_ctx=256, verbose=False, vocab_only=True)
    prompt = handler.build_prompt(llm, H.MEDIA_MARKER + "Describe this image.", [str(path)])
    images = [c for c in prompt.chunks if isinstance(c, ImageChunk)]
    assert [c.n_tokens for c in images] == [4]
