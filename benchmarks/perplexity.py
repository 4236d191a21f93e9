"""Perplexity against prefill: how close ``python -m llamapy perplexity`` runs to the speed of
evaluating the same tokens, and how it compares with llama-perplexity (issue 37 item 4).

For each model and chunk size (-c), side by side, repeated --reps times in alternation:
  - llamapy, in one process (model loaded and text tokenized first, untimed), CPU seconds of
    the same chunks (n_batch // n_ctx chunks per batch, as perplexity cuts them) as
      prefill, no logits       (only the last row's, as Llama.eval keeps)
      prefill, scored logits   (the rows perplexity reads: perplexity.scored_rows, or the
                                whole second half for a checkout from before it existed)
      perplexity               (llamapy.perplexity's evaluation loop: that prefill plus the
                                log-softmax of every scored row)
    the first three --inner times back to back (medians), then
      prefill, every row's logits
      with --kld: perplexity saving the KL-divergence base file, and the KL divergence of the
      model against that file (its own logits: the cost, not the statistics, matters here);
  - llamapy CLI: ``python -m llamapy perplexity`` as a process;
  - llama-perplexity (the 0.3.36 sdist's AVX2 build, --lpp PATH) as a process, with its own
    "seconds per pass" line;
  both processes' evaluation cost is their CPU time less that of the same command with
  ``--chunks 0`` (load the model and tokenize the whole text, evaluate nothing).

The primary figure is CPU time per token (user + system; -t 1 by default), because this
machine is shared and wall-clock time depends on who else runs; wall time is printed beside
it as secondary. Medians over the repetitions. --root measures another checkout (e.g. the
commit before a change) with this same script.

    python benchmarks/perplexity.py                                    # Gemma 3 270M, -c 512 and 2048
    python benchmarks/perplexity.py --models gemma,llama1b-q4_k_m --ctx 512 --reps 2 --kld
    LLAMAPY_ISA=avx2 LLAMAPY_AVXVNNI=0 python benchmarks/perplexity.py --ctx 512   # llamapy at llama.cpp's AVX2 level

Writes benchmarks/out/perplexity-<time>.json (or --json PATH) and prints a markdown table.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")
TEXT = os.path.join(HERE, "data", "perplexity_text.md")
LPP = "/tmp/x/lpp-build/bin/llama-perplexity"
PREFILL_MODES = ("prefill_none", "prefill_half", "prefill_all")


def model_path(name: str) -> str:
    sys.path.insert(0, HERE)
    from generation import model_paths

    return model_paths([name])[name]


def worker(root: str, model: str, text_path: str, n_ctx: int, n_chunks: int, n_batch: int, threads: int,
           kld: bool, inner: int) -> dict:
    """In-process CPU / wall seconds of each prefill mode and of perplexity's evaluation loop
    over the same chunks (model loaded and text tokenized beforehand), with llamapy from root."""
    sys.path.insert(0, root)
    import numpy as np

    P = importlib.import_module("llamapy.perplexity")  # the package's attribute is the function
    from llamapy import _engine
    from llamapy import _logits_file as lf

    # The rows whose logits perplexity computes (before scored_rows existed: the whole second half).
    scored = getattr(P, "scored_rows", lambda pos, n: pos >= n // 2)

    text = P.read_text_file(text_path)
    llm, n_seq = P.open_chunked_model(model, n_ctx, n_batch, threads, 0, {})
    out = {"active_isa": _engine.system_info()["active_isa"], "n_seq": n_seq}
    try:
        tokens = P.tokenize_text(llm, text)
        n_chunk = P.chunk_count(len(tokens), n_ctx, n_chunks, "to evaluate perplexity")
        ctx = llm._ctx
        bos = int(llm.token_bos()) if llm.tokenizer_.add_bos else None

        def prefill(mode: str) -> None:
            for c0 in range(0, n_chunk, n_seq):
                k = min(n_seq, n_chunk - c0)
                ctx.kv_clear()
                if n_ctx <= n_batch:
                    batches = [(c0 * n_ctx, k, 0, n_ctx)]
                else:
                    batches = [(c0 * n_ctx, 1, b0, min(n_ctx, b0 + n_batch)) for b0 in range(0, n_ctx, n_batch)]
                for start, k, b0, b1 in batches:
                    toks = np.concatenate([tokens[start + s * n_ctx:start + (s + 1) * n_ctx][b0:b1] for s in range(k)])
                    if bos is not None and b0 == 0:
                        toks[::n_ctx] = bos
                    pos = np.tile(np.arange(b0, b1, dtype=np.int32), k)
                    want = {"prefill_none": np.arange(len(pos)) == len(pos) - 1, "prefill_half": scored(pos, n_ctx),
                            "prefill_all": np.ones(len(pos), dtype=bool)}[mode]
                    ctx.decode(tokens=toks, pos=pos, seq_ids=np.repeat(np.arange(k, dtype=np.int32), b1 - b0),
                               logits=want)

        def timed(fn) -> dict:
            c0, w0 = time.process_time(), time.perf_counter()
            fn()
            return {"cpu": time.process_time() - c0, "wall": time.perf_counter() - w0}

        # The scored prefill and perplexity back to back, `inner` times (medians): this
        # machine's CPU time wanders by ~10 % with what else runs; every-row logits once.
        res, samples = {}, {m: [] for m in ("prefill_none", "prefill_half", "perplexity")}
        for _ in range(inner):
            for mode in ("prefill_none", "prefill_half"):
                samples[mode].append(timed(lambda: prefill(mode)))
            samples["perplexity"].append(timed(lambda: res.update(r=P._run_perplexity(
                llm, tokens, n_ctx, n_chunk, n_seq, n_batch, None, None))))
        for mode, v in samples.items():
            out[mode] = {k: statistics.median(s[k] for s in v) for k in ("cpu", "wall")}
        out["prefill_all"] = timed(lambda: prefill("prefill_all"))
        out["ppl"] = res["r"].ppl
        if kld:  # saving the base file, then reading it back (the model against itself)
            with tempfile.TemporaryDirectory() as d:
                base = os.path.join(d, "base.kld")
                out["kld_save"] = timed(lambda: P._run_perplexity(llm, tokens, n_ctx, n_chunk, n_seq, n_batch, base,
                                                                  None))
                with open(base, "rb") as f:
                    head = lf.read_header(f, base)
                    out["kld"] = timed(lambda: res.update(k=P._run_kld(llm, f, head, base, n_chunk, n_seq, n_batch,
                                                                       None)))
                out["kld_mean"] = res["k"].kld.kld
        out["n_tokens"] = n_chunk * n_ctx
    finally:
        llm.close()
    return out


def run_process(cmd, env=None, cwd=None) -> dict:
    """Wall seconds of a command (waited for), with its output."""
    w0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd)
    stdout, stderr = p.communicate()
    return {"rc": p.returncode, "stdout": stdout, "stderr": stderr, "wall": time.perf_counter() - w0}


def child_cpu(cmd, env=None, cwd=None) -> dict:
    """Runs cmd and measures the child's CPU seconds through RUSAGE_CHILDREN deltas."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = run_process(cmd, env, cwd)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    r["cpu"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r


def cli_eval(cmd_for, n_chunks: int, env=None, ok_rc=(0,), cwd=None) -> dict:
    """Evaluation cost of a perplexity command: its run less the same with --chunks 0."""
    full = child_cpu(cmd_for(n_chunks), env, cwd)
    if full["rc"] != 0:
        raise SystemExit(f"{' '.join(cmd_for(n_chunks))} failed:\n{full['stderr'][-2000:]}")
    load = child_cpu(cmd_for(0), env, cwd)
    if load["rc"] not in ok_rc:
        raise SystemExit(f"{' '.join(cmd_for(0))} failed:\n{load['stderr'][-2000:]}")
    return {"cpu": full["cpu"] - load["cpu"], "wall": full["wall"] - load["wall"], "cpu_total": full["cpu"],
            "cpu_load": load["cpu"], "stdout": full["stdout"], "stderr": full["stderr"]}


def final_ppl(output: str) -> float:
    m = re.search(r"Final estimate: PPL = ([0-9.]+)", output)
    return float(m.group(1)) if m else float("nan")


def measure(model: str, n_ctx: int, n_chunks: int, args) -> dict:
    """One repetition of every column for one model and chunk size."""
    row = {}
    with tempfile.NamedTemporaryFile("r", suffix=".json") as tmp:
        r = child_cpu([sys.executable, __file__, "--worker", args.root, model, str(n_ctx), str(n_chunks),
                       str(args.batch), str(args.threads), args.text, str(int(args.kld)), str(args.inner),
                       tmp.name])
        if r["rc"] != 0:
            raise SystemExit(f"worker failed:\n{r['stderr'][-3000:]}")
        w = json.load(open(tmp.name))
    row.update({k: w[k] for k in PREFILL_MODES + ("perplexity", "kld_save", "kld") if k in w})
    row["n_tokens"], row["ppl_llamapy"], row["active_isa"] = w["n_tokens"], w["ppl"], w["active_isa"]
    env = dict(os.environ, PYTHONPATH=args.root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ours = cli_eval(lambda n: [sys.executable, "-m", "llamapy", "perplexity", "-m", model, "-f", args.text,
                               "-c", str(n_ctx), "-b", str(args.batch), "-t", str(args.threads),
                               "--chunks", str(n)], n_chunks, env, ok_rc=(1,),  # --chunks 0: an error after load
                       cwd=args.root)  # `python -m` imports from the working directory first
    row["cli_llamapy"] = {"cpu": ours["cpu"], "wall": ours["wall"]}
    row["ppl_cli"] = final_ppl(ours["stdout"] + ours["stderr"])
    if args.lpp and os.path.exists(args.lpp):
        theirs = cli_eval(lambda n: [args.lpp, "-m", model, "-f", args.text, "-c", str(n_ctx), "-b", str(args.batch),
                                     "-t", str(args.threads), "--chunks", str(n)], n_chunks)
        row["llama_perplexity"] = {"cpu": theirs["cpu"], "wall": theirs["wall"]}
        row["ppl_llama_cpp"] = final_ppl(theirs["stdout"] + theirs["stderr"])
        m = re.search(r"([0-9.]+) seconds per pass", theirs["stderr"])
        row["lpp_seconds_per_pass"] = float(m.group(1)) if m else None
    return row


LABELS = {"prefill_none": "llamapy prefill, no logits", "prefill_half": "llamapy prefill, scored rows' logits",
          "prefill_all": "llamapy prefill, every row's logits", "perplexity": "llamapy perplexity (eval loop)",
          "kld_save": "llamapy perplexity saving the KL base file", "kld": "llamapy KL divergence (eval loop)",
          "cli_llamapy": "python -m llamapy perplexity", "llama_perplexity": "llama-perplexity (0.3.36)"}


def table(results: list) -> str:
    lines = ["| model | -c | what | CPU ms/token | tokens per CPU-s | wall tokens/s | CPU vs scored prefill |",
             "|---|---|---|---|---|---|---|"]
    for res in results:
        reps, n_tok = res["reps"], res["reps"][0]["n_tokens"]
        med = {k: (statistics.median(r[k]["cpu"] for r in reps), statistics.median(r[k]["wall"] for r in reps))
               for k in LABELS if k in reps[0]}
        ref = med["prefill_half"][0]
        for k, (cpu, wall) in med.items():
            lines.append(f"| {res['model']} | {res['n_ctx']} | {LABELS[k]} | {1000 * cpu / n_tok:.2f} | "
                         f"{n_tok / cpu:.1f} | {n_tok / wall:.1f} | {cpu / ref:.2f} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gemma", help="comma-separated: gemma, llama1b-q4_k_m, ... or .gguf paths")
    ap.add_argument("--ctx", default="512,2048")
    ap.add_argument("--chunks", default="512:4,2048:2", help="chunks per -c value, as CTX:N pairs")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--lpp", default=LPP, help="llama-perplexity binary ('' to skip)")
    ap.add_argument("--kld", action="store_true", help="also time saving a KL base file and reading it back")
    ap.add_argument("--root", default=ROOT, help="the llamapy checkout to measure (e.g. a worktree of the "
                    "commit before a change; this script stays the same)")
    ap.add_argument("--json")
    ap.add_argument("--inner", type=int, default=2, help="in-process repetitions of the scored prefill and "
                    "perplexity, alternating (medians)")
    ap.add_argument("--worker", nargs=10, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        root, model, n_ctx, n_chunks, n_batch, threads, text, kld, inner, out = args.worker
        res = worker(root, model, text, int(n_ctx), int(n_chunks), int(n_batch), int(threads), kld == "1",
                     int(inner))
        with open(out, "w") as f:
            json.dump(res, f)
        return
    args.text, args.root = os.path.abspath(args.text), os.path.abspath(args.root)  # the CLI runs in root
    chunks = {int(c): int(n) for c, n in (p.split(":") for p in args.chunks.split(","))}
    results = []
    for name in args.models.split(","):
        path = name if name.endswith(".gguf") else model_path(name)
        for n_ctx in (int(c) for c in args.ctx.split(",")):
            res = {"model": os.path.basename(path), "n_ctx": n_ctx, "reps": []}
            for rep in range(args.reps):
                row = measure(path, n_ctx, chunks.get(n_ctx, 2), args)
                res["reps"].append(row)
                print(f"{res['model']} -c {n_ctx} rep {rep + 1}: " + ", ".join(
                    f"{k} {1000 * row[k]['cpu'] / row['n_tokens']:.2f}" for k in LABELS if k in row) +
                    " CPU ms/token", file=sys.stderr, flush=True)
            results.append(res)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    report = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "cpu": cpu,
              "machine": platform.machine(), "threads": args.threads, "batch": args.batch,
              "llamapy_isa_env": os.environ.get("LLAMAPY_ISA", ""), "text": os.path.relpath(args.text, ROOT),
              "root": args.root, "commit": subprocess.run(["git", "-C", args.root, "rev-parse", "--short", "HEAD"],
                                                          capture_output=True, text=True).stdout.strip(),
              "results": results}
    os.makedirs(OUT, exist_ok=True)
    path = args.json or os.path.join(OUT, f"perplexity-{dt.datetime.now():%Y%m%d-%H%M%S}.json")
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
    print(f"{cpu}, -t {args.threads}, -b {args.batch}, llamapy ISA {results[0]['reps'][0]['active_isa']}; "
          f"CPU time (user + system) is the primary figure, wall secondary (shared machine)")
    print(table(results))
    for res in results:
        r = res["reps"][-1]
        print(f"{res['model']} -c {res['n_ctx']}: PPL llamapy {r['ppl_llamapy']:.4f}, CLI {r['ppl_cli']:.4f}, "
              f"llama.cpp {r.get('ppl_llama_cpp', float('nan')):.4f} (its first pass: "
              f"{r.get('lpp_seconds_per_pass')} s wall)")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
