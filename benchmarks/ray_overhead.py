"""What Ray costs (issue 36): embeddings on Ray Data against a direct loop, and chat through
Ray Serve against the plain server.

Embeddings: all-MiniLM-L6-v2 (F32 GGUF, converted as benchmarks/embeddings.py converts it) over
-n synthetic sentences (default 10,000), batches of 32:
- direct: one process, one ``Llama`` with 1 thread (``n_threads`` and ``n_threads_batch``: the
  batches run on the latter, which would otherwise be every core), ``embed`` per batch of 32;
- ray-1 / ray-2: ``llamapy.ray.embed`` with 1 and 2 actors of 1 CPU each (1 thread each, both
  counts: the actors set them from their CPUs) on a
  local Ray (``ray.init(num_cpus=actors + 1)``, started before the clock: a job on a running
  cluster does not pay for it). The clock covers the dataset's creation to its last row, so
  the actors' start and model load are inside it, as the direct side's load is inside its own.
Overhead at one actor = ray-1 / direct - 1 (issue 36's target: under 10 %).

Chat (--chat, needs the server extra and Gemma 3 270M from the demo extra): -r sequential
greedy /v1/chat/completions requests (max_tokens 32) to ``llamapy serve`` (a subprocess) and to
one Ray Serve replica of the same app (``serve_app``), both with -t 1 -c 2048; medians.

    python benchmarks/ray_overhead.py -n 10000 --chat -r 20

Each side runs --reps times, alternating; medians are printed as JSON. The numbers need a
quiet machine: on a shared one read them as indicative only.
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
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from embeddings import gguf_model, sentences  # noqa: E402


def direct(model: str, texts: list, batch: int) -> float:
    from llamapy import Llama

    t0 = time.perf_counter()
    llm = Llama(model, embedding=True, n_threads=1, n_threads_batch=1, verbose=False)
    for i in range(0, len(texts), batch):
        llm.embed(texts[i:i + batch])
    dt = time.perf_counter() - t0
    llm.close()
    return dt


def on_ray(model: str, texts: list, batch: int, actors: int) -> float:
    import ray

    import llamapy.ray as lr

    t0 = time.perf_counter()
    ds = ray.data.from_items([{"text": t} for t in texts])
    n = lr.embed(ds, model=model, actors=actors, cpus_per_actor=1, batch_size=batch).count()
    dt = time.perf_counter() - t0
    assert n == len(texts)
    return dt


def embeddings(args: argparse.Namespace) -> dict:
    import ray

    model = gguf_model("f32")
    texts = sentences(args.n)
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": REPO}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    times: dict = {"direct": [], "ray-1": [], "ray-2": []}
    for _ in range(args.reps):
        times["direct"].append(direct(model, texts, args.batch))
        times["ray-1"].append(on_ray(model, texts, args.batch, 1))
        times["ray-2"].append(on_ray(model, texts, args.batch, 2))
    ray.shutdown()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"sentences": args.n, "seconds": med, "sentences_per_s": {k: args.n / v for k, v in med.items()},
            "overhead_1_actor": med["ray-1"] / med["direct"] - 1, "speedup_2_actors": med["ray-1"] / med["ray-2"]}


def chat_latencies(url: str, n: int) -> list:
    import httpx

    body = {"messages": [{"role": "user", "content": "Name three planets."}], "max_tokens": 32, "temperature": 0}
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        r.raise_for_status()
        out.append(time.perf_counter() - t0)
    return out


def wait_ready(url: str) -> None:
    import httpx

    for _ in range(600):
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not become ready")


def chat(args: argparse.Namespace) -> dict:
    import ray
    from ray import serve

    import llamapy.ray as lr
    from llamapy.default_model import default_model_path

    model = default_model_path()
    flags = ["-m", model, "-t", "1", "-c", "2048"]
    plain = subprocess.Popen([sys.executable, "-m", "llamapy", "serve", *flags, "--port", "8931"],
                             env={**os.environ, "PYTHONPATH": REPO}, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": REPO}})
    serve.start(http_options={"host": "127.0.0.1", "port": 8932})
    serve.run(lr.serve_app(model, threads=1, ctx_size=2048), name="bench", route_prefix="/")
    try:
        wait_ready("http://127.0.0.1:8931")
        lat: dict = {"plain": [], "serve": []}
        for _ in range(args.reps):
            lat["plain"] += chat_latencies("http://127.0.0.1:8931", args.requests)
            lat["serve"] += chat_latencies("http://127.0.0.1:8932", args.requests)
    finally:
        plain.terminate()
        plain.wait(30)
        serve.shutdown()
        ray.shutdown()
    med = {k: statistics.median(v) for k, v in lat.items()}
    return {"requests": len(lat["plain"]), "median_s": med, "overhead": med["serve"] / med["plain"] - 1}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=10000, help="sentences (default 10000)")
    p.add_argument("--batch", type=int, default=32, help="rows per batch (default 32)")
    p.add_argument("--reps", type=int, default=1, help="repetitions per side, alternating (default 1)")
    p.add_argument("--chat", action="store_true", help="also chat through Serve against the plain server")
    p.add_argument("-r", "--requests", type=int, default=20, help="chat requests per side and rep (default 20)")
    p.add_argument("--no-embeddings", action="store_true", help="skip the embeddings part")
    args = p.parse_args()
    result = {}
    if not args.no_embeddings:
        result["embeddings"] = embeddings(args)
    if args.chat:
        result["chat"] = chat(args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
