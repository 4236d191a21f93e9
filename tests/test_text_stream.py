"""Streaming text helpers: UTF-8 reassembly and stop strings across chunks."""
from __future__ import annotations

import random

import pytest

from llamapy._text import StopMatcher, Utf8Stream


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


def test_utf8_stream_invalid_bytes_become_replacement():
    s = Utf8Stream()
    assert s.feed(b"a\xffb") == "a\ufffdb"
    assert s.feed(b"\xe4\xbd") == ""
    assert s.flush() == "\ufffd"


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
