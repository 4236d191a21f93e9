"""``python -m llamapy caption``: caption many images with a vision-language model, as a job.

Each image is one chat turn (``-p``, default "Describe this image.") through the handler that
``Llama(model, mmproj=...)`` picks, greedy by default. Results go to standard output
("PATH<TAB>caption") or, with ``--jsonl OUT``, one JSON object per line (``image``,
``caption``, ``n_prompt_tokens``, ``n_tokens``, ``seconds``; a failed file gets ``error``
instead of ``caption``). An existing results file is resumed: images it already has a caption
for are not redone (failed ones are tried again). A file that fails is reported on standard
error and skipped; the exit status is 1 if any did. Directories are expanded to the image
files in them (sorted). Progress: tqdm when installed, else a one-line bar on standard error.

``ENCODER_FACTORY``: the vision encoder the handler uses (None: the C++ VisionEncoder); tests
set it to a stand-in.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Iterable, Iterator, List, Optional, Set, TextIO

from .llama import Llama
from .multimodal.handlers import handler_for_mmproj

ENCODER_FACTORY: Optional[Callable[..., Any]] = None

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".webp", ".gif", ".bmp")


def expand_images(paths: Iterable[str]) -> List[str]:
    out: List[str] = []
    for p in paths:
        if os.path.isdir(p):
            out.extend(os.path.join(p, f) for f in sorted(os.listdir(p))
                       if f.lower().endswith(IMAGE_EXTENSIONS) and os.path.isfile(os.path.join(p, f)))
        else:
            out.append(p)
    return out


def done_images(jsonl: str) -> Set[str]:
    """Images an existing results file already has a caption for (unreadable lines are ignored:
    a job killed mid-write leaves at most one)."""
    done: Set[str] = set()
    if not os.path.exists(jsonl):
        return done
    with open(jsonl, encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and isinstance(rec.get("image"), str) and "caption" in rec:
                done.add(rec["image"])
    return done


class _Bar:
    """A minimal progress bar on a stream (tqdm's basic interface: update, set_postfix_str, close)."""

    def __init__(self, total: int, stream: TextIO) -> None:
        self.total, self.n, self.stream, self.note = total, 0, stream, ""
        self._draw()

    def _draw(self) -> None:
        width = 30
        filled = width * self.n // self.total if self.total else width
        self.stream.write(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.n}/{self.total} {self.note[:40]:<40}")
        self.stream.flush()

    def set_postfix_str(self, note: str) -> None:
        self.note = note
        self._draw()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._draw()

    def close(self) -> None:
        self.stream.write("\n")
        self.stream.flush()


def progress(total: int, stream: TextIO = sys.stderr) -> Any:
    try:
        from tqdm import tqdm  # type: ignore[import-not-found]
    except ImportError:
        return _Bar(total, stream)
    return tqdm(total=total, file=stream, unit="image")


def caption_messages(image: str, prompt: str) -> List[dict]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}},
                                         {"type": "text", "text": prompt}]}]


def caption_images(llm: Any, images: List[str], prompt: str, max_tokens: int, temperature: float = 0.0,
                   seed: Optional[int] = 0, errors: Optional[TextIO] = None) -> Iterator[dict]:
    """One result dict per image (``caption`` or ``error``); bad files do not stop the rest."""
    for image in images:
        t0 = time.perf_counter()
        try:
            if not os.path.isfile(image):
                raise ValueError(f"no such file: {image}")
            out = llm.create_chat_completion(caption_messages(image, prompt), max_tokens=max_tokens,
                                             temperature=temperature, seed=seed, repeat_penalty=1.0)
        except (ValueError, OSError) as e:
            if errors is not None:
                errors.write(f"\nskipped {image}: {e}\n")
            yield {"image": image, "error": str(e)}
            continue
        yield {"image": image, "caption": out["choices"][0]["message"]["content"],
               "n_prompt_tokens": out["usage"]["prompt_tokens"], "n_tokens": out["usage"]["completion_tokens"],
               "seconds": round(time.perf_counter() - t0, 3)}


def run_caption(args: argparse.Namespace) -> int:
    if not args.model:
        raise ValueError("caption needs -m MODEL (a vision-language model's GGUF)")
    images = expand_images(args.images)
    skip = done_images(args.jsonl) if args.jsonl else set()
    todo = [im for im in images if im not in skip]
    if skip:
        sys.stderr.write(f"{args.jsonl}: {len(images) - len(todo)} of {len(images)} images already captioned\n")
    if not todo:
        return 0
    llm = Llama(model_path=args.model, n_ctx=args.ctx_size, n_threads=args.threads or None, verbose=False)
    failed = 0
    try:
        kwargs = {"encoder": ENCODER_FACTORY} if ENCODER_FACTORY is not None else {}
        llm.chat_handler = handler_for_mmproj(llm, args.mmproj, args.chat_format, **kwargs)
        out = open(args.jsonl, "a", encoding="utf-8") if args.jsonl else None
        bar = progress(len(todo))
        try:
            for rec in caption_images(llm, todo, args.prompt, args.n_predict, args.temp, args.seed, sys.stderr):
                failed += "error" in rec
                if out is not None:
                    out.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    out.flush()
                elif "caption" in rec:
                    sys.stdout.write(f"{rec['image']}\t{rec['caption']}\n")
                    sys.stdout.flush()
                bar.set_postfix_str(os.path.basename(rec["image"]))
                bar.update(1)
        finally:
            bar.close()
            if out is not None:
                out.close()
    finally:
        llm.close()
    if failed:
        sys.stderr.write(f"{failed} of {len(todo)} images failed\n")
    return 1 if failed else 0
