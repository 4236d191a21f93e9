"""Writes a float copy of a quantized GGUF model: every quantized tensor
dequantized exactly and stored as F16 or F32, all metadata copied. Used to
compare float-weight inference with llama.cpp on a real model (with float
weights nothing is quantized inside the dot products, so outputs must agree
far more closely than with quantized weights); tools/record_llama_cpp_fixtures.py
records llama.cpp's side on the same file.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

_SCALAR_TYPES = {
    "u8": "UINT8", "i8": "INT8", "u16": "UINT16", "i16": "INT16", "u32": "UINT32", "i32": "INT32",
    "u64": "UINT64", "i64": "INT64", "f32": "FLOAT32", "f64": "FLOAT64", "bool": "BOOL", "string": "STRING",
}


def write_float_copy(src: str, dst: str, dtype: str = "F16") -> str:
    import gguf
    from llamapy import GGUFFile, _engine

    VT = gguf.GGUFValueType
    out_type = {"F16": np.float16, "F32": np.float32}[dtype]
    with GGUFFile(src) as f:
        w = gguf.GGUFWriter(dst, f.architecture)
        for key in f.metadata:
            if key == "general.architecture":
                continue  # the writer adds it
            t, v = f.metadata_type(key), f.metadata[key]
            if key == "general.file_type":
                v = {"F16": 1, "F32": 0}[dtype]
            if t.startswith("array["):
                sub = t[len("array["):-1]
                w.add_key_value(key, list(v), VT.ARRAY, sub_type=getattr(VT, _SCALAR_TYPES[sub]))
            else:
                w.add_key_value(key, v, getattr(VT, _SCALAR_TYPES[t]))
        for ti in f.tensors:
            shape = tuple(reversed(ti.ne))
            if ti.type_name in ("F32", "F16"):
                a = np.asarray(f.tensor(ti.name), dtype=np.float32).reshape(shape)
            else:
                a = _engine.dequantize(f.tensor(ti.name), ti.type_name, list(shape))
            # Norm weights (1-D) stay F32, as llama.cpp's converters keep them.
            w.add_tensor(ti.name, a.astype(out_type) if a.ndim > 1 else a.astype(np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    return dst


if __name__ == "__main__":
    import sys

    write_float_copy(sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "F16")
    print(Path(sys.argv[2]).stat().st_size)


def write_random_adapter(base: str, dst: str, rank: int = 8, alpha: float = 16.0, seed: int = 42) -> str:
    """A seeded random LoRA adapter (llama.cpp's GGUF adapter format, F32)
    for every attn_q, attn_v and ffn_down matrix of the model at `base`."""
    import gguf
    from llamapy import GGUFFile
    from tiny_gguf import add_weight, finish

    rng = np.random.default_rng(seed)
    with GGUFFile(base) as f:
        w = gguf.GGUFWriter(dst, f.architecture)
        w.add_string("general.type", "adapter")
        w.add_string("adapter.type", "lora")
        w.add_float32("adapter.lora.alpha", alpha)
        for t in f.tensors:
            if t.name.endswith(("attn_q.weight", "attn_v.weight", "ffn_down.weight")):
                n_in, n_out = t.ne[0], t.ne[1]
                add_weight(w, t.name + ".lora_a", (rng.standard_normal((rank, n_in)) * 0.02).astype(np.float32), "F32")
                add_weight(w, t.name + ".lora_b", (rng.standard_normal((n_out, rank)) * 0.02).astype(np.float32), "F32")
        finish(w)
    return dst
