"""``python -m llamapy chat``: an interactive chat in the terminal.

Keeps the conversation, streams each answer (a reasoning model's thinking
first, after "[thinking]"; the history keeps the answers), and drops the
oldest turns when the conversation no longer fits the context. Commands: ``/reset`` forgets the
conversation (the system prompt stays), ``/exit`` (or end of input) quits.
Ctrl-C stops the answer being written.

Not here: the command's options (``llamapy/cli.py``) and chat itself (``completion.py``).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Dict, List, Optional, TextIO

from .._params import random_seed

HELP = "Type a message. /reset starts over, /exit quits; Ctrl-C stops an answer."
IMAGE_HELP = "/image PATH attaches an image to your next message."


def chat_loop(llm: Any, stdin: TextIO, stdout: TextIO, system: Optional[str] = None, images: bool = False,
              **sampling: Any) -> int:
    """Read user lines from ``stdin`` until ``/exit`` or end of input; stream answers to ``stdout``.
    With ``images`` (a multimodal model), ``/image PATH`` attaches an image to the next message."""
    base: List[Dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    history = list(base)
    pending: List[str] = []
    stdout.write(HELP + (" " + IMAGE_HELP if images else "") + "\n")
    while True:
        stdout.write("> ")
        stdout.flush()
        line = stdin.readline()
        if not line:
            stdout.write("\n")
            return 0
        text = line.rstrip("\n")
        if text.strip() in ("/exit", "/quit"):
            return 0
        if text.strip() == "/reset":
            history = list(base)
            stdout.write("(conversation cleared)\n")
            continue
        if text.strip().startswith("/image"):
            path = text.strip()[len("/image"):].strip()
            if not images:
                stdout.write("error: /image needs a vision model (chat --mmproj PROJ)\n")
            elif not path or not os.path.isfile(path):
                stdout.write(f"error: no such image file: {path!r}\n")
            else:
                pending.append(path)
                stdout.write(f"(image attached: {path})\n")
            continue
        if not text.strip():
            continue
        if pending:
            parts: List[Dict[str, Any]] = [{"type": "image_url", "image_url": {"url": p}} for p in pending]
            history.append({"role": "user", "content": parts + [{"type": "text", "text": text}]})
            pending = []
        else:
            history.append({"role": "user", "content": text})
        answer = _answer(llm, history, base, stdout, sampling)
        if answer is None:
            history.pop()
            continue
        history.append({"role": "assistant", "content": answer})


def _answer(llm: Any, history: List[Dict[str, Any]], base: List[Dict[str, Any]], stdout: TextIO,
            sampling: Dict[str, Any]) -> Optional[str]:
    """Stream one answer; returns its text, or None if nothing could be generated."""
    while True:
        try:
            stream = llm.create_chat_completion(list(history), stream=True, **sampling)
            break
        except ValueError as e:
            too_long = "context window" in str(e) or "exceeds n_ctx" in str(e)
            if not too_long or len(history) <= len(base) + 1:
                stdout.write(f"error: {e}\n")
                return None
            del history[len(base): len(base) + 2]  # forget the oldest exchange
    pieces: List[str] = []
    thinking = False  # a reasoning model's thinking is shown after "[thinking] ", the answer on a line of its own
    try:
        for chunk in stream:
            delta = chunk["choices"][0]["delta"]
            if delta.get("reasoning_content"):
                stdout.write(("" if thinking else "[thinking] ") + delta["reasoning_content"])
                stdout.flush()
                thinking = True
            if delta.get("content"):
                if thinking and not pieces:
                    stdout.write("\n")
                pieces.append(delta["content"])
                stdout.write(delta["content"])
                stdout.flush()
    except KeyboardInterrupt:
        stream.close()
        stdout.write(" [stopped]")
    stdout.write("\n")
    return "".join(pieces)


def run_chat(args: argparse.Namespace) -> int:
    """The ``chat`` command: load the model (``args.model`` or the default) and chat."""
    from ..llama import Llama

    if args.model:
        model_path = args.model
    else:
        from ..default_model import default_model_path

        model_path = default_model_path()
    seed = args.seed if args.seed is not None else random_seed()
    llm = Llama(model_path=model_path, n_ctx=args.ctx_size, n_threads=args.threads or None, n_batch=args.batch_size,
                chat_format=args.chat_format, seed=seed, verbose=False, mmproj=getattr(args, "mmproj", None))
    try:
        return chat_loop(llm, sys.stdin, sys.stdout, system=args.system, images=llm.mmproj is not None,
                         max_tokens=args.n_predict,
                         temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                         repeat_penalty=args.repeat_penalty)
    finally:
        llm.close()
