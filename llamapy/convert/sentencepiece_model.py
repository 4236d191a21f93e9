"""The pieces of a SentencePiece ``tokenizer.model`` without the sentencepiece package.

The file is a protobuf ``ModelProto``; only its ``pieces`` (field 1, repeated message) are read:
each ``SentencePiece`` has ``piece`` (field 1, string), ``score`` (field 2, float32) and
``type`` (field 3, enum: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte;
1 when absent). Everything else (trainer and normalizer specs) is skipped by wire type.
Malformed input raises ValueError, never loops or reads past the buffer.

Not here: tokenizing (llamapy's engine does that from the GGUF).
"""
from __future__ import annotations

import struct
from typing import List, Tuple

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def _varint(buf: bytes, i: int) -> Tuple[int, int]:
    out, shift = 0, 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("tokenizer.model: truncated or overlong varint")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return out, i


def _fields(buf: bytes):
    """(field number, wire type, value) over one message; value is an int or a bytes slice."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(buf, i)
        elif wire == 1:
            v, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wire == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"tokenizer.model: unsupported protobuf wire type {wire}")
        if i > len(buf):
            raise ValueError("tokenizer.model: a field runs past the end of the file")
        yield num, wire, v


def read_pieces(path: str) -> List[Tuple[str, float, int]]:
    """[(piece text, score, type)] in id order."""
    with open(path, "rb") as f:
        buf = f.read()
    pieces = []
    for num, wire, v in _fields(buf):
        if num != 1 or wire != 2:
            continue
        text, score, kind = None, 0.0, NORMAL
        for n2, w2, v2 in _fields(v):
            if n2 == 1 and w2 == 2:
                text = bytes(v2).decode("utf-8")
            elif n2 == 2 and w2 == 5:
                score = struct.unpack("<f", v2)[0]
            elif n2 == 3 and w2 == 0:
                kind = int(v2)
        if text is None:
            raise ValueError(f"tokenizer.model: piece {len(pieces)} has no text")
        pieces.append((text, score, kind))
    if not pieces:
        raise ValueError(f"{path} holds no SentencePiece pieces")
    return pieces
