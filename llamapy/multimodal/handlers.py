"""Multimodal chat handlers: llama-cpp-python's ``Llava15ChatHandler``, ``MTMDChatHandler`` and
their subclasses, on llamapy's projector code.

A call renders the conversation to text with one media marker per image (the handler's own
built-in format, or for ``MTMDChatHandler`` the model's GGUF chat template), splits it at the
markers, and lays each image out as llama.cpp's ``mtmd_tokenize`` does for the projector
type (the marker tokens around images, idefics3's tile markers, llava-1.6's tiles then the
overview). The result is a ``ChunkedPrompt`` (chunks.py) that goes through
``Llama.create_completion``: the one generation loop, with sampling, stop strings, grammars,
logprobs, seeds and streaming as for text.

Unlike llama-cpp-python, nothing is cleared between calls: the KV cache keeps the previous
turn, prefix matching treats image chunks as units, and projector outputs are cached by
(projector, image content, preprocessing), so a follow-up question about the same image
encodes nothing and evaluates only the new turn.

The prompts are those llama-cpp-python 0.3.36's handlers build, byte for byte, quirks
included (Llava15's format writes a user turn given as a plain string twice over as
"USER: textUSER: "; Qwen25VL's ends without a newline after "assistant"): a drop-in must
give the same tokens.

The vision encoder comes from ``llamapy.multimodal.encoder`` (C++); a handler also takes
``encoder=``: an object with ``encode_image(Preprocessed) -> [array per image chunk]``, or
a factory ``f(clip_model_path, n_threads=..., verbose=...)`` returning one. A factory that
takes ``flash_attn`` also gets the Llama's option (-1 auto, 0 off, 1 on), as llama-cpp-python
passes ``Llama(flash_attn=)`` on to its mtmd context.
"""
from __future__ import annotations

import os
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .._text import gpt2_byte_chars
from ..chat.completion import ChatRequest, FormatHandler, Prompt, register_projector_chat_format, stop_list
from ..chat.template import ChatTemplate, raise_exception, strftime_now
from .chunks import ChunkedPrompt, ImageChunk, TextChunk
from .encoder import VisionEncoder
from .embed_cache import DEFAULT_CACHE_BYTES, EmbeddingCache, projector_identity
from .image_input import image_hash, load_image, read_image_bytes
from .mmproj import SUPPORTED_PROJECTOR_TYPES, MmprojInfo, check_compatible, read_mmproj
from .preprocess import Preprocessed, preprocess, preprocess_params

__all__ = [
    "MEDIA_MARKER", "Gemma3ChatHandler", "Gemma4ChatHandler", "Llama3VisionAlpha", "Llama3VisionAlphaChatHandler",
    "Llava15ChatHandler", "Llava16ChatHandler", "MTMDChatHandler", "MULTIMODAL_CHAT_FORMATS", "MiniCPMv26ChatHandler",
    "MoondreamChatHandler", "NanoLlavaChatHandler", "ObsidianChatHandler", "Qwen25VLChatHandler",
    "SmolVLMChatHandler", "handler_for_mmproj",
]

MEDIA_MARKER = "<__media__>"  # mtmd_default_marker()
_MROPE_TYPES = ("qwen2vl_merger", "qwen2.5vl_merger")


# ------------------------------------------------------------------ encoder
def default_encoder_factory(clip_model_path: str, n_threads: Optional[int] = None, verbose: bool = False,
                            flash_attn: Any = "auto", gpu: Optional[int] = None) -> Any:
    """The C++ vision encoder (``llamapy.multimodal.encoder.VisionEncoder``)."""
    return VisionEncoder(clip_model_path, n_threads=n_threads, verbose=verbose, flash_attn=flash_attn, gpu=gpu)


def _takes(factory: Callable[..., Any], name: str) -> bool:
    """Whether an encoder factory accepts the keyword ``name`` (older factories take only
    clip_model_path, n_threads and verbose)."""
    import inspect

    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in params)


def _llama_gpu(llama: Any) -> Optional[int]:
    """The Vulkan device of the first of llama's parts on a GPU (None: all on the CPU)."""
    try:
        parts = llama.device_map()
    except Exception:  # a stand-in llama, a vocab-only model: no placement
        return None
    for part in parts:
        dev = str(part.get("device", ""))
        if dev.startswith("gpu") and dev[3:].isdigit():
            return int(dev[3:])
    return None


# ------------------------------------------------------------------ messages
def _part_source(part: Mapping[str, Any]) -> Any:
    """The image of an ``image_url`` part: a URL/path/data URI string, bytes or a PIL image."""
    inner = part.get("image_url")
    if isinstance(inner, Mapping):
        if "url" not in inner:
            raise ValueError("an image_url part's dict needs a 'url'")
        return inner["url"]
    if inner is None:
        raise ValueError("an image_url part needs an 'image_url' value")
    return inner


def _is_image_part(part: Any) -> bool:
    return isinstance(part, Mapping) and part.get("type") == "image_url"


def image_sources(messages: Sequence[Mapping[str, Any]], roles: Optional[Sequence[str]] = ("user",)) -> List[Any]:
    """The images of ``messages`` in order (of the given roles; None: every role)."""
    out = []
    for m in messages:
        if roles is not None and m.get("role") not in roles:
            continue
        content = m.get("content")
        if isinstance(content, (list, tuple)):
            out.extend(_part_source(p) for p in content if _is_image_part(p))
    return out


def _show(value: Any) -> str:
    """A value as ``{{ value }}`` prints it in Jinja."""
    return value if isinstance(value, str) else str(value)


def _iterable(value: Any) -> bool:
    return isinstance(value, (str, list, tuple, dict))


def _images_of(content: Any, suffix: str = "") -> str:
    if not isinstance(content, (list, tuple)):
        return ""
    return "".join(MEDIA_MARKER + suffix for p in content if _is_image_part(p))


def _texts_of(content: Any, fmt: str = "{}") -> str:
    if not isinstance(content, (list, tuple)):
        return ""
    return "".join(fmt.format(_show(p.get("text", ""))) for p in content
                   if isinstance(p, Mapping) and p.get("type") == "text")


# ------------------------------------------------------------------ built-in formats (llama-cpp-python's)
def _render_llava15(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for m in messages:
        role, c = m.get("role"), m.get("content")
        if role == "system":
            out.append(_show(c))
        elif role == "user":
            if isinstance(c, str):
                out.append("USER: " + c)
            if _iterable(c):
                out.append("USER: " + _images_of(c) + _texts_of(c))
        elif role == "assistant" and c is not None:
            out.append("ASSISTANT: " + _show(c))
    return "".join(out) + "ASSISTANT: "


def _render_llava16(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for m in messages:
        role, c = m.get("role"), m.get("content")
        if role == "system":
            out.append(_show(c))
        elif role == "user":
            if _iterable(c):
                out.append(_images_of(c, "\n") + _texts_of(c))
            if isinstance(c, str):
                out.append(c)
        elif role == "assistant":
            out.append(_show(c))
    return "".join(out) + "Answer:"


def _render_im_turns(messages: Sequence[Mapping[str, Any]], end: str, sys_end: str) -> str:
    """ChatML-style turns: the system turn closed by ``sys_end``, the others by
    ``end``; user text before its images and image-part texts, as 0.3.36's
    templates."""
    out = []
    for m in messages:
        role, c = m.get("role"), m.get("content")
        if role == "system":
            out.append("<|im_start|>system\n" + _show(c) + sys_end)
        elif role == "user":
            body = (c if isinstance(c, str) else "") + (_images_of(c) + _texts_of(c) if _iterable(c) else "")
            out.append("<|im_start|>user\n" + body + end)
        elif role == "assistant":
            out.append("<|im_start|>assistant\n" + _show(c) + end)
    return "".join(out) + "<|im_start|>assistant\n"


def _render_obsidian(messages: Sequence[Mapping[str, Any]]) -> str:
    return _render_im_turns(messages, end="###\n", sys_end="\n###\n")


def _render_moondream(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for m in messages:
        role, c = m.get("role"), m.get("content")
        if role == "user":
            if _iterable(c):
                out.append(_images_of(c, "\n\n") + _texts_of(c, "Question: {}\n\n"))
            if isinstance(c, str):
                out.append("Question: " + c + "\n\n")
        elif role == "assistant":
            out.append("Answer:" + _show(c) + "\n\n")
    return "".join(out) + "Answer:"


def _render_nanollava(messages: Sequence[Mapping[str, Any]]) -> str:
    return _render_im_turns(messages, end="<|im_end|>", sys_end="<|im_end|>")


def _render_llama3_vision_alpha(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for m in messages:
        role, c = m.get("role"), m.get("content")
        body = ""
        if role == "user":
            body = "user<|end_header_id|>\n\n"
            if _iterable(c):
                body += _images_of(c) + _texts_of(c)
            if isinstance(c, str):
                body += c
        elif role == "assistant":
            body = "assistant<|end_header_id|>\n\n" + _show(c)
        out.append("<|start_header_id|>" + body + "<|eot_id|>")
    return "".join(out) + "<|start_header_id|>assistant<|end_header_id|>\n\n"


def _render_minicpmv26(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for i, m in enumerate(messages):
        role, c = m.get("role"), m.get("content")
        if i == 0 and messages[0].get("role") != "system":
            out.append("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
        body = _images_of(c) + _texts_of(c) if _iterable(c) else ""
        if isinstance(c, str):
            body += c
        out.append(f"<|im_start|>{_show(role)}\n{body}<|im_end|>\n")
    return "".join(out) + "<|im_start|>assistant\n"


def _render_qwen25vl(messages: Sequence[Mapping[str, Any]]) -> str:
    out = []
    for i, m in enumerate(messages):
        role, c = m.get("role"), m.get("content")
        if i == 0 and role != "system":
            out.append("<|im_start|>system\n<|im_end|>\n")  # the template reads an undefined variable there
        out.append(f"<|im_start|>{_show(role)}\n")
        if isinstance(c, str):
            out.append(c + "<|im_end|>\n")
            continue
        if not isinstance(c, (list, tuple, dict)):
            raise ValueError(f"Qwen25VLChatHandler: a {role} message needs content (a str or a list of parts)")
        for p in c:
            if _is_image_part(p):
                out.append(MEDIA_MARKER)
            elif isinstance(p, Mapping) and p.get("type") == "text":
                out.append(_show(p.get("text", "")))
        out.append("<|im_end|>\n")
    return "".join(out) + "<|im_start|>assistant"  # no newline: Jinja drops the template's last one


# ------------------------------------------------------------------ image layout (mtmd_tokenize)
def chunk_token_grid(info: MmprojInfo, tile: np.ndarray) -> Tuple[int, int, Tuple[int, int]]:
    """(n_tokens, n_pos, (nx, ny)) of the image chunk the encoder makes from ``tile`` (3, H, W),
    as mtmd counts them (nx = n_tokens, ny = 1 where positions are 1-D)."""
    ptype = info.projector_type
    if ptype in _MROPE_TYPES:
        align = info.patch_size * info.n_merge
        nx, ny = int(tile.shape[2]) // align, int(tile.shape[1]) // align
        return nx * ny, max(nx, ny), (nx, ny)
    side = info.image_size // info.patch_size
    if ptype == "mlp":
        n = side * side
    elif ptype in ("gemma3", "idefics3"):
        n = (side // info.n_merge) ** 2
    else:
        raise NotImplementedError(f"image token count for projector type {ptype!r} is not known; "
                                  f"supported: {', '.join(SUPPORTED_PROJECTOR_TYPES)}")
    return n, n, (n, 1)


class _Vocab:
    """Tokenizing text pieces as mtmd does, for one Llama."""

    def __init__(self, llama: Any) -> None:
        self.llama = llama
        self._found: Dict[str, int] = {}

    def text(self, s: str) -> List[int]:
        if not s:
            return []
        return list(self.llama.tokenize(s.encode("utf-8"), add_bos=False, special=True))

    def lookup(self, piece: str) -> int:
        """The token whose text is exactly ``piece`` (mtmd's lookup_token: the first id whose
        piece, specials included, equals it), by native lookups of the forms a vocabulary
        stores it in: as is, as a byte token ``<0xNN>`` (SentencePiece byte fallback), or in
        GPT-2's byte-to-unicode spelling (BPE vocabularies)."""
        if piece not in self._found:
            vocab = self.llama.tokenizer_.native
            raw = piece.encode("utf-8")
            forms = [raw, _gpt2_spelling(raw).encode("utf-8")]
            if len(raw) == 1:
                forms.append(b"<0x%02X>" % raw[0])
            ids = [i for i in (int(vocab.text_to_token(f)) for f in forms)
                   if i >= 0 and self.llama.tokenizer_.token_to_piece(i, True) == raw]
            if not ids:
                raise ValueError(f"the model's vocabulary has no token {piece!r}, which this projector's image "
                                 "layout needs")
            self._found[piece] = min(ids)
        return self._found[piece]


_GPT2_BYTES = gpt2_byte_chars()


def _gpt2_spelling(data: bytes) -> str:
    return "".join(_GPT2_BYTES[b] for b in data)


def _add_bos(llama: Any) -> bool:
    flag = getattr(llama.tokenizer_, "add_bos", True)
    return bool(flag() if callable(flag) else flag)


def _add_eos(llama: Any) -> bool:
    flag = getattr(llama.tokenizer_, "add_eos", False)
    return bool(flag() if callable(flag) else flag)


# ------------------------------------------------------------------ the handler base
class MTMDChatHandler(FormatHandler):
    """The model's own GGUF chat template, with images (llama-cpp-python's ``MTMDChatHandler``).

    ``clip_model_path``: the projector GGUF (mmproj). ``verbose`` prints each rendered prompt
    to stderr. ``use_gpu`` (default True, as mtmd's): the vision encoder runs on the Vulkan
    device of the language model's GPU layers when it has any (else on the CPU). llamapy's own keywords:
    ``encoder`` (see the module docstring), ``cache_bytes`` (the projector-output cache's
    bound; 0 disables it) or ``embedding_cache`` (an ``EmbeddingCache`` to share between
    handlers), ``image_min_tokens`` / ``image_max_tokens`` (mtmd's overrides, dynamic-size types).
    """

    DEFAULT_SYSTEM_MESSAGE: Optional[str] = None
    IMAGE_ROLES: Optional[Tuple[str, ...]] = None  # images of every role (the template places them)

    def __init__(self, clip_model_path: str, verbose: bool = True, use_gpu: bool = True, *,
                 encoder: Any = None, cache_bytes: int = DEFAULT_CACHE_BYTES,
                 embedding_cache: Optional[EmbeddingCache] = None, image_min_tokens: Optional[int] = None,
                 image_max_tokens: Optional[int] = None) -> None:
        if not isinstance(clip_model_path, (str, os.PathLike)) or not os.path.exists(clip_model_path):
            raise ValueError(f"Clip model path does not exist: {clip_model_path}")
        self.clip_model_path = os.fspath(clip_model_path)
        self.verbose = verbose
        self.use_gpu = use_gpu
        self.info: MmprojInfo = read_mmproj(self.clip_model_path)
        self.params = preprocess_params(self.info, image_min_tokens=image_min_tokens,
                                        image_max_tokens=image_max_tokens)
        self._projector_id = projector_identity(self.clip_model_path)
        if encoder is None:
            encoder = default_encoder_factory
        self._encoder_spec = encoder
        self._encoder: Any = None if callable(encoder) and not hasattr(encoder, "encode_image") else encoder
        self.embedding_cache = embedding_cache if embedding_cache is not None else EmbeddingCache(cache_bytes)
        self._lock = threading.Lock()
        self._checked: "set[int]" = set()
        self._vocabs: Dict[int, _Vocab] = {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(clip_model_path={self.clip_model_path!r})"

    # -- pieces --------------------------------------------------------------
    @property
    def projector_type(self) -> str:
        return self.info.projector_type

    def encoder(self, llama: Any = None) -> Any:
        with self._lock:
            if self._encoder is None:
                n_threads = getattr(llama, "n_threads", None)
                kw: Dict[str, Any] = {"n_threads": n_threads, "verbose": False}
                if _takes(self._encoder_spec, "flash_attn"):
                    kw["flash_attn"] = getattr(getattr(llama, "context_params", None), "flash_attn", "auto")
                # On the language model's GPU when it has layers there (mtmd's use_gpu).
                gpu = _llama_gpu(llama) if self.use_gpu and llama is not None else None
                if gpu is not None and _takes(self._encoder_spec, "gpu"):
                    kw["gpu"] = gpu
                self._encoder = self._encoder_spec(self.clip_model_path, **kw)
            return self._encoder

    def _vocab(self, llama: Any) -> _Vocab:
        v = self._vocabs.get(id(llama))
        if v is None or v.llama is not llama:
            v = self._vocabs[id(llama)] = _Vocab(llama)
        return v

    def _check_model(self, llama: Any) -> None:
        if id(llama) in self._checked:
            return
        check_compatible(self.info, int(llama.n_embd()))
        if self.projector_type in _MROPE_TYPES and llama.model.n_pos_per_embd != 4:
            raise ValueError(f"projector type {self.projector_type!r} needs a language model with M-RoPE "
                             f"positions (the qwen2vl architecture); this model is {llama.model.arch!r}")
        self._checked.add(id(llama))

    def render(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> str:
        """The conversation as text, one MEDIA_MARKER per image."""
        template = llama.metadata.get("tokenizer.chat_template") if getattr(llama, "metadata", None) else None
        if not isinstance(template, str) or not template:
            raise ValueError(f"{type(self).__name__} requires tokenizer.chat_template metadata")
        messages = []
        for m in req.messages:
            m = dict(m)
            if isinstance(m.get("content"), list):
                m["content"] = [{"type": "text", "text": MEDIA_MARKER} if _is_image_part(p) else p
                                for p in m["content"]]
            messages.append(m)

        def piece(token: int) -> str:
            return llama.detokenize([token]).decode("utf-8", errors="ignore") if token >= 0 else ""

        context = dict(req.template_kwargs, messages=messages, add_generation_prompt=True,
                       eos_token=piece(llama.token_eos()), bos_token=piece(llama.token_bos()),
                       raise_exception=raise_exception, functions=req.functions, function_call=req.function_call,
                       tools=req.tools, tool_choice=req.tool_choice, strftime_now=strftime_now)
        return ChatTemplate(template).render_variables(context)

    def _with_default_system(self, messages: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
        if self.DEFAULT_SYSTEM_MESSAGE is None:
            return messages
        first = next((m.get("content") or "" for m in messages if m.get("role") == "system"), "")
        if first == "":
            return [{"role": "system", "content": self.DEFAULT_SYSTEM_MESSAGE}] + messages
        return messages

    def _preprocessed(self, image: Any) -> Tuple[str, Preprocessed]:
        return image_hash(image), preprocess(image, self.params)

    def image_chunks(self, llama: Any, image: Any) -> List[Any]:
        """One image as mtmd_tokenize lays it out for this projector type: text chunks
        (marker tokens) and image chunks whose embeddings are encoded on first use."""
        h, pre = self._preprocessed(image)
        tiles = pre.in_chunk_order()
        base = f"{self._projector_id}|{self.params!r}|{h}"
        keys = [f"{base}|{k}" for k in range(len(tiles))]
        memo: Dict[int, np.ndarray] = {}
        ptype = self.projector_type

        def loader(k: int) -> Callable[[], np.ndarray]:
            def load() -> np.ndarray:
                if k in memo:
                    return memo[k]
                hit = self.embedding_cache.get(keys[k])
                if hit is not None:
                    return hit
                outs = list(self.encoder(llama).encode_image(pre))
                if len(outs) != len(tiles):
                    raise ValueError(f"the vision encoder returned {len(outs)} image chunks, expected {len(tiles)}")
                for kk, arr in enumerate(outs):
                    memo[kk] = np.ascontiguousarray(arr, dtype=np.float32)
                    self.embedding_cache.put(keys[kk], memo[kk])
                return memo[k]
            return load

        images = []
        for k, tile in enumerate(tiles):
            n, n_pos, grid = chunk_token_grid(self.info, tile)
            images.append(ImageChunk(n_tokens=n, n_pos=n_pos, grid=grid, key=keys[k], load=loader(k),
                                     non_causal=ptype == "gemma3", mrope=ptype in _MROPE_TYPES))
        vocab = self._vocab(llama)
        if ptype == "gemma3":
            return [TextChunk(vocab.text("<start_of_image>")), images[0], TextChunk(vocab.text("<end_of_image>"))]
        if ptype in _MROPE_TYPES:
            return [TextChunk(vocab.text("<|vision_start|>")), images[0], TextChunk(vocab.text("<|vision_end|>"))]
        if ptype == "idefics3":
            cols, rows = pre.grid
            out: List[Any] = []
            for y in range(rows):
                for x in range(cols):
                    out.append(TextChunk(vocab.text(f"<fake_token_around_image><row_{y + 1}_col_{x + 1}>")))
                    out.append(images[y * cols + x])
                if y != rows - 1:
                    out.append(TextChunk([vocab.lookup("\n")]))
            if pre.overview is not None:
                out.append(TextChunk([vocab.lookup("\n\n"), vocab.lookup("<fake_token_around_image>"),
                                      vocab.lookup("<global-img>")]))
                out.append(images[-1])
                out.append(TextChunk([vocab.lookup("<fake_token_around_image>")]))
            return out
        return images  # mlp: the image (llava 1.5), or its tiles then the overview (llava 1.6)

    def build_prompt(self, llama: Any, text: str, sources: Sequence[Any]) -> ChunkedPrompt:
        """The rendered ``text`` (with one marker per image in ``sources``) as chunks."""
        parts = text.split(MEDIA_MARKER)
        if len(parts) - 1 != len(sources):
            raise ValueError(f"the prompt has {len(parts) - 1} image markers ({MEDIA_MARKER!r}) but the messages "
                             f"have {len(sources)} images")
        images = []
        for i, src in enumerate(sources):
            try:
                # decoded reduced where the projector reads far fewer pixels than the image has
                images.append(load_image(src, reduce_for=self.params))
            except ValueError as e:
                raise ValueError(f"image {i + 1} of the conversation: {e}") from e
        vocab = self._vocab(llama)
        chunks: List[Any] = []
        for i, part in enumerate(parts):
            chunks.append(TextChunk(vocab.text(part)))
            if i < len(images):
                chunks.extend(self.image_chunks(llama, images[i]))
        bos = llama.token_bos()
        if _add_bos(llama) and bos >= 0:
            chunks.insert(0, TextChunk([bos]))
        if _add_eos(llama) and llama.token_eos() >= 0:
            chunks.append(TextChunk([llama.token_eos()]))
        prompt = ChunkedPrompt(chunks)
        n_ctx = llama.n_ctx()
        if len(prompt) > n_ctx:
            n_img = prompt.n_image_tokens
            raise ValueError(f"Prompt exceeds n_ctx: {len(prompt)} > {n_ctx} ({len(prompt) - n_img} text tokens "
                             f"+ {n_img} image tokens)")
        return prompt

    # -- FormatHandler -------------------------------------------------------
    def prompt(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> Prompt:
        self._check_model(llama)
        req.messages = self._with_default_system(list(req.messages))
        text = self.render(llama, req, tools)
        if self.verbose:
            print(text, file=sys.stderr)
        sources = image_sources(req.messages, self.IMAGE_ROLES)
        return Prompt(self.build_prompt(llama, text, sources), stop_list(req.stop, ()))

    # -- llama-cpp-python's helpers ------------------------------------------
    @staticmethod
    def get_image_urls(messages: Sequence[Mapping[str, Any]]) -> List[Any]:
        """The images of the user messages, in order (llama-cpp-python's helper)."""
        return image_sources(messages, ("user",))

    def load_image(self, image_url: Any) -> bytes:
        """An image's encoded bytes (path, file:// or http(s) URL, data URI, bytes)."""
        return read_image_bytes(image_url)

    @classmethod
    def from_pretrained(cls, repo_id: str, filename: Optional[str], *args: Any, **kwargs: Any) -> "MTMDChatHandler":
        raise NotImplementedError("from_pretrained downloads from the Hugging Face Hub, which llamapy does not do; "
                                  "download the mmproj GGUF yourself and pass clip_model_path")

    def caption(self, llama: Any, image: Any, prompt: str = "Describe this image.", **kwargs: Any) -> Any:
        """One user turn with ``image`` then ``prompt``: create_chat_completion's result."""
        messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                                  {"type": "text", "text": prompt}]}]
        return self(llama=llama, messages=messages, **kwargs)


class Gemma4ChatHandler(MTMDChatHandler):
    """llama-cpp-python's Gemma4ChatHandler (the GGUF template); Gemma 4's projector is not supported
    yet, which loading its mmproj reports."""


class Gemma3ChatHandler(MTMDChatHandler):
    """Gemma 3 (4B/12B/27B) with its ``gemma3`` projector and the GGUF template (beyond llama-cpp-python)."""


class SmolVLMChatHandler(MTMDChatHandler):
    """SmolVLM / SmolVLM2 / Idefics3 with the ``idefics3`` projector and the GGUF template (beyond llama-cpp-python)."""


class Llava15ChatHandler(MTMDChatHandler):
    """LLaVA 1.5's built-in format, as llama-cpp-python's ``Llava15ChatHandler``."""

    DEFAULT_SYSTEM_MESSAGE: Optional[str] = (
        "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the human's questions.")
    IMAGE_ROLES = ("user",)
    _render_fn: Callable[[Sequence[Mapping[str, Any]]], str] = staticmethod(_render_llava15)

    def __init__(self, clip_model_path: str, verbose: bool = True, **kwargs: Any) -> None:
        super().__init__(clip_model_path, verbose, **kwargs)

    def render(self, llama: Any, req: ChatRequest, tools: Optional[List[Dict[str, Any]]]) -> str:
        return type(self)._render_fn(req.messages)


class ObsidianChatHandler(Llava15ChatHandler):
    _render_fn = staticmethod(_render_obsidian)


class MoondreamChatHandler(Llava15ChatHandler):
    _render_fn = staticmethod(_render_moondream)


class Llava16ChatHandler(Llava15ChatHandler):
    DEFAULT_SYSTEM_MESSAGE = (
        "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the human's questions. ")
    _render_fn = staticmethod(_render_llava16)


class NanoLlavaChatHandler(Llava15ChatHandler):
    DEFAULT_SYSTEM_MESSAGE = "Answer the question"
    _render_fn = staticmethod(_render_nanollava)


class Llama3VisionAlphaChatHandler(Llava15ChatHandler):
    DEFAULT_SYSTEM_MESSAGE = None
    _render_fn = staticmethod(_render_llama3_vision_alpha)


Llama3VisionAlpha = Llama3VisionAlphaChatHandler


class MiniCPMv26ChatHandler(Llava15ChatHandler):
    """MiniCPM-V 2.6's format; its ``resampler`` projector is not supported yet (loading its
    mmproj raises NotImplementedError naming it)."""

    DEFAULT_SYSTEM_MESSAGE = "You are a helpful assistant."
    _render_fn = staticmethod(_render_minicpmv26)


class Qwen25VLChatHandler(Llava15ChatHandler):
    """Qwen2.5-VL's built-in format (llama-cpp-python's; it ends with "<|im_start|>assistant")."""

    DEFAULT_SYSTEM_MESSAGE = "You are a helpful assistant."
    IMAGE_ROLES = None
    _render_fn = staticmethod(_render_qwen25vl)


# ------------------------------------------------------------------ selection
MULTIMODAL_CHAT_FORMATS: Dict[str, type] = {
    "llava-1-5": Llava15ChatHandler, "obsidian": ObsidianChatHandler, "llava-1-6": Llava16ChatHandler,
    "mtmd": MTMDChatHandler, "gemma4": Gemma4ChatHandler, "moondream": MoondreamChatHandler,
    "nanollava": NanoLlavaChatHandler, "llama-3-vision-alpha": Llama3VisionAlphaChatHandler,
    "minicpm-v-2.6": MiniCPMv26ChatHandler, "qwen2.5-vl": Qwen25VLChatHandler,
}
for _name, _cls in MULTIMODAL_CHAT_FORMATS.items():
    register_projector_chat_format(_name, _cls)


def handler_for_mmproj(llama: Any, mmproj: str, chat_format: Optional[str] = None, **kwargs: Any) -> MTMDChatHandler:
    """The handler ``Llama(model_path, mmproj=...)`` uses: ``chat_format`` when it names a
    multimodal format; else LLaVA's built-in formats for ``mlp`` projectors (1.6 when the
    projector has anyres pinpoints); else the model's GGUF template (Gemma3ChatHandler,
    SmolVLMChatHandler or MTMDChatHandler by projector type)."""
    if chat_format is not None and chat_format in MULTIMODAL_CHAT_FORMATS:
        cls = MULTIMODAL_CHAT_FORMATS[chat_format]
    else:
        info = read_mmproj(mmproj)
        check_compatible(info, int(llama.n_embd()))
        has_template = isinstance((getattr(llama, "metadata", None) or {}).get("tokenizer.chat_template"), str)
        if info.projector_type == "mlp":
            cls = Llava16ChatHandler if info.image_grid_pinpoints else Llava15ChatHandler
        elif not has_template:
            raise ValueError(f"projector type {info.projector_type!r} needs the model's chat template "
                             "(tokenizer.chat_template), which this GGUF lacks; pass chat_format= or chat_handler=")
        elif info.projector_type == "gemma3":
            cls = Gemma3ChatHandler
        elif info.projector_type == "idefics3":
            cls = SmolVLMChatHandler
        else:
            cls = MTMDChatHandler
    handler = cls(mmproj, verbose=False, **kwargs)
    check_compatible(handler.info, int(llama.n_embd()))
    return handler
