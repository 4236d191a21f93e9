"""Records llama.cpp's outputs on the tiny vision-language GGUFs, through llama-cpp-python.

What this is: for each (model, image) pair it stores
  - caption: the 16-token greedy reply of the chat handler to a fixed prompt, with the
    token ids and the top-2 raw logits at every step (argmax of the raw logits is the
    greedy token: temperature 0, repeat_penalty 1.0, no other samplers act);
  - image chunks: for every image chunk that mtmd_tokenize makes, its token count and
    grid, the projector output (mtmd_encode_chunk + mtmd_get_output_embd) and the
    preprocessed pixels that clip fed its graph (captured by an eval callback on the input
    tensor named "inp_raw").
What it is not: a dependency of llamapy. It needs llama-cpp-python and a libmtmd.so
(tools/vlm/build_libmtmd.sh), pointed to by MTMD_CPP_LIB.
"""
from __future__ import annotations

import ctypes
import hashlib
import pathlib

import numpy as np

PROMPT = "Describe this image."
N_CAPTION = 16
N_THREADS = 2
N_CTX = 1024


class GgmlTensor(ctypes.Structure):
    """Field layout of `struct ggml_tensor` (ggml.h, GGML_MAX_DIMS 4, GGML_MAX_SRC 10,
    GGML_MAX_OP_PARAMS 64, GGML_MAX_NAME 64)."""
    _fields_ = [
        ("type", ctypes.c_int),
        ("buffer", ctypes.c_void_p),
        ("ne", ctypes.c_int64 * 4),
        ("nb", ctypes.c_size_t * 4),
        ("op", ctypes.c_int),
        ("op_params", ctypes.c_int32 * 16),
        ("flags", ctypes.c_int32),
        ("src", ctypes.c_void_p * 10),
        ("view_src", ctypes.c_void_p),
        ("view_offs", ctypes.c_size_t),
        ("data", ctypes.c_void_p),
        ("name", ctypes.c_char * 64),
        ("extra", ctypes.c_void_p),
        ("padding", ctypes.c_char * 8),
    ]


def _tensor_f32(t: GgmlTensor) -> np.ndarray:
    """Copies a contiguous F32 host tensor; shape is numpy order (ne3, ne2, ne1, ne0)."""
    assert t.type == 0, "inp_raw is F32"
    shape = tuple(int(t.ne[i]) for i in (3, 2, 1, 0))
    n = int(np.prod(shape))
    assert t.nb[0] == 4 and t.nb[1] == 4 * t.ne[0], "contiguous"
    buf = (ctypes.c_float * n).from_address(t.data)
    return np.ctypeslib.as_array(buf).copy().reshape(shape)


class InputCapture:
    """Eval callback that copies every distinct tensor named `inp_raw` a graph reads."""

    def __init__(self, llama_cpp_mod):
        self.arrays: list[np.ndarray] = []
        self._seen: set[int] = set()

        def cb(t_ptr, ask, _user):
            t = ctypes.cast(t_ptr, ctypes.POINTER(GgmlTensor)).contents
            for s in t.src:
                if not s:
                    continue
                src = ctypes.cast(s, ctypes.POINTER(GgmlTensor)).contents
                if src.name != b"inp_raw":
                    continue
                if ask:
                    return True
                if s not in self._seen and src.data:
                    self._seen.add(s)
                    self.arrays.append(_tensor_f32(src))
            return not ask

        self.c_callback = llama_cpp_mod.ggml_backend_sched_eval_callback(cb)

    def reset(self) -> None:
        self.arrays, self._seen = [], set()


def summarize(a: np.ndarray, n_all: int = 4096, n_subset: int = 256) -> dict:
    """All values when small, else stats + every k-th value; always the float32 hash."""
    flat = np.ascontiguousarray(a, dtype=np.float32).ravel()
    out = {"shape": list(a.shape), "sha256_f32": hashlib.sha256(flat.tobytes()).hexdigest(),
           "min": float(flat.min()), "max": float(flat.max()), "mean": float(flat.mean()),
           "std": float(flat.std()), "l2": float(np.linalg.norm(flat.astype(np.float64)))}
    if flat.size <= n_all:
        out["values"] = [float(v) for v in flat]
    else:
        stride = -(-flat.size // n_subset)
        out["subset_stride"] = stride
        out["subset"] = [float(v) for v in flat[::stride]]
    return out


def _greedy_recorder(steps: list):
    def proc(_input_ids, logits):
        top = np.argsort(logits)[::-1][:2]
        steps.append({"token": int(top[0]), "top2_ids": [int(i) for i in top],
                      "top2_logits": [float(logits[i]) for i in top]})
        return logits
    return proc


def record_caption(llama_cls, handler, text_gguf: str, image: pathlib.Path) -> dict:
    from llama_cpp import LogitsProcessorList

    llm = llama_cls(model_path=text_gguf, chat_handler=handler, n_ctx=N_CTX, seed=0,
                    n_threads=N_THREADS, verbose=False)
    steps: list = []
    msgs = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image.resolve().as_uri()}},
        {"type": "text", "text": PROMPT}]}]
    r = llm.create_chat_completion(messages=msgs, temperature=0.0, max_tokens=N_CAPTION,
                                   repeat_penalty=1.0, seed=0,
                                   logits_processor=LogitsProcessorList([_greedy_recorder(steps)]))
    ids = [s["token"] for s in steps]
    n_prompt = r["usage"]["prompt_tokens"]
    evaluated = [int(t) for t in llm.input_ids[n_prompt:llm.n_tokens]]
    assert ids[:len(evaluated)] == evaluated, (ids, evaluated)
    text_from_ids = llm.detokenize(ids).decode("utf-8", errors="replace")
    llm_text_16 = llm.detokenize(ids[:N_CAPTION]).decode("utf-8", errors="replace")
    llm.close()
    return {"prompt": PROMPT, "n_prompt_tokens": n_prompt,
            "caption_16": ids[:N_CAPTION],
            "text_16": llm_text_16,
            "token_ids": ids,
            "text": r["choices"][0]["message"]["content"], "text_from_ids": text_from_ids,
            "finish_reason": r["choices"][0]["finish_reason"], "steps": steps}


def record_chunks(mtmd, llama_cpp_mod, llm, mmproj: str, image: pathlib.Path,
                  arrays: dict, key: str) -> dict:
    """Tokenizes `<__media__>` + PROMPT with the image and encodes every image chunk."""
    capture = InputCapture(llama_cpp_mod)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.print_timings = False
    params.n_threads = N_THREADS
    params.warmup = False
    params.cb_eval = capture.c_callback
    ctx = mtmd.mtmd_init_from_file(mmproj.encode(), llm.model, params)
    assert ctx, "mtmd_init_from_file failed"
    n_embd = llama_cpp_mod.llama_model_n_embd(llm.model)
    out = {"n_embd": n_embd, "chunks": []}
    data = image.read_bytes()  # decoded as the chat handlers do (mtmd helper, from bytes)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(
        ctx, (ctypes.c_uint8 * len(data)).from_buffer(bytearray(data)), len(data), False)
    assert bitmap, "bitmap"
    nx, ny = mtmd.mtmd_bitmap_get_nx(bitmap), mtmd.mtmd_bitmap_get_ny(bitmap)
    rgb = np.ctypeslib.as_array(mtmd.mtmd_bitmap_get_data(bitmap),
                                shape=(mtmd.mtmd_bitmap_get_n_bytes(bitmap),)).copy()
    out.update(bitmap_nx=nx, bitmap_ny=ny,
               bitmap_rgb_sha256=hashlib.sha256(rgb.tobytes()).hexdigest())
    arrays[f"{key}.decoded_rgb"] = rgb.reshape(ny, nx, -1)
    text = (mtmd.mtmd_default_marker().decode() + PROMPT).encode()
    inp = mtmd.mtmd_input_text()
    inp.text, inp.text_len, inp.add_special, inp.parse_special = text, len(text), True, True
    chunks = mtmd.mtmd_input_chunks_init()
    arr = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
    rc = mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), arr, 1)
    assert rc == 0, f"mtmd_tokenize rc={rc}"
    n_img = 0
    for i in range(mtmd.mtmd_input_chunks_size(chunks)):
        ch = mtmd.mtmd_input_chunks_get(chunks, i)
        kind = mtmd.mtmd_input_chunk_get_type(ch)
        entry = {"index": i, "n_tokens": mtmd.mtmd_input_chunk_get_n_tokens(ch),
                 "n_pos": mtmd.mtmd_input_chunk_get_n_pos(ch)}
        if kind == mtmd.MTMD_INPUT_CHUNK_TYPE_TEXT:
            n = ctypes.c_size_t()
            p = mtmd.mtmd_input_chunk_get_tokens_text(ch, ctypes.byref(n))
            entry.update(type="text", token_ids=[int(p[j]) for j in range(n.value)])
        else:
            it = mtmd.mtmd_input_chunk_get_tokens_image(ch)
            entry.update(type="image", nx=mtmd.mtmd_image_tokens_get_nx(it),
                         ny=mtmd.mtmd_image_tokens_get_ny(it))
            capture.reset()
            rc = mtmd.mtmd_encode_chunk(ctx, ch)
            assert rc == 0, f"mtmd_encode_chunk rc={rc}"
            n_tok = entry["n_tokens"]
            emb = np.ctypeslib.as_array(mtmd.mtmd_get_output_embd(ctx),
                                        shape=(n_tok * n_embd,)).copy().reshape(n_tok, n_embd)
            entry["embd"] = summarize(emb)
            arrays[f"{key}.chunk{n_img}.embd"] = emb
            entry["preproc"] = []
            for j, a in enumerate(capture.arrays):
                entry["preproc"].append(summarize(a, n_all=0))
                arrays[f"{key}.chunk{n_img}.pixels{j}"] = a
            n_img += 1
        out["chunks"].append(entry)
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(ctx)
    return out


def render_prompt(template: str) -> str:
    """The GGUF chat template rendered for one user turn (image part, then PROMPT), the
    image part as mtmd's default marker, bos_token empty (mtmd_tokenize adds BOS)."""
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}},
                                         {"type": "text", "text": PROMPT}]}]
    return env.from_string(template).render(messages=msgs, add_generation_prompt=True,
                                            bos_token="", eos_token="")


def record_caption_mtmd(mtmd, llama_cpp_mod, text_gguf: str, mmproj: str,
                        image: pathlib.Path, prompt_text: str) -> dict:
    """Greedy caption through libmtmd's own evaluation path (mtmd_helper_eval_chunks, as
    mtmd-cli does), then one token at a time at explicit positions; argmax of the logits."""
    from llama_cpp import Llama

    llm = Llama(model_path=text_gguf, n_ctx=N_CTX, n_threads=N_THREADS, seed=0, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu, params.print_timings, params.n_threads = False, False, N_THREADS
    ctx = mtmd.mtmd_init_from_file(mmproj.encode(), llm.model, params)
    data = image.read_bytes()
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(
        ctx, (ctypes.c_uint8 * len(data)).from_buffer(bytearray(data)), len(data), False)
    assert bitmap, "bitmap"
    text = prompt_text.encode()
    inp = mtmd.mtmd_input_text()
    inp.text, inp.text_len, inp.add_special, inp.parse_special = text, len(text), True, True
    chunks = mtmd.mtmd_input_chunks_init()
    rc = mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1)
    assert rc == 0, f"mtmd_tokenize rc={rc}"
    lctx = llm._ctx.ctx
    n_past = llama_cpp_mod.llama_pos(0)
    rc = mtmd.mtmd_helper_eval_chunks(ctx, lctx, chunks, 0, 0, llm.n_batch, True,
                                      ctypes.byref(n_past))
    assert rc == 0, f"mtmd_helper_eval_chunks rc={rc}"
    vocab = llama_cpp_mod.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp_mod.llama_vocab_n_tokens(vocab)
    batch = llama_cpp_mod.llama_batch_init(1, 0, 1)
    pos, ids, steps = n_past.value, [], []
    for _ in range(N_CAPTION):
        logits = np.ctypeslib.as_array(llama_cpp_mod.llama_get_logits_ith(lctx, -1),
                                       shape=(n_vocab,))
        top = np.argsort(logits)[::-1][:2]
        tok = int(top[0])
        steps.append({"token": tok, "top2_ids": [int(i) for i in top],
                      "top2_logits": [float(logits[i]) for i in top]})
        ids.append(tok)
        if llama_cpp_mod.llama_vocab_is_eog(vocab, tok):
            break
        batch.n_tokens = 1
        batch.token[0], batch.pos[0], batch.n_seq_id[0] = tok, pos, 1
        batch.seq_id[0][0], batch.logits[0] = 0, True
        assert llama_cpp_mod.llama_decode(lctx, batch) == 0, "llama_decode"
        pos += 1
    llama_cpp_mod.llama_batch_free(batch)
    mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_bitmap_free(bitmap)
    mtmd.mtmd_free(ctx)
    text_out = llm.detokenize(ids).decode("utf-8", errors="replace")
    llm.close()
    return {"prompt_text": prompt_text, "n_past_after_prompt": n_past.value,
            "token_ids": ids, "text": text_out, "steps": steps}
