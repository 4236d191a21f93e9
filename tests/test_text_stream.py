"""Streaming text helpers: UTF-8 reassembly and stop strings across chunks."""
from __future__ import annotations

import random

import pytest

from llamapy._text import StopMatcher, Utf8Stream, drop_invalid


def test_utf8_stream_reassembles_split_characters():
    text = "héllo wörld — 你好 🌍👩‍👩‍👧 한국어"
    data = text.encode()
    rng = random.Random(0)
    for _ in range(200):
        s = Utf8Stream()
        out, i = [], 0
        while i < len(data):
            n = rng.randint(1, 4)
            piece = s.feed(data[i:i + n])
            assert "\ufffd" not in piece  # never a garbled half character
            out.append(piece)
            i += n
        out.append(s.flush())
        assert "".join(out) == text


def test_utf8_stream_drops_invalid_bytes():
    # As bytes.decode(errors="ignore") (llama-cpp-python's completion text).
    s = Utf8Stream()
    assert s.feed(b"a\xffb") == "ab"
    assert s.feed(b"\xe4\xbd") == ""     # unfinished: held back
    assert s.flush() == ""                  # never finished: dropped
    assert s.n_chars == 2
    s = Utf8Stream()
    assert s.feed(b"\xe2\x82A\x80\xef\xbf\xbd") == "A\ufffd"  # a U+FFFD the model wrote stays
    assert s.n_chars == 2


def test_utf8_stream_matches_whole_decode_with_ignore():
    rng = random.Random(1)
    alphabet = [b"a", b"\x80", b"\xc3", b"\xa9", b"\xe2", b"\x82", b"\xac", b"\xf0", b"\x9f", b"\xff", b"\xed\xa0\x80"]
    for _ in range(300):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        s = Utf8Stream()
        out = []
        i = 0
        while i < len(data):
            n = rng.randint(1, 3)
            out.append(s.feed(data[i:i + n]))
            i += n
        out.append(s.flush())
        want = data.decode("utf-8", errors="ignore")
        assert "".join(out) == want and s.n_chars == len(want)


def test_marked_invalid_bytes_keep_stop_strings_apart():
    s = Utf8Stream()
    marked = s.feed_marked(b"x\xffSTOP")
    m = StopMatcher(["xSTOP"])
    shown, stopped = m.push(marked)
    assert not stopped and drop_invalid(shown + m.flush()) == "xSTOP"


def run_matcher(stops, chunks):
    m = StopMatcher(stops)
    shown = []
    for c in chunks:
        out, stopped = m.push(c)
        shown.append(out)
        if stopped:
            break
    else:
        shown.append(m.flush())
    return "".join(shown), m.stopped


@pytest.mark.parametrize("seed", range(30))
def test_stop_never_leaks_into_stream(seed):
    rng = random.Random(seed)
    stops = ["\n\n", "###", "User:"]
    body = "".join(rng.choice(["a", "b", "#", "\n", "U", "ser", ":", " "]) for _ in range(60))
    # split into random chunks
    chunks, i = [], 0
    while i < len(body):
        n = rng.randint(1, 5)
        chunks.append(body[i:i + n])
        i += n
    shown, stopped = run_matcher(stops, chunks)
    positions = [body.find(s) for s in stops if s in body]
    if positions:
        assert stopped and shown == body[: min(positions)]
    else:
        assert not stopped and shown == body
    for s in stops:
        assert s not in shown


def test_partial_stop_prefix_released_when_it_does_not_complete():
    shown, stopped = run_matcher(["STOP"], ["ab", "ST", "O", "x", "yz"])
    assert (shown, stopped) == ("abSTOxyz", False)


def test_stop_split_across_chunks():
    shown, stopped = run_matcher(["<end>"], ["hello <e", "n", "d> world"])
    assert (shown, stopped) == ("hello ", True)


def test_no_stops_passes_through():
    m = StopMatcher([])
    assert m.push("abc") == ("abc", False)
    assert m.flush() == ""
