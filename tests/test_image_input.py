"""llamapy.multimodal.image_input: every accepted image form, decoding rules, and every bad case.

Images are made with Pillow in tmp_path; URLs are served by a local http.server on 127.0.0.1.
"""
import base64
import http.server
import io
import os
import socket
import struct
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

Image = pytest.importorskip("PIL.Image")

from corrupt_bytes import corrupted  # noqa: E402
from llamapy.multimodal.image_input import (decode_image, image_hash, image_url_from_part, load_image,
                                            read_image_bytes)


def _pattern(w=5, h=3):
    """A small image whose every pixel differs: (h, w, 3) uint8."""
    y, x = np.mgrid[0:h, 0:w]
    return np.stack([x * 40 + 7, y * 60 + 3, (x + y) * 20 + 100], axis=2).astype(np.uint8)


def _encode(im, fmt, **kw):
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def _png_header_only(width, height):
    """A PNG whose IHDR claims width x height, with one tiny IDAT: a header-level bomb / 0-side file."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + _png_chunk(b"IEND", b""))


PIXELS = _pattern()
PNG = _encode(Image.fromarray(PIXELS), "PNG")


# -- accepted forms ---------------------------------------------------------------------------

def _assert_pattern(im):
    assert im.mode == "RGB" and im.size == (5, 3)
    np.testing.assert_array_equal(np.asarray(im), PIXELS)


def test_path_str_pathlike_and_file_url(tmp_path):
    path = tmp_path / "with space é.png"
    path.write_bytes(PNG)
    _assert_pattern(load_image(str(path)))
    _assert_pattern(load_image(path))
    _assert_pattern(load_image(path.as_uri()))
    _assert_pattern(load_image("file://localhost" + path.as_uri()[len("file://"):]))


def test_bytes_bytearray_memoryview():
    for data in (PNG, bytearray(PNG), memoryview(PNG)):
        _assert_pattern(load_image(data))


def test_data_uri():
    uri = "data:image/png;base64," + base64.b64encode(PNG).decode()
    _assert_pattern(load_image(uri))
    wrapped = "data:image/png;base64," + "\n".join(base64.encodebytes(PNG).decode().split())
    _assert_pattern(load_image(wrapped))
    _assert_pattern(load_image("data:;base64," + base64.b64encode(PNG).decode()))
    _assert_pattern(load_image("DATA:image/png;BASE64," + base64.b64encode(PNG).decode()))


def test_pil_image_any_mode():
    _assert_pattern(load_image(Image.fromarray(PIXELS)))
    grey = load_image(Image.fromarray(PIXELS[:, :, 0]))
    np.testing.assert_array_equal(np.asarray(grey), np.repeat(PIXELS[:, :, :1], 3, axis=2))


def test_openai_part_shapes(tmp_path):
    path = tmp_path / "a.png"
    path.write_bytes(PNG)
    nested = {"type": "image_url", "image_url": {"url": str(path)}}
    flat = {"type": "image_url", "image_url": str(path)}
    assert image_url_from_part(nested) == image_url_from_part(flat) == str(path)
    assert image_url_from_part({"url": "x.png"}) == "x.png"
    _assert_pattern(load_image(nested))
    _assert_pattern(load_image(flat))
    for bad in ({"type": "text", "image_url": "x"}, {"type": "image_url", "image_url": {"uri": "x"}},
                {"text": "hi"}, 3):
        with pytest.raises(ValueError):
            image_url_from_part(bad)


# -- decoding rules ----------------------------------------------------------------------------

@pytest.mark.parametrize("fmt,kw", [("PNG", {}), ("WEBP", {"lossless": True}), ("BMP", {}), ("GIF", {})])
def test_lossless_formats_round_trip(fmt, kw):
    if fmt == "GIF":  # palette format: use few colours so it round-trips exactly
        pixels = np.zeros((3, 5, 3), np.uint8)
        pixels[1, 2] = (255, 0, 0)
    else:
        pixels = PIXELS
    im = load_image(_encode(Image.fromarray(pixels), fmt, **kw))
    np.testing.assert_array_equal(np.asarray(im), pixels)


def test_jpeg_decodes_close():
    im = load_image(_encode(Image.fromarray(PIXELS), "JPEG", quality=95))
    assert im.mode == "RGB" and im.size == (5, 3)


def test_gif_first_frame_and_transparent_black():
    frames = [Image.new("P", (4, 4), 1), Image.new("P", (4, 4), 2)]
    palette = [0, 0, 0, 200, 10, 10, 10, 200, 10] + [0] * (256 * 3 - 9)
    for f in frames:
        f.putpalette(palette)
    data = _encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=10, loop=0)
    im = load_image(data)
    assert im.getpixel((0, 0)) == (200, 10, 10)

    clear = Image.new("P", (4, 4), 1)
    clear.putpalette(palette)
    clear.putpixel((0, 0), 2)
    data = _encode(clear, "GIF", transparency=2)
    im = load_image(data)
    assert im.getpixel((0, 0)) == (0, 0, 0)  # stb_image leaves transparent GIF pixels black
    assert im.getpixel((1, 1)) == (200, 10, 10)


def test_exif_orientation():
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    data = _encode(Image.fromarray(_pattern(8, 2)), "JPEG", exif=exif.tobytes())
    assert load_image(data).size == (2, 8)
    assert load_image(data, apply_exif=False).size == (8, 2)


def test_alpha_dropped_like_stb_or_composited():
    rgba = np.zeros((2, 2, 4), np.uint8)
    rgba[..., :3] = (10, 20, 30)
    rgba[0, 0, 3] = 255
    png = _encode(Image.fromarray(rgba, "RGBA"), "PNG")
    assert np.all(np.asarray(load_image(png)) == (10, 20, 30))
    composited = np.asarray(load_image(png, background=(255, 255, 255)))
    assert tuple(composited[0, 0]) == (10, 20, 30) and tuple(composited[1, 1]) == (255, 255, 255)
    with pytest.raises(ValueError, match="background"):
        load_image(png, background=(1, 2))


def test_la_and_palette_transparency():
    la = Image.fromarray(np.array([[[50, 0], [90, 255]]], np.uint8), "LA")
    assert np.asarray(load_image(_encode(la, "PNG"))).tolist() == [[[50] * 3, [90] * 3]]
    p = Image.new("P", (2, 1), 1)
    p.putpalette([0, 0, 0, 7, 8, 9] + [0] * 762)
    data = _encode(p, "PNG", transparency=1)
    assert np.asarray(load_image(data)).tolist() == [[[7, 8, 9], [7, 8, 9]]]  # palette RGB kept
    assert np.asarray(load_image(data, background=(1, 1, 1))).tolist() == [[[1, 1, 1], [1, 1, 1]]]


def test_grey_and_16_bit_grey():
    grey = np.array([[0, 128, 255]], np.uint8)
    out = np.asarray(load_image(_encode(Image.fromarray(grey), "PNG")))
    assert out.tolist() == [[[0] * 3, [128] * 3, [255] * 3]]
    deep = np.array([[0, 0x1234, 0xFFFF]], np.uint16)
    out = np.asarray(load_image(_encode(Image.fromarray(deep), "PNG")))
    assert out[..., 0].tolist() == [[0, 0x12, 0xFF]]


# -- bad input -----------------------------------------------------------------------------

@pytest.mark.parametrize("data,match", [
    (b"", "empty"),
    (b"hello, not an image at all", "not an image"),
    (PNG[: len(PNG) // 2], "truncated|corrupt"),
    (_encode(Image.fromarray(PIXELS), "JPEG")[:40], "truncated|corrupt"),
    (_png_header_only(50_000, 50_000), "bomb|pixel"),
    (_png_header_only(0, 7), "0x7"),
    (b"\x89PNG\r\n\x1a\n" + b"\0" * 30, "PNG image is truncated or corrupt"),
    (_encode(Image.fromarray(PIXELS), "TIFF"), "not an image|unsupported"),
])
def test_bad_bytes(data, match):
    with pytest.raises(ValueError, match=match):
        load_image(data)


def test_zero_side_and_pixel_cap():
    with pytest.raises(ValueError, match="0x0"):
        load_image(Image.new("RGB", (0, 0)))
    with pytest.raises(ValueError, match="5x0"):
        load_image(Image.new("RGB", (5, 0)))
    with pytest.raises(ValueError, match="pixel limit"):
        load_image(PNG, max_pixels=14)
    with pytest.raises(ValueError, match="pixel limit"):
        decode_image(_png_header_only(9_000, 9_000), max_pixels=10_000_000)


def test_bad_sources(tmp_path):
    with pytest.raises(ValueError, match="cannot read"):
        load_image(str(tmp_path / "missing.png"))
    with pytest.raises(ValueError, match="not a file"):
        load_image(tmp_path)
    big = tmp_path / "big.png"
    big.write_bytes(PNG)
    with pytest.raises(ValueError, match="limit"):
        load_image(big, max_bytes=10)
    with pytest.raises(ValueError, match="base64"):
        load_image("data:image/png," + PNG.decode("latin-1"))
    with pytest.raises(ValueError, match="invalid base64"):
        load_image("data:image/png;base64,@@@@")
    with pytest.raises(ValueError, match="media type"):
        load_image("data:text/plain;base64,aGk=")
    with pytest.raises(ValueError, match=","):
        load_image("data:image/png;base64")
    with pytest.raises(ValueError, match="scheme 'ftp'"):
        load_image("ftp://example.com/a.png")
    with pytest.raises(ValueError, match="remote host"):
        load_image("file://example.com/a.png")
    with pytest.raises(ValueError, match="unsupported image source"):
        load_image(12345)


# -- http(s) -----------------------------------------------------------------------------------

class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def handle(self):
        try:
            super().handle()
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
            pass

    def _send(self, body, length=True):
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/good.png":
            self._send(PNG)
        elif self.path == "/slow.png":
            time.sleep(1.5)
            self._send(PNG)
        elif self.path == "/drip.png":
            self.send_response(200)
            self.end_headers()
            for i in range(0, len(PNG), 8):
                self.wfile.write(PNG[i:i + 8])
                self.wfile.flush()
                time.sleep(0.05)
        elif self.path == "/short.png":  # declares more than it sends, then hangs up
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Length", str(len(PNG) + 1000))
            self.end_headers()
            self.wfile.write(PNG[:20])
        elif self.path == "/garbage":  # not HTTP at all
            self.close_connection = True
            self.wfile.write(b"\x00\x01 not a status line\r\n\r\n")
        elif self.path == "/huge-declared.png":
            self._send(PNG + b"\0" * 5000)
        elif self.path == "/huge-streamed.png":
            self.close_connection = True
            self._send(PNG + b"\0" * 300_000, length=False)
        else:
            self.send_error(404, "Not Found")


@pytest.fixture(scope="module")
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_http_good(server):
    _assert_pattern(load_image(server + "/good.png", timeout=5))
    assert read_image_bytes(server + "/good.png") == PNG


def test_http_slow_response_times_out(server):
    with pytest.raises(ValueError, match="/slow.png"):
        load_image(server + "/slow.png", timeout=0.3)


def test_http_slow_drip_hits_total_deadline(server):
    with pytest.raises(ValueError, match="longer than"):
        load_image(server + "/drip.png", timeout=0.3)


def test_http_oversized_body(server):
    with pytest.raises(ValueError, match="limit"):
        load_image(server + "/huge-declared.png", max_bytes=len(PNG) + 100)
    with pytest.raises(ValueError, match="limit"):
        load_image(server + "/huge-streamed.png", max_bytes=100_000)


def test_http_short_body_and_bad_status(server):
    with pytest.raises(ValueError, match="/short.png (ended after|.*IncompleteRead)"):
        load_image(server + "/short.png", timeout=5)
    with pytest.raises(ValueError, match="/garbage"):
        load_image(server + "/garbage", timeout=5)


def test_http_404(server):
    with pytest.raises(ValueError, match="404"):
        load_image(server + "/missing.png")


def test_http_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/a.png"
    with pytest.raises(ValueError, match=f"127.0.0.1:{port}"):
        load_image(url, timeout=2)


# -- content hash ------------------------------------------------------------------------------

def test_image_hash_keys_pixels_not_encoding():
    a = image_hash(load_image(PNG))
    assert a == image_hash(load_image(_encode(Image.fromarray(PIXELS), "WEBP", lossless=True)))
    assert a == image_hash(PIXELS)
    other = PIXELS.copy()
    other[0, 0, 0] ^= 1
    assert image_hash(other) != a
    assert image_hash(PIXELS.reshape(5, 3, 3)) != a  # same bytes, different size
    with pytest.raises(ValueError):
        image_hash(PIXELS.astype(np.float32))
    with pytest.raises(ValueError):
        image_hash("not an image")


def test_corrupted_files_raise_only_value_error():
    """Seeded byte flips, truncations and insertions in every format: decoded, or ValueError."""
    rng = np.random.default_rng(0)
    sources = [_encode(Image.fromarray(_pattern(50, 40)), fmt, **kw) for fmt, kw in
               [("PNG", {}), ("JPEG", {}), ("JPEG", {"progressive": True}), ("GIF", {}),
                ("WEBP", {}), ("BMP", {})]]
    for i in range(600):
        data = corrupted(sources[i % len(sources)], rng, i)
        try:
            im = load_image(data)
        except ValueError:
            continue
        assert im.mode == "RGB" and im.width > 0 and im.height > 0
