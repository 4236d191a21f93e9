"""Multimodal chat handlers, chunked prompts, reuse across turns and the caption job, on the tiny
VLM fixtures (tests/data/vlm).

The encoder is parametrized: "recorded" (tests/vlm_recorded_encoder.py: llama.cpp's own
projector outputs, so these tests check the pipeline around the encoder exactly) always,
and "real" (llamapy.multimodal.encoder.VisionEncoder) once that module exists, so the same
tests then run end to end.

Gemma 3 (its image chunks are decoded non-causally) and Qwen2-VL (M-RoPE positions) need
engine features that are not in this build; their parity cases are collected only when the
engine has them (see ``_CASES``).
"""
from __future__ import annotations

import base64
import io
import json
import os
import pickle
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from vlm_recorded_encoder import IMAGES, RecordedEncoder, model_paths, record  # noqa: E402

from llamapy import Llama  # noqa: E402
from llamapy import llama_chat_format as lcf  # noqa: E402
from llamapy.llama_cache import LogitsProcessorList  # noqa: E402
from llamapy.multimodal import handlers as H  # noqa: E402
from llamapy.multimodal.chunks import ChunkedPrompt, ImageChunk, TextChunk, placeholder_ids  # noqa: E402
from llamapy.multimodal.embed_cache import EmbeddingCache  # noqa: E402

pytest.importorskip("PIL")


ENCODERS = ["recorded", "real"]  # llama.cpp's recorded projector outputs, and the native encoder
GAP = 0.01  # divergence from llama.cpp's tokens is allowed only after a top-2 gap below this

_CASES = [
    pytest.param("llava15", "Llava15ChatHandler", id="llava15"),
    pytest.param("llava16", "Llava16ChatHandler", id="llava16"),
    pytest.param("idefics3", "MTMDChatHandler", id="idefics3"),
    pytest.param("gemma3", "MTMDChatHandler", id="gemma3"),
    pytest.param("qwen2vl", "MTMDChatHandler", id="qwen2vl"),
]
# Images whose decoding agrees with llama.cpp's (stb_image): PNGs without alpha. The JPEG
# decoders differ in rounding, RGBA is composited differently, WebP llama.cpp cannot read.
_PIXEL_EXACT = ("tall_37x91.png", "tiny_5x7.png", "grey_50x64.png")
TALL = os.path.join(IMAGES, "tall_37x91.png")
GREY = os.path.join(IMAGES, "grey_50x64.png")
TINY = os.path.join(IMAGES, "tiny_5x7.png")


class CountingCtx:
    """Stands in for the engine context and counts the rows each decode gets."""

    def __init__(self, ctx):
        self._ctx = ctx
        self.token_rows = 0
        self.embd_rows = 0

    def decode(self, tokens=None, embd=None, **kw):
        if tokens is not None:
            self.token_rows += len(tokens)
        if embd is not None:
            self.embd_rows += len(embd)
        return self._ctx.decode(tokens=tokens, embd=embd, **kw)

    def __getattr__(self, name):
        return getattr(self._ctx, name)


def prompt_rows(counter, out):
    """Token rows the prompt took: all decoded rows less the generated tokens fed back (each but
    the last, for a completion that ran to max_tokens)."""
    assert out["choices"][0]["finish_reason"] == "length"
    return counter.token_rows - (out["usage"]["completion_tokens"] - 1)


def _encoder(kind, vtype, check_pixels=True):
    if kind == "recorded":
        return RecordedEncoder(vtype, check_pixels=check_pixels)
    return None  # the handler's default: the real VisionEncoder


def make(vtype, cls_name="Llava15ChatHandler", kind="recorded", n_ctx=1024, check_pixels=True, vocab_only=False,
         **hkw):
    """(llm, handler, encoder, decode counter); ``vocab_only`` for tests that only lay prompts out."""
    text, proj = model_paths(vtype)
    enc = _encoder(kind, vtype, check_pixels)
    handler = getattr(lcf, cls_name)(clip_model_path=proj, verbose=False, encoder=enc, **hkw)
    llm = Llama(text, n_ctx=n_ctx, n_threads=2, verbose=False, chat_handler=handler, vocab_only=vocab_only)
    counter = CountingCtx(llm._ctx)
    llm._ctx = counter
    return llm, handler, enc, counter


def user(*parts):
    content = []
    for p in parts:
        if isinstance(p, str) and not os.path.exists(p) and not p.startswith("http"):
            content.append({"type": "text", "text": p})
        else:
            content.append({"type": "image_url", "image_url": {"url": p}})
    return {"role": "user", "content": content}


def greedy(llm, messages, max_tokens=16, **kw):
    steps = []

    def watch(ids, logits):
        top = np.argsort(logits)[-2:][::-1]
        steps.append((int(top[0]), float(logits[top[0]]) - float(logits[top[1]])))
        return logits

    out = llm.create_chat_completion(messages, temperature=0, repeat_penalty=1.0, max_tokens=max_tokens, seed=0,
                                     logits_processor=LogitsProcessorList([watch]), **kw)
    return out, steps


def assert_tokens_match(ours, ref_steps, ref_ids, max_tokens=16):
    """Token-identical to llama.cpp's greedy caption, or diverging only after a near-tie.
    (llama-cpp-python samples past max_tokens while the text ends inside a UTF-8 character;
    llamapy stops at max_tokens, so only that many are compared.)"""
    for i, ((tok, gap), ref) in enumerate(zip(ours, ref_ids)):
        if tok != ref:
            ref_gap = ref_steps[i]["top2_logits"][0] - ref_steps[i]["top2_logits"][1]
            assert min(gap, ref_gap) < GAP, f"step {i}: token {tok} != llama.cpp's {ref} (top-2 gaps {gap}, {ref_gap})"
            return
    if len(ours) < min(len(ref_ids), max_tokens):
        pytest.fail(f"stopped after {len(ours)} tokens, llama.cpp made {len(ref_ids)}")


# ------------------------------------------------------------------ parity with llama.cpp
@pytest.mark.parametrize("kind", ENCODERS)
@pytest.mark.parametrize("vtype,cls_name", _CASES)
@pytest.mark.parametrize("image", ["tall_37x91.png", "tiny_5x7.png", "grey_50x64.png", "wide_120x33.jpg"])
def test_caption_matches_llama_cpp(vtype, cls_name, kind, image):
    rec = record(vtype)["images"][image]["caption_mmproj_f16"]
    llm, handler, enc, _ = make(vtype, cls_name, kind, check_pixels=image in _PIXEL_EXACT)
    out, steps = greedy(llm, [user(os.path.join(IMAGES, image), "Describe this image.")])
    assert out["usage"]["prompt_tokens"] == rec["n_prompt_tokens"]
    assert_tokens_match(steps, rec["steps"], rec["token_ids"])
    if kind == "recorded" and [s[0] for s in steps] == rec["token_ids"]:
        assert out["choices"][0]["message"]["content"] == rec["text"]


@pytest.mark.parametrize("vtype", ["llava15", "llava16", "idefics3", "gemma3", "qwen2vl", "qwen25vl"])
def test_image_layout_is_mtmd_tokenize(vtype):
    cls_name = "MTMDChatHandler"
    """The bare "<__media__>Describe this image." prompt lays out exactly as mtmd_tokenize did."""
    for image, entry in record(vtype)["images"].items():
        ref = entry["mmproj_f16"].get("chunks")
        if ref is None or image not in _PIXEL_EXACT + ("wide_120x33.jpg", "huge_1536x1152.jpg"):
            continue
        llm, handler, _, _ = make(vtype, cls_name, vocab_only=True, n_ctx=4096)
        prompt = handler.build_prompt(llm, H.MEDIA_MARKER + "Describe this image.", [os.path.join(IMAGES, image)])
        got = [("text", c.tokens) if isinstance(c, TextChunk) else ("image", c.n_tokens, c.n_pos, c.grid)
               for c in prompt.chunks]
        want = [("text", c["token_ids"]) if c["type"] == "text" else ("image", c["n_tokens"], c["n_pos"],
                                                                     (c["nx"], c["ny"])) for c in ref]
        assert got == want, image


# ------------------------------------------------------------------ prompts as llama-cpp-python renders them
_CONVS = {
    "one": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x.png"}},
                                         {"type": "text", "text": "Describe this image."}]}],
    "two": [{"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "image_url", "image_url": "x.png"},
                                         {"type": "image_url", "image_url": {"url": "y.png"}},
                                         {"type": "text", "text": "B"}]},
            {"role": "assistant", "content": "R1"}, {"role": "user", "content": "Q2"}],
}
# What llama-cpp-python 0.3.36's handlers render (its Jinja templates, trim_blocks and all), with
# the image URLs replaced by the media marker as it does.
_SYS15 = ("A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the human's questions.")
M = "<__media__>"
_GOLDEN = {
    ("Llava15ChatHandler", "one"): _SYS15 + f"USER: {M}Describe this image.ASSISTANT: ",
    ("Llava15ChatHandler", "two"): _SYS15 + f"USER: {M}{M}ABASSISTANT: R1USER: Q2USER: ASSISTANT: ",
    ("Llava16ChatHandler", "one"): _SYS15 + f" {M}\nDescribe this image.Answer:",
    ("Llava16ChatHandler", "two"): _SYS15 + f" {M}\n{M}\nABR1Q2Answer:",
    ("NanoLlavaChatHandler", "two"): ("<|im_start|>system\nAnswer the question<|im_end|><|im_start|>user\n"
                                      f"{M}{M}AB<|im_end|><|im_start|>assistant\nR1<|im_end|><|im_start|>user\nQ2"
                                      "<|im_end|><|im_start|>assistant\n"),
    ("Llama3VisionAlphaChatHandler", "one"): (f"<|start_header_id|>user<|end_header_id|>\n\n{M}Describe this image."
                                              "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    ("MiniCPMv26ChatHandler", "two"): ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user"
                                       f"\n{M}{M}AB<|im_end|>\n<|im_start|>assistant\nR1<|im_end|>\n<|im_start|>user"
                                       "\nQ2<|im_end|>\n<|im_start|>assistant\n"),
    ("Qwen25VLChatHandler", "two"): ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
                                     f"A{M}{M}B<|im_end|>\n<|im_start|>assistant\nR1<|im_end|>\n<|im_start|>user\n"
                                     "Q2<|im_end|>\n<|im_start|>assistant"),
    ("MoondreamChatHandler", "one"): f"{M}\n\nQuestion: Describe this image.\n\nAnswer:",
    ("ObsidianChatHandler", "one"): (f"<|im_start|>system\n{_SYS15}\n###\n<|im_start|>user\n{M}Describe this image."
                                     "###\n<|im_start|>assistant\n"),
}


@pytest.mark.parametrize("cls_name,conv", sorted(_GOLDEN))
def test_builtin_formats_render_as_llama_cpp_python(cls_name, conv):
    from llamapy.chat.completion import ChatRequest

    _, proj = model_paths("llava15")
    handler = getattr(lcf, cls_name)(proj, verbose=False, encoder=RecordedEncoder("llava15"))
    req = ChatRequest(messages=handler._with_default_system(list(_CONVS[conv])))
    assert handler.render(None, req, None) == _GOLDEN[(cls_name, conv)]


def test_handler_names_and_chat_formats():
    for name in ("Llava15ChatHandler", "Llava16ChatHandler", "MTMDChatHandler", "Gemma3ChatHandler",
                 "Gemma4ChatHandler", "Qwen25VLChatHandler", "SmolVLMChatHandler", "MoondreamChatHandler",
                 "NanoLlavaChatHandler", "Llama3VisionAlphaChatHandler", "Llama3VisionAlpha",
                 "MiniCPMv26ChatHandler", "ObsidianChatHandler"):
        assert issubclass(getattr(lcf, name), H.MTMDChatHandler)
    assert set(H.MULTIMODAL_CHAT_FORMATS) >= {"llava-1-5", "llava-1-6", "moondream", "nanollava",
                                              "llama-3-vision-alpha", "minicpm-v-2.6", "qwen2.5-vl", "mtmd"}
    text, _ = model_paths("llava15")
    llm = Llama(text, n_ctx=256, verbose=False, chat_format="llava-1-5")
    with pytest.raises(ValueError, match="mmproj"):
        llm.create_chat_completion([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("flash_attn,want", [(False, "explicit"), (True, "flash"), ("auto", "explicit")])
def test_encoder_takes_the_llamas_flash_attn(flash_attn, want):
    # As llama-cpp-python passes Llama(flash_attn=) on to its mtmd context, the handler's
    # encoder gets the Llama's option ("auto": the encoder decides by patch count; these
    # fixtures' 4-patch chunks stay explicit).
    text, proj = model_paths("llava15")
    handler = lcf.Llava15ChatHandler(proj, verbose=False)
    with Llama(text, n_ctx=256, n_threads=1, verbose=False, flash_attn=flash_attn) as llm:
        enc = handler.encoder(llm)
        assert enc.flash_attn == {False: 0, True: 1, "auto": -1}[flash_attn]
        assert enc.attention_path() == want and enc.n_threads == 1
    seen = {}

    def factory(path, n_threads=None, verbose=False, flash_attn="auto"):
        seen.update(path=path, flash_attn=flash_attn)
        return RecordedEncoder("llava15")

    custom = lcf.Llava15ChatHandler(proj, verbose=False, encoder=factory)
    with Llama(text, n_ctx=256, n_threads=1, verbose=False, flash_attn=flash_attn) as llm:
        custom.encoder(llm)
    assert seen == {"path": proj, "flash_attn": {False: 0, True: 1, "auto": -1}[flash_attn]}
    # a factory without the parameter is called as before
    old = lcf.Llava15ChatHandler(proj, verbose=False, encoder=RecordedEncoder("llava15").factory)
    with Llama(text, n_ctx=256, n_threads=1, verbose=False, flash_attn=flash_attn) as llm:
        assert isinstance(old.encoder(llm), RecordedEncoder)


def test_llama_cpp_python_helpers():
    _, proj = model_paths("llava15")
    handler = lcf.Llava15ChatHandler(proj, verbose=False, encoder=RecordedEncoder("llava15"))
    assert handler.get_image_urls([user(TALL, "x"), {"role": "assistant", "content": "y"}]) == [TALL]
    assert handler.load_image(TALL) == open(TALL, "rb").read()
    with pytest.raises(NotImplementedError, match="Hugging Face"):
        lcf.Llava15ChatHandler.from_pretrained("repo", "*mmproj*")


def test_missing_projector_and_encoder():
    with pytest.raises(ValueError, match="does not exist"):
        lcf.Llava15ChatHandler(clip_model_path="/nonexistent/mmproj.gguf")


# ------------------------------------------------------------------ Llama(model, mmproj=...)
@pytest.mark.parametrize("vtype,cls_name", [("llava15", "Llava15ChatHandler"), ("llava16", "Llava16ChatHandler"),
                                             ("idefics3", "SmolVLMChatHandler"), ("gemma3", "Gemma3ChatHandler")])
def test_llama_mmproj_picks_handler(vtype, cls_name, monkeypatch):
    text, proj = model_paths(vtype)
    llm = Llama(text, n_ctx=256, verbose=False, mmproj=proj)
    assert type(llm.chat_handler).__name__ == cls_name
    llm = Llama(text, n_ctx=256, verbose=False, mmproj=proj, chat_format="mtmd")
    assert type(llm.chat_handler) is H.MTMDChatHandler


def test_llama_mmproj_width_mismatch(monkeypatch):
    from llamapy.multimodal import mmproj as mm

    text, proj = model_paths("llava15")
    real = mm.read_mmproj(proj)
    import dataclasses

    monkeypatch.setattr(H, "read_mmproj", lambda p: dataclasses.replace(real, n_mmproj_embd=96))
    with pytest.raises(ValueError, match=r"96.*64"):
        Llama(text, n_ctx=256, verbose=False, mmproj=proj)
    with pytest.raises(ValueError, match="does not exist"):
        Llama(text, n_ctx=256, verbose=False, mmproj="/nonexistent.gguf")


# ------------------------------------------------------------------ reuse across turns
@pytest.mark.parametrize("kind", ENCODERS)
def test_second_turn_reuses_image_and_prefix(kind):
    llm, handler, enc, counter = make("llava15", kind=kind)
    turn1 = [user(TALL, "Describe this image.")]
    out1, _ = greedy(llm, turn1)
    img_tokens = 4
    assert counter.embd_rows == img_tokens
    evaluated = llm.input_ids[:llm.n_tokens].tolist()
    turn2 = turn1 + [{"role": "assistant", "content": out1["choices"][0]["message"]["content"]},
                     user("What colour is the rectangle?")]
    counter.token_rows = counter.embd_rows = 0
    prompt2 = handler.prompt(llm, H.ChatRequest(messages=list(turn2)), None).tokens
    common = Llama.longest_token_prefix(evaluated, list(prompt2))
    out2, _ = greedy(llm, turn2)
    assert counter.embd_rows == 0  # the image stays in the KV cache
    assert prompt_rows(counter, out2) == len(prompt2) - common  # only the new turn is evaluated
    assert common > prompt2.starts[1] + img_tokens  # the match runs past the image
    if enc is not None:
        assert enc.calls == ["tall_37x91.png"]  # encoded once
    assert out2["usage"]["prompt_tokens"] == len(prompt2)


def test_embedding_cache_spares_the_encoder_after_a_reset():
    llm, handler, enc, counter = make("llava15")
    msgs = [user(TALL, "Describe this image.")]
    first, _ = greedy(llm, msgs)
    llm.reset()
    second, _ = greedy(llm, msgs)
    assert enc.calls == ["tall_37x91.png"]
    assert counter.embd_rows == 8  # decoded twice (the KV cache was reset), encoded once
    assert first["choices"][0]["message"]["content"] == second["choices"][0]["message"]["content"]
    assert handler.embedding_cache.hits >= 1


def test_embedding_cache_is_lru_by_bytes():
    cache = EmbeddingCache(max_bytes=3 * 64 * 4 * 4)
    for k in "abcd":
        cache.put(k, np.ones((4, 64), np.float32))
    assert "a" not in cache and len(cache) == 3
    cache.get("b")
    cache.put("e", np.ones((4, 64), np.float32))
    assert "b" in cache and "c" not in cache
    assert cache.nbytes <= cache.max_bytes
    with pytest.raises(ValueError):
        cache.get("b").__setitem__((0, 0), 2.0)


def test_prefix_inside_an_image_backs_up_to_its_start():
    llm, handler, enc, counter = make("llava15")
    msgs = [user(TALL, "Describe this image.")]
    greedy(llm, msgs, max_tokens=2)
    prompt = handler.prompt(llm, H.ChatRequest(messages=list(msgs)), None).tokens
    start = prompt.starts[1]
    assert isinstance(prompt.chunks[1], ImageChunk)
    llm.input_ids[start + 2] = 12345  # the evaluated rows now agree with the prompt 2 rows into the image
    counter.token_rows = counter.embd_rows = 0
    out, _ = greedy(llm, msgs, max_tokens=2)
    assert counter.embd_rows == 4  # the whole image again, not its last two rows
    assert prompt_rows(counter, out) == len(prompt) - start - 4
    assert prompt.chunk_start_at_or_before(start + 2) == start
    assert prompt.chunk_start_at_or_before(start + 4) == start + 4
    assert prompt.chunk_start_at_or_before(1) == 1


def test_placeholders_are_negative_and_per_image():
    a, b = placeholder_ids("img-a|0", 600), placeholder_ids("img-b|0", 600)
    assert all(x < 0 for x in a + b) and min(a + b) >= -(2 ** 30)
    assert a == placeholder_ids("img-a|0", 600) and a != b
    assert len(set(a)) > 590
    p = ChunkedPrompt([TextChunk([1, 2]), ImageChunk(3, 3, (3, 1), "k", lambda: np.zeros((3, 8))), TextChunk([5])])
    assert p[:2] == [1, 2] and p[5] == 5 and all(x < 0 for x in p[2:5])
    assert p.n_image_tokens == 3 and p.text_tokens() == [1, 2, 5]


# ------------------------------------------------------------------ n_ctx
def test_qwen_huge_image_overflows_as_llama_cpp_reports():
    """llama.cpp's handler: ValueError('Prompt exceeds n_ctx: 2262 > 1024') (recorded), counted up to
    the image chunk that overflows (7 text tokens before it + 2255 image tokens); llamapy checks
    the whole prompt before any work and names its text and image parts."""
    rec = record("qwen2vl")["images"]["huge_1536x1152.jpg"]["caption_mmproj_f16"]
    assert "2262 > 1024" in rec["error"]
    llm, handler, enc, counter = make("qwen2vl", "MTMDChatHandler", vocab_only=True)
    text = handler.render(llm, H.ChatRequest(messages=[user(os.path.join(IMAGES, "huge_1536x1152.jpg"),
                                                            "Describe this image.")]), None)
    with pytest.raises(ValueError, match=r"2284 > 1024 \(29 text tokens \+ 2255 image tokens\)"):
        handler.build_prompt(llm, text, [os.path.join(IMAGES, "huge_1536x1152.jpg")])
    assert enc.calls == [] and counter.embd_rows == 0


def test_context_overflow_raises_before_any_work():
    llm, handler, enc, counter = make("llava15", n_ctx=100)
    with pytest.raises(ValueError, match=r"139 > 100.*135 text tokens \+ 4 image tokens"):
        llm.create_chat_completion([user(TALL, "Describe this image.")], max_tokens=4)
    assert enc.calls == [] and counter.token_rows == 0 and counter.embd_rows == 0


# ------------------------------------------------------------------ image forms and bad images
def _forms():
    from PIL import Image

    data = open(TALL, "rb").read()
    return {
        "path": TALL,
        "file_url": "file://" + os.path.abspath(TALL),
        "data_uri": "data:image/png;base64," + base64.b64encode(data).decode(),
        "bytes": data,
        "pil": Image.open(TALL),
        "string_part": None,
    }


def test_every_image_form_gives_the_same_prompt():
    llm, handler, enc, counter = make("llava15")
    results = []
    for name, src in _forms().items():
        if name == "string_part":
            msg = {"role": "user", "content": [{"type": "image_url", "image_url": TALL},
                                               {"type": "text", "text": "Describe this image."}]}
        else:
            msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": src}},
                                               {"type": "text", "text": "Describe this image."}]}
        out, _ = greedy(llm, [msg], max_tokens=4)
        results.append((name, out["usage"]["prompt_tokens"], out["choices"][0]["message"]["content"]))
    assert len({r[1:] for r in results}) == 1, results
    assert enc.calls == ["tall_37x91.png"]  # one content hash: one encoding for all forms


def test_http_image(tmp_path):
    import http.server
    import threading

    (tmp_path / "a.png").write_bytes(open(TALL, "rb").read())

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(tmp_path), **kw)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        llm, handler, enc, _ = make("llava15")
        url = f"http://127.0.0.1:{server.server_address[1]}/a.png"
        out, _ = greedy(llm, [user(url, "Describe this image.")], max_tokens=2)
        assert out["usage"]["prompt_tokens"] == 139
        with pytest.raises(ValueError):
            llm.create_chat_completion([user(url.replace("a.png", "missing.png"), "x")])
    finally:
        server.shutdown()


@pytest.mark.parametrize("bad", ["not an image", "truncated", "missing", "empty"])
def test_bad_image_raises_value_error(bad, tmp_path):
    llm, handler, enc, counter = make("llava15")
    path = tmp_path / "bad.png"
    if bad == "not an image":
        path.write_bytes(b"hello, this is text")
    elif bad == "truncated":
        path.write_bytes(open(TALL, "rb").read()[:200])
    elif bad == "empty":
        path.write_bytes(b"")
    src = str(path) if bad != "missing" else str(tmp_path / "nope.png")
    msg = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": src}},
                                       {"type": "text", "text": "x"}]}
    with pytest.raises(ValueError):
        llm.create_chat_completion([msg])
    assert counter.token_rows == 0 and enc.calls == []


def test_marker_count_mismatch_is_value_error():
    llm, handler, enc, _ = make("llava15")
    with pytest.raises(ValueError, match="image markers"):
        llm.create_chat_completion([user(TALL, "What is <__media__> here?")])


# ------------------------------------------------------------------ generation features with an image
def test_stream_stop_seed_logprobs_with_an_image():
    llm, handler, enc, _ = make("llava15")
    msgs = [user(TALL, "Describe this image.")]
    whole, _ = greedy(llm, msgs, max_tokens=8)
    text = whole["choices"][0]["message"]["content"]
    chunks = list(llm.create_chat_completion(msgs, temperature=0, repeat_penalty=1.0, max_tokens=8, stream=True))
    streamed = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert streamed == text and chunks[-1]["choices"][0]["finish_reason"] == "length"
    if len(text) > 3:
        cut = text[2:4]
        stopped = llm.create_chat_completion(msgs, temperature=0, repeat_penalty=1.0, max_tokens=8, stop=[cut])
        assert stopped["choices"][0]["message"]["content"] == text[:text.index(cut)]
        assert stopped["choices"][0]["finish_reason"] == "stop"
    lp = llm.create_chat_completion(msgs, temperature=0, repeat_penalty=1.0, max_tokens=4, logprobs=True,
                                    top_logprobs=2)
    content = lp["choices"][0]["logprobs"]["content"]
    # (byte-fallback pieces print as "", so their top entries can share a key)
    assert len(content) == 4 and all(1 <= len(c["top_logprobs"]) <= 2 for c in content)
    a = llm.create_chat_completion(msgs, temperature=1.0, max_tokens=8, seed=7)
    b = llm.create_chat_completion(msgs, temperature=1.0, max_tokens=8, seed=7)
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    js = llm.create_chat_completion(msgs, max_tokens=24, response_format={"type": "json_object"}, temperature=0)
    assert js["choices"][0]["message"]["content"].lstrip().startswith("{")
    assert enc.calls == ["tall_37x91.png"]


def test_two_images_in_one_message_and_across_messages():
    llm, handler, enc, counter = make("llava15")
    out, _ = greedy(llm, [user(TALL, GREY, "Compare these.")], max_tokens=2)
    prompt = handler.prompt(llm, H.ChatRequest(messages=[user(TALL, GREY, "Compare these.")]), None).tokens
    assert prompt.n_images == 2 and prompt.n_image_tokens == 8
    assert out["usage"]["prompt_tokens"] == len(prompt)
    assert sorted(enc.calls) == ["grey_50x64.png", "tall_37x91.png"]
    conv = [user(TALL, "First."), {"role": "assistant", "content": "ok"}, user(TINY, "Second.")]
    out, _ = greedy(llm, conv, max_tokens=2)
    assert sorted(enc.calls) == ["grey_50x64.png", "tall_37x91.png", "tiny_5x7.png"]


# ------------------------------------------------------------------ the caption job
def _caption_args(tmp_path, images, jsonl=None):
    text, proj = model_paths("llava15")
    argv = ["caption", "-m", text, "--mmproj", proj, "-n", "4", "-t", "2", "-c", "512"] + list(images)
    if jsonl:
        argv += ["--jsonl", str(jsonl)]
    return argv


def test_caption_cli_resumes_and_skips_bad_files(tmp_path, monkeypatch, capsys):
    from llamapy import caption, cli

    enc = RecordedEncoder("llava15")
    monkeypatch.setattr(caption, "ENCODER_FACTORY", enc.factory)
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"not a png")
    out = tmp_path / "caps.jsonl"
    rc = cli.main(_caption_args(tmp_path, [TALL, str(bad), GREY], out))
    assert rc == 1  # one failed
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["image"] for r in recs] == [TALL, str(bad), GREY]
    assert "caption" in recs[0] and "error" in recs[1] and "caption" in recs[2]
    assert recs[0]["n_prompt_tokens"] == 139
    err = capsys.readouterr().err
    assert "skipped" in err and "broken.png" in err
    # Resumed: the two captioned images are not redone, the new one is.
    enc.calls.clear()
    rc = cli.main(_caption_args(tmp_path, [TALL, GREY, TINY], out))
    assert rc == 0
    assert enc.calls == ["tiny_5x7.png"]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["image"] for r in recs if "caption" in r] == [TALL, GREY, TINY]


def test_caption_cli_stdout_and_folder(tmp_path, monkeypatch, capsys):
    from llamapy import caption, cli

    enc = RecordedEncoder("llava15", check_pixels=False)
    monkeypatch.setattr(caption, "ENCODER_FACTORY", enc.factory)
    folder = tmp_path / "imgs"
    folder.mkdir()
    for name in ("tall_37x91.png", "tiny_5x7.png"):
        (folder / name).write_bytes(open(os.path.join(IMAGES, name), "rb").read())
    (folder / "notes.txt").write_text("not an image")
    assert cli.main(_caption_args(tmp_path, [str(folder)])) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split("\t")[0] for line in lines] == [str(folder / "tall_37x91.png"), str(folder / "tiny_5x7.png")]


def test_caption_cli_uses_the_real_encoder_by_default(tmp_path, monkeypatch, capsys):
    from llamapy import caption, cli

    assert caption.ENCODER_FACTORY is None
    # The default is the native encoder: the caption is the one a handler gives with it.
    assert cli.main(_caption_args(tmp_path, [TALL])) == 0
    (line,) = capsys.readouterr().out.strip().splitlines()
    assert line.split("\t")[0] == TALL and line.split("\t", 1)[1].strip()


def test_chat_cli_image_command(monkeypatch):
    from llamapy.chat.cli import chat_loop

    llm, handler, enc, _ = make("llava15")
    stdin = io.StringIO(f"/image {TALL}\nDescribe this image.\n/image /nonexistent.png\nAgain?\n/exit\n")
    stdout = io.StringIO()
    assert chat_loop(llm, stdin, stdout, images=True, max_tokens=3, temperature=0) == 0
    text = stdout.getvalue()
    assert "image attached" in text and "no such image file" in text
    assert enc.calls == ["tall_37x91.png"]


def test_mrope_positions_are_mtmds():
    """(4, n) section-major: t = n_past, h = n_past + y, w = n_past + x, then zeros."""
    c = ImageChunk(6, 3, (2, 3), "k", lambda: np.zeros((6, 8)), mrope=True)
    pos = c.positions(10)
    assert pos.shape == (4, 6)
    assert pos[0].tolist() == [10] * 6
    assert pos[1].tolist() == [10, 10, 11, 11, 12, 12]
    assert pos[2].tolist() == [10, 11, 10, 11, 10, 11]
    assert pos[3].tolist() == [0] * 6
    assert ImageChunk(4, 4, (4, 1), "k", lambda: None).positions(5).tolist() == [5, 6, 7, 8]


def test_ram_cache_with_image_prompts():
    from llamapy.llama_cache import LlamaRAMCache

    llm, handler, enc, counter = make("llava15")
    llm.set_cache(LlamaRAMCache())
    msgs = [user(TALL, "Describe this image.")]
    a, _ = greedy(llm, msgs, max_tokens=4)
    greedy(llm, [user(GREY, "Describe this image.")], max_tokens=4)
    counter.embd_rows = 0
    b, _ = greedy(llm, msgs, max_tokens=4)  # the state cache brings the first image's KV back
    assert a["choices"][0]["message"]["content"] == b["choices"][0]["message"]["content"]
    assert counter.embd_rows == 0
    assert enc.calls == ["tall_37x91.png", "grey_50x64.png"]


def test_state_keeps_mrope_position_shifts():
    """save_state / load_state carry the position shifts M-RoPE image chunks leave
    (rows after a Qwen image sit at fewer positions than rows)."""
    text, proj = model_paths("qwen2vl")
    llm, handler, enc, _ = make("qwen2vl", "MTMDChatHandler")
    greedy(llm, [user(TALL, "Describe this image.")], max_tokens=2)
    assert llm._pos_shifts, "a Qwen image chunk shifts the positions after it"
    before = [llm._pos_of_row(r) for r in range(llm.n_tokens + 1)]
    state = llm.save_state()
    llm.reset()
    llm.load_state(state)
    assert [llm._pos_of_row(r) for r in range(llm.n_tokens + 1)] == before
    other = Llama(text, n_ctx=llm.n_ctx(), verbose=False)
    other.load_state(pickle.loads(pickle.dumps(state)))
    assert [other._pos_of_row(r) for r in range(other.n_tokens + 1)] == before
