"""A GGUF file reduced to comparable data: every metadata key with its GGUF value type and value,
every tensor's shape, type and the sha256 of its bytes. Shared by tests/test_convert_decoder.py
and tools/make_convert_fixtures.py (which stores the reference converter's digests), so both
sides are reduced the same way. Not a GGUF reader (that is gguf.GGUFReader)."""
from __future__ import annotations

import hashlib


def _value(field):
    import gguf

    t = field.types[0] if field.types else None
    if t == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[-1]).decode("utf-8", "surrogateescape")
    return field.parts[-1].tolist()[0]


def gguf_digest(path: str) -> dict:
    import gguf

    r = gguf.GGUFReader(path)
    kv = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        kv[name] = [[int(t) for t in field.types], _value(field)]
    tensors = {}
    for t in r.tensors:
        tensors[t.name] = [[int(d) for d in t.shape], t.tensor_type.name,
                           hashlib.sha256(bytes(t.data.tobytes())).hexdigest()]
    return {"kv": kv, "tensors": tensors, "tensor_order": [t.name for t in r.tensors]}
