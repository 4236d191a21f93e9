"""``python -m llamapy bench``: prompt-processing and generation speed of a
model, measured like llama-bench, reported as tokens per second (mean ±
stdev over the repetitions).

Tests, for every combination of the comma-separated option lists:
  pp<P> [@ d<D>]   one batch of P prompt tokens, appended after D tokens
                   already in the cache (depth D; 0: an empty cache)
  tg<N> [@ d<D>]   N single-token decode steps after D tokens of context
Each combination of flash attention setting, thread count and depth gets its
own context of n_ctx = D + max(P) + max(N) tokens (llama-bench sizes its
contexts the same way). The depth tokens are evaluated once, untimed; before
each timed repetition the cache is brought back to exactly those D tokens
(the later cells are dropped, or, where a sliding-window cache has moved on,
the saved state of the D tokens is restored).
"""
from __future__ import annotations

import json
import os
import re
import statistics
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from .gguf_file import model_file_bytes
from .llama import Llama

FlashAttn = Union[bool, str]

_FLASH_WORDS = {"0": False, "off": False, "false": False, "no": False,
                "1": True, "on": True, "true": True, "yes": True, "auto": "auto"}


_INT = re.compile(r"^[+-]?\d+$")
_RANGE = re.compile(r"^(\d+)-(\d+)(?:([+*])(\d+))?$")


def parse_int_list(text: str, name: str = "value", minimum: int = 0) -> List[int]:
    """llama-bench's list syntax: ``512``, ``0,4096,16384``, a range
    ``0-16384+4096`` (first-last+step; the step defaults to 1) or
    ``512-4096*2`` (first-last*factor). Raises ValueError naming the option
    for anything else, or for a value below `minimum`."""
    out: List[int] = []
    for part in str(text).split(","):
        part = part.strip()
        m = _RANGE.match(part)
        if _INT.match(part):
            out.append(int(part))
        elif m:
            first, last = int(m.group(1)), int(m.group(2))
            op, step = m.group(3) or "+", int(m.group(4) or 1)
            if last < first or (op == "+" and step < 1) or (op == "*" and (step < 2 or first < 1)):
                raise ValueError(f"{name}: {part!r} is an empty or endless range")
            v = first
            while v <= last:
                out.append(v)
                v = v + step if op == "+" else v * step
        else:
            raise ValueError(f"{name}: {part!r} is not an integer or a range like 0-4096+1024 (in {text!r})")
    for v in out:
        if v < minimum:
            raise ValueError(f"{name}: {v} is below the minimum {minimum}")
    return out


def parse_flash_list(text: str) -> List[FlashAttn]:
    """``0``, ``1``, ``auto`` (also on/off/true/false), comma-separated, into
    the values Llama(flash_attn=...) takes: False, True, "auto"."""
    out: List[FlashAttn] = []
    for part in str(text).split(","):
        key = part.strip().lower()
        if key not in _FLASH_WORDS:
            raise ValueError(f"flash-attn: {part.strip()!r} is not one of 0, 1, auto (or on/off) (in {text!r})")
        out.append(_FLASH_WORDS[key])
    return out


def _as_list(value: Any) -> List[Any]:
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _fa_label(fa: FlashAttn, active: Optional[bool] = None) -> str:
    """0 / 1, or "auto" with what it resolved to when known: "auto (1)"."""
    if fa != "auto":
        return str(int(bool(fa)))
    return "auto" if active is None else f"auto ({int(active)})"


def _test_name(kind: str, n: int, depth: int) -> str:
    return f"{kind}{n}" + (f" @ d{depth}" if depth else "")


def bench_records(model_path: str, n_prompt: Union[int, Sequence[int]] = 512,
                  n_gen: Union[int, Sequence[int]] = 128, depth: Union[int, Sequence[int]] = 0,
                  flash_attn: Union[FlashAttn, Sequence[FlashAttn]] = "auto",
                  threads: Union[int, Sequence[int]] = 0, repetitions: int = 3, batch_size: int = 512,
                  ubatch_size: Optional[int] = None, n_ctx: int = 0, progress=None) -> Dict[str, Any]:
    """Runs every test and returns {"model", "arch", "size_mib", "results": [...]}.
    Each result: test, n_prompt, n_gen, n_depth, flash_attn, n_threads, n_ctx,
    tokens_per_s (mean), stdev, samples_ts, and the cache state after the
    depth was filled (depth_n_tokens, depth_kv_cells_used). n_ctx 0 sizes
    each context to depth + max(n_prompt) + max(n_gen); a larger one is used
    as given, a smaller one is an error."""
    prompts = [int(p) for p in _as_list(n_prompt)]
    gens = [int(n) for n in _as_list(n_gen)]
    depths = [int(d) for d in _as_list(depth)]
    flashes = _as_list(flash_attn)
    thread_list = [int(t) for t in _as_list(threads)]
    if repetitions < 1:
        raise ValueError(f"repetitions must be at least 1, not {repetitions}")
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, not {batch_size}")
    for name, vals in (("n-prompt", prompts), ("n-gen", gens), ("depth", depths), ("threads", thread_list)):
        if not vals:
            raise ValueError(f"{name}: no values")
        bad = [v for v in vals if v < 0]
        if bad:
            raise ValueError(f"{name}: {bad[0]} is negative")
    if not any(prompts) and not any(gens):
        raise ValueError("nothing to measure: every n-prompt and n-gen is 0")
    if ubatch_size is not None and ubatch_size < 1:
        raise ValueError(f"ubatch size must be at least 1, not {ubatch_size}")
    need = max(depths) + max(prompts) + max(gens)
    if n_ctx and n_ctx < need:
        raise ValueError(f"ctx-size {n_ctx} is too small: the largest test needs {need} tokens "
                         f"(depth {max(depths)} + prompt {max(prompts)} + generation {max(gens)})")
    ub = ubatch_size if ubatch_size else batch_size
    say = progress or (lambda s: None)

    rng = np.random.default_rng(0)
    results: List[Dict[str, Any]] = []
    meta: Dict[str, Any] = {"model": os.path.basename(model_path), "size_mib": model_file_bytes(model_path) / 2**20}
    for fa in flashes:
        for nt in thread_list:
            for d in depths:
                ctx_size = n_ctx or d + max(prompts) + max(gens)
                llm = Llama(model_path=model_path, n_ctx=ctx_size, n_batch=batch_size, n_ubatch=ub,
                            n_threads=nt or None, n_threads_batch=nt or None, flash_attn=fa, verbose=False)
                try:
                    meta.setdefault("arch", llm.model.arch)
                    meta.setdefault("n_params", None)
                    # Random ids from the lower vocabulary (ordinary text tokens), as llama-bench does.
                    vocab_hi = max(2, min(llm.n_vocab(), 32000))
                    ctx_tokens = rng.integers(1, vocab_hi, size=d).tolist()
                    state = None
                    if d:
                        say(f"filling {d} tokens of context (flash_attn={_fa_label(fa)}, threads={llm.n_threads})")
                        llm.eval(ctx_tokens)
                    filled = {"depth_n_tokens": int(llm.n_tokens),
                              "depth_kv_cells_used": int(llm._seq.ctx.kv_n_used) if llm._seq.ctx is not None else None}

                    def back_to_depth() -> None:
                        nonlocal state
                        if d == 0:
                            llm.reset()
                            return
                        if llm.n_tokens == d:
                            return
                        if llm._ctx.kv_swa_resumable(0, d):
                            llm.n_tokens = d  # the next eval drops the cells after position d
                        else:
                            llm.load_state(state)

                    if d:
                        state = llm.save_state()
                    for p in prompts:
                        if p <= 0:
                            continue
                        prompt = rng.integers(1, vocab_hi, size=p).tolist()

                        def pp() -> None:
                            llm.eval(prompt)

                        times = _timed(pp, back_to_depth, repetitions)
                        results.append(_record("pp", p, 0, d, fa, llm, ctx_size, p, times, filled))
                        say(_line(results[-1]))
                    for n in gens:
                        if n <= 0:
                            continue
                        gen = rng.integers(1, vocab_hi, size=n).tolist()

                        def tg() -> None:
                            for t in gen:
                                llm.eval([t])

                        times = _timed(tg, back_to_depth, repetitions)
                        results.append(_record("tg", 0, n, d, fa, llm, ctx_size, n, times, filled))
                        say(_line(results[-1]))
                    meta.setdefault("threads", llm.n_threads)
                finally:
                    llm.close()
    meta.pop("n_params", None)
    meta["results"] = results
    return meta


def _timed(fn, before, repetitions: int) -> List[float]:
    before()
    fn()  # warm-up
    out = []
    for _ in range(repetitions):
        before()
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _record(kind: str, p: int, n: int, d: int, fa: FlashAttn, llm, n_ctx: int, n_tok: int, times: List[float],
            filled: Dict[str, Any]) -> Dict[str, Any]:
    rates = [n_tok / t for t in times]
    return {"test": _test_name(kind, n_tok, d), "n_prompt": p, "n_gen": n, "n_depth": d, "flash_attn": fa,
            "flash_attn_active": bool(llm.flash_attn_active), "n_threads": llm.n_threads, "n_ctx": n_ctx, "tokens_per_s": statistics.mean(rates),
            "stdev": statistics.pstdev(rates), "samples_ts": rates, **filled}


def _line(r: Dict[str, Any]) -> str:
    return f"{r['test']}: {r['tokens_per_s']:.2f} ± {r['stdev']:.2f} t/s"


def format_table(meta: Dict[str, Any]) -> str:
    lines = ["| model | size | threads | fa | test | t/s |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in meta["results"]:
        lines.append(f"| {meta['model']} ({meta.get('arch', '?')}) | {meta['size_mib']:.1f} MiB | {r['n_threads']} | "
                     f"{_fa_label(r['flash_attn'], r.get('flash_attn_active'))} | {r['test']} | {r['tokens_per_s']:.2f} ± {r['stdev']:.2f} |")
    return "\n".join(lines)


def run_bench(model_path: str, n_prompt: Union[int, Iterable[int]] = 512, n_gen: Union[int, Iterable[int]] = 128,
              threads: Union[int, Iterable[int]] = 0, repetitions: int = 3, batch_size: int = 512,
              as_json: bool = False, depth: Union[int, Iterable[int]] = 0,
              flash_attn: Union[FlashAttn, Iterable[FlashAttn]] = "auto", ubatch_size: Optional[int] = None,
              n_ctx: int = 0, verbose: bool = False) -> int:
    import sys

    progress = (lambda s: print(s, file=sys.stderr, flush=True)) if verbose else None
    meta = bench_records(model_path, n_prompt=_as_list(n_prompt) if not isinstance(n_prompt, int) else n_prompt,
                         n_gen=n_gen if isinstance(n_gen, int) else list(n_gen),
                         depth=depth if isinstance(depth, int) else list(depth),
                         flash_attn=flash_attn if isinstance(flash_attn, (bool, str)) else list(flash_attn),
                         threads=threads if isinstance(threads, int) else list(threads),
                         repetitions=repetitions, batch_size=batch_size, ubatch_size=ubatch_size, n_ctx=n_ctx,
                         progress=progress)
    if as_json:
        print(json.dumps(meta, indent=2))
    else:
        print(format_table(meta))
    return 0
