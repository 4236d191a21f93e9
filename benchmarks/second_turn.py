"""The second turn of a chat on a hybrid model (issue 34): the first turn evaluates a prompt and
generates a reply; the second sends the whole conversation so far plus a new user message.
llamapy resumes the recurrent state from the checkpoint at the end of what it evaluated and
evaluates only the new tokens; llama-cpp-python re-evaluates a hybrid model's prompt.

One fresh process per implementation (alternating --reps times): a -p token first prompt, -g
generated tokens (greedy), then a second prompt of the first + the reply + -q new tokens; the
second turn's time to its first token is reported with the time the same process takes for
the -q new tokens alone (the ideal: only they are evaluated) and for the whole second prompt
from scratch.

    python benchmarks/second_turn.py --models qwen35-4b --threads 2
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(impl: str, path: str, threads: int, p: int, g: int, q: int) -> dict:
    if impl == "llamapy":
        from llamapy import Llama
    else:
        from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=p + g + q + 64, n_batch=512, n_threads=threads, n_threads_batch=threads,
                verbose=False)
    first = [5 + (i * 7) % 200 for i in range(p)]
    new = [9 + (i * 11) % 200 for i in range(q)]
    out = llm.create_completion(first, max_tokens=g, temperature=0.0)
    reply = llm.tokenize(out["choices"][0]["text"].encode("utf-8"), add_bos=False)[:g]
    second = first + reply + new
    t0 = time.perf_counter()
    llm.create_completion(second, max_tokens=1, temperature=0.0)
    turn2 = time.perf_counter() - t0
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(second)
    scratch = time.perf_counter() - t0
    t0 = time.perf_counter()
    llm.eval(new)  # the new tokens alone, after the whole second prompt: the ideal cost
    ideal = time.perf_counter() - t0
    return {"turn2_s": turn2, "scratch_s": scratch, "new_only_s": ideal, "second_prompt_tokens": len(second)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["qwen35-4b"])
    ap.add_argument("--impls", nargs="*", default=["llamapy", "llama_cpp"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("-p", type=int, default=1024, help="first prompt tokens")
    ap.add_argument("-g", type=int, default=32, help="tokens generated in the first turn")
    ap.add_argument("-q", type=int, default=64, help="new tokens in the second prompt")
    ap.add_argument("--worker", nargs=2, metavar=("IMPL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.threads, args.p, args.g, args.q)))
        return 0
    sys.path.insert(0, HERE)
    from generation import model_paths

    paths = model_paths(args.models)
    for name, path in paths.items():
        runs = {i: [] for i in args.impls}
        for _ in range(args.reps):
            for impl in args.impls:
                cmd = [sys.executable, __file__, "--worker", impl, path, "--threads", str(args.threads),
                       "-p", str(args.p), "-g", str(args.g), "-q", str(args.q)]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"{impl} failed:\n{r.stderr[-2000:]}")
                runs[impl].append(json.loads(r.stdout.strip().splitlines()[-1]))
        print(f"{name}: first prompt {args.p}, reply {args.g}, {args.q} new tokens; {args.threads} threads; "
              f"medians of {args.reps} (seconds)")
        for impl, rs in runs.items():
            med = {k: statistics.median(x[k] for x in rs) for k in ("turn2_s", "scratch_s", "new_only_s")}
            print(f"  {impl:10s} second turn {med['turn2_s']:7.3f}   new tokens alone {med['new_only_s']:7.3f}   "
                  f"whole second prompt {med['scratch_s']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
