"""Pieces shared by the writers of tiny test models (model_ref.py for
decoders, encoder_ref.py for encoders): the hyperparameters every
architecture declares, weights stored as F32 / F16 / Q8_0, and finishing
the file."""
from __future__ import annotations

import gguf
import numpy as np

Q8_0 = gguf.GGMLQuantizationType.Q8_0


def add_common_hparams(wr: gguf.GGUFWriter, arch: str, *, n_ctx_train: int, n_embd: int, n_layer: int, n_ff: int,
                       n_head: int) -> None:
    wr.add_name(f"tiny {arch}")
    wr.add_uint32(f"{arch}.context_length", n_ctx_train)
    wr.add_uint32(f"{arch}.embedding_length", n_embd)
    wr.add_uint32(f"{arch}.block_count", n_layer)
    wr.add_uint32(f"{arch}.feed_forward_length", n_ff)
    wr.add_uint32(f"{arch}.attention.head_count", n_head)


def add_weight(wr: gguf.GGUFWriter, name: str, arr: np.ndarray, t: str) -> None:
    """Stores arr as type t: "F32", "F16" or "Q8_0"."""
    if t == "F32":
        wr.add_tensor(name, np.asarray(arr, dtype=np.float32))
    elif t == "F16":
        wr.add_tensor(name, np.asarray(arr).astype(np.float16))
    elif t == "Q8_0":
        q = gguf.quants.quantize(np.asarray(arr, dtype=np.float32), Q8_0)
        wr.add_tensor(name, q, raw_shape=q.shape, raw_dtype=Q8_0)
    else:
        raise ValueError(f"tiny models store F32, F16 or Q8_0, not {t}")


def finish(wr: gguf.GGUFWriter) -> None:
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
