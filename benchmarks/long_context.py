"""Long-context benchmark: llamapy vs llama.cpp (llama-cpp-python), side by side.

For each model, flash attention setting and implementation, a fresh process
loads the model with n_ctx = max depth + pp + tg and, for each depth in
increasing order (0, 4096, 16384 by default):
  - extends the context with random tokens to the depth (untimed) and saves
    the engine state there;
  - pp<P> @ d: restores that state, evaluates one batch of P prompt tokens
    (n_batch = P), tokens/s;
  - tg<N> @ d: restores that state, N single-token decode steps, tokens/s.
Each process repeats each measurement --inner times after one warm-up.
The two implementations alternate process by process (A B A B ...); medians
over every measured sample of all processes are reported with the ratio
llamapy / llama.cpp. tg defaults to 32 tokens (not 128) to keep a 16384-deep
run in minutes; the state restore before each run makes every run start
after exactly the same depth tokens, so the short tg is not biased.

Sliding-window layers (Gemma 3) keep a window-sized cache on both sides
(swa_full=False, as llama-bench and llamapy default to; llama-cpp-python's
Llama defaults to the full-size one: --swa-full 1 measures that).

Restoring a saved state (rather than dropping the cells after the depth) is
needed for Gemma 3: its sliding-window layers' cache has moved past what the
depth's end sees once a pp512 has run after it. Both sides restore the same
way (llamapy: Llama.save_state/load_state; llama.cpp: llama_state_get_data /
llama_state_set_data, without llama-cpp-python's copy of its logits buffer).

    python benchmarks/long_context.py --reps 2 --inner 2 --threads 2
    python benchmarks/long_context.py --models gemma --depths 0,4096 --fa 0,1
    LLAMAPY_ISA=avx2 LLAMAPY_AVXVNNI=0 python benchmarks/long_context.py   # llamapy at the AVX2 level

Attention scratch: llamapy's Context.attention_scratch_bytes where the
engine has it (else "not exposed"), with the peak RSS of each process and
llamapy's KV bytes.

llama-cpp-python is never a dependency of llamapy: without it the llama.cpp
side is skipped with a message. Writes benchmarks/out/long_context-<time>.json
(or --json PATH) and prints a markdown table.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
ROOT = os.path.dirname(HERE)


def model_path(name: str) -> str:
    """The file of a model name generation.py knows (Gemma, the synthetic perf models)."""
    sys.path.insert(0, HERE)
    sys.path.insert(0, ROOT)
    from generation import model_paths

    return model_paths([name])[name]


class _State:
    """Save/restore of the engine state at a depth, for either implementation."""

    def __init__(self, impl: str, llm):
        self.impl, self.llm = impl, llm

    def save(self):
        llm = self.llm
        if self.impl == "llamapy":
            return llm.save_state()
        import ctypes

        import llama_cpp as lc

        ctx = llm._ctx.ctx
        size = lc.llama_state_get_size(ctx)
        buf = (ctypes.c_uint8 * size)()
        got = lc.llama_state_get_data(ctx, buf, size)
        return (buf, got, llm.n_tokens)

    def load(self, state) -> None:
        llm = self.llm
        if self.impl == "llamapy":
            llm.load_state(state)
            return
        import llama_cpp as lc

        buf, size, n = state
        if lc.llama_state_set_data(llm._ctx.ctx, buf, size) != size:
            raise RuntimeError("llama_state_set_data read a different size")
        llm.n_tokens = n


def worker(impl: str, path: str, threads: int, n_prompt: int, n_gen: int, depths: list, flash: bool,
           inner: int, swa_full: bool = False) -> dict:
    if impl == "llamapy":
        from llamapy import Llama
    else:
        from llama_cpp import Llama
    import numpy as np

    n_ctx = max(depths) + n_prompt + n_gen
    t0 = time.perf_counter()
    llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=max(n_prompt, 1), n_ubatch=max(n_prompt, 1),
                n_threads=threads, n_threads_batch=threads, flash_attn=flash, swa_full=swa_full, verbose=False)
    load_s = time.perf_counter() - t0
    info = {}
    if impl == "llamapy":
        from llamapy import _engine

        si = _engine.system_info()
        info = {"active_isa": si["active_isa"], "isa_cap": si.get("isa_cap", ""), "build": si.get("build", ""),
                "module": _engine.__file__,
                "avxvnni_env": os.environ.get("LLAMAPY_AVXVNNI", "")}
    else:
        import llama_cpp as lc

        info = {"system_info": lc.llama_print_system_info().decode().strip(), "version": lc.__version__}
    rng = np.random.default_rng(0)
    hi = min(llm.n_vocab(), 32000)
    ctx_tokens = rng.integers(100, hi, size=max(depths)).tolist()
    prompt = rng.integers(100, hi, size=n_prompt).tolist()
    gen = rng.integers(100, hi, size=n_gen).tolist()
    st = _State(impl, llm)
    out = {"impl": impl, "flash_attn": flash, "swa_full": swa_full, "load_s": load_s, "n_ctx": n_ctx, "info": info,
           "depths": {}}
    llm.reset()
    filled = 0
    for d in sorted(depths):
        t = time.perf_counter()
        prev = filled
        if d > filled:
            llm.eval(ctx_tokens[filled:d])
        fill_s = time.perf_counter() - t
        filled = d
        state = st.save() if d else None

        def back() -> None:
            if d:
                st.load(state)
            else:
                llm.reset()

        pp, tg = [], []
        for i in range(inner + 1):  # the first round warms up
            if n_prompt:
                back()
                t = time.perf_counter()
                llm.eval(prompt)
                rate = n_prompt / (time.perf_counter() - t)
                if i:
                    pp.append(rate)
            if n_gen:
                back()
                t = time.perf_counter()
                for tok in gen:
                    llm.eval([tok])
                rate = n_gen / (time.perf_counter() - t)
                if i:
                    tg.append(rate)
        back()
        rec = {"pp": pp, "tg": tg, "fill_s": fill_s, "fill_tokens": d - prev}
        if impl == "llamapy":
            rec["kv_bytes"] = int(llm._ctx.kv_bytes)
            rec["kv_cells_used"] = int(llm._ctx.kv_n_used)
            # The attention scratch the context reserved (engines that report it).
            rec["attention_scratch_bytes"] = getattr(llm._ctx, "attention_scratch_bytes", None)
        out["depths"][str(d)] = rec
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def _med(xs):
    return statistics.median(xs) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["gemma", "llama1b-q4_k_m"])
    ap.add_argument("--impls", nargs="*", default=["llamapy", "llama_cpp"])
    ap.add_argument("--depths", default="0,4096,16384", help="comma list (default 0,4096,16384)")
    ap.add_argument("--fa", default="0,1", help="flash attention settings, comma list of 0/1 (default 0,1)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2, help="fresh processes per implementation, model and fa setting")
    ap.add_argument("--inner", type=int, default=2, help="measured rounds per depth inside each process")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=32, help="tg tokens (default 32, to keep deep runs short)")
    ap.add_argument("--swa-full", type=int, choices=(0, 1), default=0,
                    help="full-size cache for sliding-window layers, both sides (default 0, as llama-bench and "
                         "llamapy; llama-cpp-python's own default is 1)")
    ap.add_argument("--skip", nargs="*", default=[], metavar="IMPL/faF",
                    help="combinations not to run, e.g. llamapy/fa0 (the explicit path is slow to fill deep contexts)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per worker process")
    ap.add_argument("--json", help="output path (default benchmarks/out/long_context-<time>.json)")
    ap.add_argument("--worker", nargs=3, metavar=("IMPL", "PATH", "FA"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    depths = sorted({int(x) for x in args.depths.split(",")})
    if args.worker:
        impl, path, fa = args.worker
        print(json.dumps(worker(impl, path, args.threads, args.p, args.n, depths, fa == "1", args.inner,
                                bool(args.swa_full))))
        return 0

    impls = list(args.impls)
    if "llama_cpp" in impls and importlib.util.find_spec("llama_cpp") is None:
        print("llama-cpp-python is not installed: the llama.cpp side is skipped "
              "(pip install llama-cpp-python==0.3.36 to compare)")
        impls.remove("llama_cpp")
    flashes = [x.strip() for x in args.fa.split(",")]
    if any(f not in ("0", "1") for f in flashes):
        raise SystemExit("--fa takes 0 and/or 1")
    now = dt.datetime.now(dt.timezone.utc)
    env_note = {k: os.environ[k] for k in ("LLAMAPY_ISA", "LLAMAPY_AVXVNNI") if k in os.environ}
    print(f"{platform.node()} {platform.machine()}, {args.threads} threads, {now.isoformat(timespec='minutes')}, "
          f"pp{args.p} / tg{args.n}, depths {depths}, swa_full={args.swa_full}, env {env_note or '{}'}")
    results = {}
    for name in args.models:
        path = model_path(name)
        runs = {(impl, f): [] for f in flashes for impl in impls}
        for rep in range(args.reps):
            for f in flashes:
                for impl in impls:  # alternate implementations
                    if f"{impl}/fa{f}" in args.skip:
                        continue
                    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, path, f, "--threads",
                           str(args.threads), "--inner", str(args.inner), "-p", str(args.p), "-n", str(args.n),
                           "--depths", ",".join(map(str, depths)), "--swa-full", str(args.swa_full)]
                    # this checkout appended, so a build given on PYTHONPATH (a portable
                    # variant, an installed wheel) is the one measured
                    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                        p for p in (os.environ.get("PYTHONPATH", ""), ROOT) if p))
                    t = time.perf_counter()
                    try:
                        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, env=env)
                    except subprocess.TimeoutExpired:
                        print(f"  {impl} fa={f} on {name}: timed out after {args.timeout:.0f} s", flush=True)
                        continue
                    if r.returncode != 0:
                        print(f"  {impl} fa={f} on {name} failed:\n{r.stderr[-2000:]}", flush=True)
                        continue
                    res = json.loads(r.stdout.strip().splitlines()[-1])
                    runs[(impl, f)].append(res)
                    short = ", ".join(f"d{d}: pp {_med(v['pp']):.1f} tg {_med(v['tg']):.1f}"
                                      for d, v in res["depths"].items())
                    print(f"  rep {rep} {name} {impl} fa={f} ({time.perf_counter() - t:.0f} s): {short}", flush=True)
        table = {}
        for (impl, f), rs in runs.items():
            if not rs:
                continue
            for d in map(str, depths):
                pp = [x for r in rs for x in r["depths"][d]["pp"]]
                tg = [x for r in rs for x in r["depths"][d]["tg"]]
                entry = {"pp": _med(pp), "tg": _med(tg), "pp_samples": pp, "tg_samples": tg,
                         "rss_mb": _med([r["rss_mb"] for r in rs])}
                if impl == "llamapy":
                    entry["kv_bytes"] = rs[0]["depths"][d].get("kv_bytes")
                    entry["attention_scratch_bytes"] = rs[0]["depths"][d].get("attention_scratch_bytes")
                table.setdefault(d, {})[f"{impl}/fa{f}"] = entry
        results[name] = {"path": os.path.basename(path), "table": table,
                         "info": {impl: next((r["info"] for (i, _), rs in runs.items() if i == impl for r in rs), {})
                                  for impl in impls}}
        print(f"\n### {name} (pp{args.p} / tg{args.n} tokens/s, medians; ratio = llamapy / llama.cpp)\n")
        cols = [f"{impl}/fa{f}" for f in flashes for impl in impls]
        head = "| depth | test | " + " | ".join(cols)
        if "llamapy" in impls and "llama_cpp" in impls:
            head += " | " + " | ".join(f"ratio fa{f}" for f in flashes) + " | llamapy best / llama.cpp best"
        print(head + " |")
        print("|" + "---|" * (head.count("|")))
        for d in map(str, depths):
            for test in ("pp", "tg"):
                row = table.get(d, {})
                cells = [f"{row[c][test]:.1f}" if c in row else "-" for c in cols]
                line = f"| {d} | {test}{args.p if test == 'pp' else args.n} | " + " | ".join(cells)
                if "llamapy" in impls and "llama_cpp" in impls:
                    ratios = []
                    for f in flashes:
                        a, b = row.get(f"llamapy/fa{f}"), row.get(f"llama_cpp/fa{f}")
                        ratios.append(f"{a[test] / b[test]:.2f}" if a and b else "-")
                    best_a = max((row[c][test] for c in row if c.startswith("llamapy/")), default=None)
                    best_b = max((row[c][test] for c in row if c.startswith("llama_cpp/")), default=None)
                    line += " | " + " | ".join(ratios) + (f" | {best_a / best_b:.2f}" if best_a and best_b else " | -")
                print(line + " |")
        rss = {c: table[str(depths[0])][c]["rss_mb"] for c in cols if c in table.get(str(depths[0]), {})}
        print("\npeak RSS MB per process (n_ctx sized for the deepest test): "
              + ", ".join(f"{c} {v:.0f}" for c, v in rss.items()))
        kv = {d: table[d].get(f"llamapy/fa{flashes[0]}", {}).get("kv_bytes") for d in map(str, depths)}
        scratch = {f"fa{f} d{d}": table[d].get(f"llamapy/fa{f}", {}).get("attention_scratch_bytes")
                   for f in flashes for d in map(str, depths)}
        print("llamapy KV bytes at each depth: " + ", ".join(f"d{d} {v / 2**20:.1f} MiB" for d, v in kv.items() if v)
              + "; attention scratch: " + (", ".join(f"{k} {v / 2**20:.2f} MiB" for k, v in scratch.items() if v)
                                           or "not exposed by this llamapy build"))
    out = args.json or os.path.join(OUT, f"long_context-{now.strftime('%Y%m%dT%H%M')}.json")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    with open(out, "w") as f:
        json.dump({"date": now.isoformat(), "host": platform.node(), "threads": args.threads, "n_prompt": args.p,
                   "n_gen": args.n, "depths": depths, "swa_full": bool(args.swa_full), "reps": args.reps,
                   "inner": args.inner, "env": env_note,
                   "results": results}, f, indent=1)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
