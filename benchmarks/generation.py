"""Side-by-side generation benchmark: llamapy vs llama.cpp (llama-cpp-python).

For each model and implementation a fresh process loads the model and
measures, with the same `Llama` API (llamapy is a drop-in replacement):
  load   wall time from the constructor call to the logits of a 1-token prompt
  pp512  tokens/s evaluating a 512-token prompt (n_batch 512)
  tg128  tokens/s of 128 single-token decode steps after a short prompt
  rss    peak resident memory of that process (MB)
  ceil   tg as a fraction of the bandwidth ceiling: the weight bytes one
         decode step reads (llamapy.experts.weights_read_per_token: every
         tensor a token passes through, the chosen experts' share of the
         expert tensors) times tg, over the read bandwidth the engine's
         probe (_engine.read_bandwidth, same thread count) measures in the
         same process right after the tg rounds
The implementations alternate, rep after rep, and medians are reported with
the ratio llamapy / llama.cpp, so machine drift affects both alike.

    python benchmarks/generation.py --reps 5 --threads 2
    python benchmarks/generation.py --models gemma --impls llamapy   # one side only

llama-cpp-python is never a dependency of llamapy: install it yourself
(`pip install llama-cpp-python==0.3.36`) to get the comparison.
"""
from __future__ import annotations

import argparse
import datetime as dt
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


def model_paths(names):
    paths = {}
    for n in names:
        if n == "gemma":
            sys.path.insert(0, os.path.dirname(HERE))
            from llamapy.default_model import default_model_path

            paths[n] = default_model_path()
        elif n in ("llama1b-q4_k_m", "llama1b-q8_0"):
            from synthetic_models import write_llama_1b

            os.makedirs(OUT, exist_ok=True)
            mix = "Q4_K_M" if n.endswith("q4_k_m") else "Q8_0"
            paths[n] = write_llama_1b(os.path.join(OUT, f"{n}.gguf"), mix)
        elif n.startswith(("qwen3moe-30b-a3b", "gptoss-20b", "deepseek-v2-lite")):
            # mixture-of-experts perf models (synthetic_moe_models.py); "-L<n>" picks the layer count
            from synthetic_moe_models import SHAPES, write_moe

            base, _, layers = n.partition("-L")
            if base not in SHAPES:
                raise SystemExit(f"unknown model {n}")
            os.makedirs(OUT, exist_ok=True)
            paths[n] = write_moe(os.path.join(OUT, f"{n}.gguf"), base, int(layers) if layers else None)
        elif n.startswith(("qwen35-4b", "qwen35moe-35b-a3b")):
            # Qwen3.5 hybrid perf models (synthetic_hybrid_models.py); "-L<n>" picks the layer count
            from synthetic_hybrid_models import SHAPES as HYBRID, write_hybrid

            base, _, layers = n.partition("-L")
            if base not in HYBRID:
                raise SystemExit(f"unknown model {n}")
            os.makedirs(OUT, exist_ok=True)
            paths[n] = write_hybrid(os.path.join(OUT, f"{n}.gguf"), base, int(layers) if layers else None)
        else:
            raise SystemExit(f"unknown model {n}")
    return paths


def worker(impl: str, path: str, threads: int, n_prompt: int, n_gen: int, reps: int) -> dict:
    if impl == "llamapy":
        from llamapy import Llama
    else:
        from llama_cpp import Llama
    import numpy as np

    t0 = time.perf_counter()
    llm = Llama(model_path=path, n_ctx=max(n_prompt, n_gen) + 64, n_batch=512, n_ubatch=512, n_threads=threads,
                n_threads_batch=threads, verbose=False)
    llm.eval([llm.token_bos() if llm.token_bos() >= 0 else 1])
    load = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    hi = min(llm.n_vocab(), 32000)
    prompt = rng.integers(100, hi, size=n_prompt).tolist()
    gen = rng.integers(100, hi, size=n_gen).tolist()
    pp, tg = [], []
    for _ in range(reps + 1):  # first round warms up
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt)
        pp.append(n_prompt / (time.perf_counter() - t))
        llm.reset()
        llm.eval(gen[:1])
        t = time.perf_counter()
        for tok in gen[1:]:
            llm.eval([tok])
        tg.append((n_gen - 1) / (time.perf_counter() - t))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    del llm  # the probe's buffer should not compete with the model for memory
    from llamapy import _engine
    from llamapy.experts import weights_read_per_token
    from llamapy.gguf_file import GGUFFile

    with GGUFFile(path) as f:
        read = weights_read_per_token(f, _engine.model_shape(path))
    bw = _engine.read_bandwidth(1 << 29, 3, threads) * 1e9
    ceil = statistics.median(tg[1:]) * read / bw
    if impl == "llamapy":  # which build ran, at which kernel level
        from llamapy import _engine

        si = _engine.system_info()
        info = {"module": _engine.__file__, "build": si.get("build", ""), "active_isa": si["active_isa"]}
    else:
        import llama_cpp

        info = {"module": llama_cpp.__file__, "system_info": llama_cpp.llama_print_system_info().decode().strip()}
    return {"load_s": load, "pp": statistics.median(pp[1:]), "tg": statistics.median(tg[1:]), "rss_mb": rss,
            "ceil": ceil, "read_gb": read / 1e9, "probe_gbs": bw / 1e9, "info": info}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["gemma", "llama1b-q4_k_m", "llama1b-q8_0"])
    ap.add_argument("--impls", nargs="*", default=["llamapy", "llama_cpp"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3, help="fresh processes per implementation and model")
    ap.add_argument("--inner", type=int, default=2, help="measured rounds inside each process")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--json")
    ap.add_argument("--worker", nargs=2, metavar=("IMPL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.threads, args.p, args.n, args.inner)))
        return 0

    paths = model_paths(args.models)
    print(f"{platform.node()} {platform.machine()}, {args.threads} threads, {dt.datetime.now().isoformat(timespec='minutes')}")
    results = {}
    for name, path in paths.items():
        runs = {impl: [] for impl in args.impls}
        for _ in range(args.reps):
            for impl in args.impls:  # alternate implementations
                cmd = [sys.executable, __file__, "--worker", impl, path, "--threads", str(args.threads),
                       "--inner", str(args.inner), "-p", str(args.p), "-n", str(args.n)]
                # this checkout appended: a build given on PYTHONPATH is the one measured
                env = dict(os.environ, PYTHONPATH=os.pathsep.join(
                    p for p in (os.environ.get("PYTHONPATH", ""), os.path.dirname(HERE)) if p))
                r = subprocess.run(cmd, capture_output=True, text=True, env=env)
                if r.returncode != 0:
                    print(f"{impl} on {name} failed:\n{r.stderr[-2000:]}")
                    continue
                runs[impl].append(json.loads(r.stdout.strip().splitlines()[-1]))
        med = {impl: {k: statistics.median(x[k] for x in v) for k in v[0] if k != "info"}
               for impl, v in runs.items() if v}
        results[name] = {impl: dict(m, info=runs[impl][0]["info"]) for impl, m in med.items()}
        for impl, v in runs.items():
            if v:
                print(f"  {impl}: {v[0]['info']}")
        print(f"\n{name}")
        print(f"  {'impl':10} {'load s':>7} {'pp t/s':>8} {'tg t/s':>8} {'RSS MB':>7} {'ceil':>5}  "
              f"(read/token GB, probe GB/s)")
        for impl, m in med.items():
            print(f"  {impl:10} {m['load_s']:7.2f} {m['pp']:8.1f} {m['tg']:8.1f} {m['rss_mb']:7.0f} "
                  f"{100 * m['ceil']:4.0f}%  ({m['read_gb']:.3f}, {m['probe_gbs']:.1f})")
        if "llamapy" in med and "llama_cpp" in med:
            a, b = med["llamapy"], med["llama_cpp"]
            print(f"  {'ratio':10} {a['load_s'] / b['load_s']:7.2f} {a['pp'] / b['pp']:8.2f} "
                  f"{a['tg'] / b['tg']:8.2f} {a['rss_mb'] / b['rss_mb']:7.2f}   (llamapy / llama.cpp)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "date": dt.datetime.now().isoformat(), "results": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
