"""What Ray costs (issue 36): embeddings on Ray Data against a direct loop, phase by phase, and
chat through Ray Serve against the plain server.

Embeddings: all-MiniLM-L6-v2 (F32 GGUF, converted as benchmarks/embeddings.py converts it) over
-n synthetic sentences (default 10,000), batches of --batch (default 32). Every side is a fresh
process, so each pays its own imports:
- direct: ``import llamapy``, one ``Llama`` with 1 thread (``n_threads`` and
  ``n_threads_batch``), ``embed`` per batch; phases import, load, embed.
- ray-1 / ray-2: ``llamapy.ray``'s Embedder on an actor pool of 1 and 2 actors of 1 CPU each (1
  thread each) on a local Ray (``ray.init(num_cpus=actors + 1)``), the embeddings collected
  into the driver as one (n, 384) float32 array. Driver phases: import (ray, llamapy.ray),
  ray.init, then the job: dataset creation (``from_items``) to the last result in hand, then
  collect (the array), shutdown. The actor is the Embedder wrapped by ``TimedEmbedder``
  (below), which logs its own phases to a file: process start (the worker's create time),
  ``import llamapy.ray.batch`` (what the Embedder's module needs), model load, each batch
  (wall and CPU, and the part spent in ``Llama.embed``; the rest is the batch's conversion).
The job's clock (dataset creation to the last result) holds the actors' start and model
load, as the direct side's clock holds its import and load; ray.init and shutdown are
reported beside it (a job on a running cluster does not pay them).
Overhead at one actor = ray-1 job / direct - 1 (issue 36's target: under 10 %), in wall
seconds; on a loaded machine also read the CPU seconds: the actor's own (import, load,
batches) against the direct process's, and the driver's and Ray's other processes' CPU during
the job (psutil; processes that exit before the end are not counted).

Chat (--chat, needs the server extra and Gemma 3 270M from the demo extra): -r sequential
greedy /v1/chat/completions requests (max_tokens 32) to ``llamapy serve`` (a subprocess) and to
one Ray Serve replica of the same app (``serve_app``), both with -t 1 -c 2048; medians.

    python benchmarks/ray_overhead.py -n 10000 --reps 3
    python benchmarks/ray_overhead.py -n 10000 --chat -r 20

Each side runs --reps times, alternating; medians are printed as JSON (--phases: every run's
phases too). The wall-clock numbers need a quiet machine: on a shared one read the CPU seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)

from embeddings import gguf_model, sentences  # noqa: E402


class Clock:
    """Wall and CPU seconds of this process per named phase (each mark ends one)."""

    def __init__(self) -> None:
        self.phases: dict = {}
        self.wall, self.cpu = time.time(), time.process_time()

    def mark(self, name: str) -> float:
        wall, cpu = time.time(), time.process_time()
        self.phases[name] = {"wall": wall - self.wall, "cpu": cpu - self.cpu}
        self.wall, self.cpu = wall, cpu
        return wall


def direct_worker(model: str, n: int, batch: int) -> dict:
    texts = sentences(n)
    clock = Clock()
    from llamapy import Llama

    clock.mark("import")
    llm = Llama(model, embedding=True, n_threads=1, n_threads_batch=1, verbose=False)
    clock.mark("load")
    out = []
    for i in range(0, len(texts), batch):
        out.extend(llm.embed(texts[i:i + batch]))
    clock.mark("embed")
    llm.close()
    assert len(out) == n
    return {"phases": clock.phases, "job": {k: sum(p[k] for p in clock.phases.values()) for k in ("wall", "cpu")}}


class TimedEmbedder:
    """llamapy.ray's Embedder, timed: appends its phases to ``log_dir``/actor-PID.jsonl (a line
    per event; the file write is the only work added per batch). Its module is this script,
    pickled by value, so the actor imports llamapy only inside ``__init__``, where it is timed."""

    batch_format = "pandas"  # set to the Embedder's by ray_worker (this module does not import llamapy)

    def __init__(self, log_dir: str, embedder_kwargs: dict) -> None:
        wall, cpu = time.time(), time.process_time()
        import psutil

        self.log = open(os.path.join(log_dir, f"actor-{os.getpid()}.jsonl"), "a")
        self.event(event="init", wall=wall, cpu=cpu, process_start=psutil.Process().create_time(),
                   llamapy_imported_before="llamapy" in sys.modules)
        from llamapy.ray.batch import Embedder

        import llamapy

        self.event(event="imported", wall=time.time(), cpu=time.process_time(), llamapy=llamapy.__file__)
        self.inner = Embedder(**embedder_kwargs)
        self.event(event="loaded", wall=time.time(), cpu=time.process_time())
        # The CPU spent embedding (the Embedder's one call per batch; Llama.embed inside its
        # row-by-row fallback, taken only when a row fails, is not counted: none fails here).
        self.embed_cpu = 0.0
        embed = self.inner.vectors

        def timed_vectors(texts):
            c = time.process_time()
            try:
                return embed(texts)
            finally:
                self.embed_cpu += time.process_time() - c

        self.inner.vectors = timed_vectors

    def event(self, **fields) -> None:
        self.log.write(json.dumps(fields) + "\n")
        self.log.flush()

    def __call__(self, batch):
        wall, cpu, embed_cpu = time.time(), time.process_time(), self.embed_cpu
        out = self.inner(batch)
        end_cpu = time.process_time()
        self.event(event="batch", start=wall, end=time.time(), cpu=end_cpu - cpu, cpu_total=end_cpu,
                   embed_cpu=self.embed_cpu - embed_cpu, rows=len(batch))
        return out


def ray_cpu(exclude: set) -> float:
    """CPU seconds so far of this driver's descendants (Ray's GCS, raylet, workers) but ``exclude``."""
    import psutil

    total = 0.0
    for p in psutil.Process().children(recursive=True):
        try:
            if p.pid not in exclude:
                t = p.cpu_times()
                total += t.user + t.system
        except psutil.Error:
            pass
    return total


def settle(limit_s: float = 60.0) -> float:
    """Waits until Ray's processes are idle (under 0.1 CPU second per second, as on a running
    cluster between jobs); the seconds waited."""
    t0 = time.time()
    last = ray_cpu(set())
    while time.time() - t0 < limit_s:
        time.sleep(1.0)
        now = ray_cpu(set())
        if now - last < 0.1:
            break
        last = now
    return time.time() - t0


def warm_up() -> None:
    """A tiny Ray Data job that does not touch llamapy: Ray Data's per-cluster actors (the
    stats actor, the autoscaling coordinator; both detached) start, as they would have on a
    cluster that ran a Data job before."""
    import ray

    assert ray.data.range(4).map_batches(lambda b: b, batch_size=2).count() == 4


def actor_phases(path: str, job_start: float) -> dict:
    """One actor's log as phases: the times are seconds from the job's start."""
    events = [json.loads(line) for line in open(path)]
    init, imported, loaded = (next(e for e in events if e["event"] == k) for k in ("init", "imported", "loaded"))
    batches = [e for e in events if e["event"] == "batch"]
    steady = batches[1:] or batches
    return {
        "process_start_at": init["process_start"] - job_start,
        "init_at": init["wall"] - job_start,
        "llamapy_imported_before_init": init["llamapy_imported_before"],
        "llamapy": imported["llamapy"],
        "import": {"wall": imported["wall"] - init["wall"], "cpu": imported["cpu"] - init["cpu"]},
        "load": {"wall": loaded["wall"] - imported["wall"], "cpu": loaded["cpu"] - imported["cpu"]},
        "cpu_before_init": init["cpu"],  # the worker's own start and Ray Data's imports in it
        "first_batch_at": batches[0]["start"] - job_start,
        "first_batch": {"wall": batches[0]["end"] - batches[0]["start"], "cpu": batches[0]["cpu"]},
        "batches": len(batches), "rows": sum(b["rows"] for b in batches),
        "batch_wall_mean": statistics.mean(b["end"] - b["start"] for b in steady),
        "batch_cpu_mean": statistics.mean(b["cpu"] for b in steady),
        "batch_cpu_outside_embed_mean": statistics.mean(b["cpu"] - b["embed_cpu"] for b in steady),
        "batches_cpu": sum(b["cpu"] for b in batches),
        # the actor's CPU between our calls once loaded: Ray Data's per-task work (block to batch,
        # batch to block, the object store)
        "ray_tasks_cpu": batches[-1]["cpu_total"] - loaded["cpu"] - sum(b["cpu"] for b in batches),
        "total_cpu": batches[-1]["cpu_total"],  # from the worker process's start to its last batch
        "between_batches_wall": sum(b["start"] - a["end"] for a, b in zip(batches, batches[1:])),
        "last_batch_end_at": batches[-1]["end"] - job_start,
    }


def ray_worker(model: str, n: int, batch: int, actors: int, warm: bool) -> dict:
    texts = sentences(n)
    clock = Clock()
    import numpy as np
    import ray

    from llamapy.ray.batch import Embedder, map_with

    clock.mark("import")
    TimedEmbedder.batch_format = Embedder.batch_format
    ray.init(num_cpus=actors + 1, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": REPO}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    clock.mark("ray.init")
    if warm:
        warm_up()
        settle()
        clock.mark("warm-up")
    with tempfile.TemporaryDirectory() as log_dir:
        ray_cpu_0 = ray_cpu(set())
        job_start = clock.wall
        ds = ray.data.from_items([{"text": t} for t in texts])
        clock.mark("dataset")
        out = map_with(ds, TimedEmbedder, dict(log_dir=log_dir, embedder_kwargs=dict(model=model)),
                          actors=actors, cpus_per_actor=1, batch_size=batch)
        parts, first = [], None
        for b in out.iter_batches(batch_size=None, batch_format="pyarrow"):
            first = first or time.time()
            assert b.column("error").null_count == len(b)
            parts.append(b.column("embedding"))
        clock.mark("run")
        pids = {int(f[6:-6]) for f in os.listdir(log_dir)}
        others_cpu = ray_cpu(pids) - ray_cpu_0
        vectors = np.concatenate([np.stack(c.to_numpy(zero_copy_only=False)) for p in parts for c in p.chunks])
        clock.mark("collect")
        assert vectors.shape[0] == n
        acts = [actor_phases(os.path.join(log_dir, f), job_start) for f in sorted(os.listdir(log_dir))]
        import llamapy

        assert all(a["llamapy"] == llamapy.__file__ for a in acts), "an actor imported another llamapy"
    ray.shutdown()
    clock.mark("shutdown")
    job = {k: sum(clock.phases[p][k] for p in ("dataset", "run", "collect")) for k in ("wall", "cpu")}
    return {"phases": clock.phases, "job": job, "first_result_at": first - job_start, "actors": acts, "warm": warm,
            "ray_others_cpu": others_cpu}


def run_side(args: argparse.Namespace, side: str) -> dict:
    cmd = [sys.executable, __file__, "--worker", side, "-n", str(args.n), "--batch", str(args.batch)] + (
        ["--warm"] if args.warm else [])
    # In REPO: Ray's workers put the driver's working directory first on sys.path, so a llamapy
    # there (another checkout) would shadow this one.
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": REPO}, cwd=REPO)
    if r.returncode != 0:
        raise SystemExit(f"{side} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def embeddings(args: argparse.Namespace) -> dict:
    gguf_model("f32")
    sides = tuple(args.sides.split(","))
    runs: dict = {s: [] for s in sides}
    for rep in range(args.reps):
        for side in sides:
            runs[side].append(run_side(args, side))
            job = runs[side][-1]["job"]
            print(f"rep {rep + 1} {side:7s} job {job['wall']:6.2f} s wall, {job['cpu']:6.2f} s CPU of the "
                  f"{'process' if side == 'direct' else 'driver'}", file=sys.stderr, flush=True)
    med = {s: statistics.median(r["job"]["wall"] for r in runs[s]) for s in sides}
    result = {"sentences": args.n, "batch": args.batch, "warm_cluster": args.warm, "job_seconds": med,
              "sentences_per_s": {s: args.n / v for s, v in med.items()}}
    result["median_phases"] = {s: median_phases(runs[s]) for s in sides}
    if args.phases:
        result["runs"] = runs
    if "direct" not in sides or "ray-1" not in sides:
        return result
    result["overhead_1_actor"] = med["ray-1"] / med["direct"] - 1
    if "ray-2" in sides:
        result["speedup_2_actors"] = med["direct"] / med["ray-2"]
    direct_cpu = statistics.median(r["job"]["cpu"] for r in runs["direct"])
    one = [r["actors"][0] for r in runs["ray-1"]]
    actor_cpu = statistics.median(a["total_cpu"] for a in one)
    result["cpu_seconds"] = {"direct": direct_cpu, "ray-1 actor (process start to last batch)": actor_cpu,
                             "ray-1 driver (job)": statistics.median(r["job"]["cpu"] for r in runs["ray-1"]),
                             "ray-1 Ray's other processes (job)": statistics.median(r["ray_others_cpu"]
                                                                                     for r in runs["ray-1"]),
                             "overhead_1_actor (actor / direct - 1)": actor_cpu / direct_cpu - 1}
    return result


def median_phases(runs: list) -> dict:
    """Medians over runs of every number in the first actor's and the driver's phases."""
    def med(get):
        return round(statistics.median(get(r) for r in runs), 4)

    out = {"driver": {p: {k: med(lambda r: r["phases"][p][k]) for k in ("wall", "cpu")} for p in runs[0]["phases"]}}
    if "actors" in runs[0]:
        a0 = runs[0]["actors"][0]
        actor = {}
        for key, value in a0.items():
            if isinstance(value, dict):
                actor[key] = {k: med(lambda r: r["actors"][0][key][k]) for k in value}
            elif isinstance(value, (bool, str)):
                actor[key] = value
            else:
                actor[key] = med(lambda r: r["actors"][0][key])
        out["actor"] = actor
        out["first_result_at"] = med(lambda r: r["first_result_at"])
    return out


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
    p.add_argument("--phases", action="store_true", help="also print every run's phases")
    p.add_argument("--sides", default="direct,ray-1,ray-2", help="which sides to run (default all three)")
    p.add_argument("--warm", action="store_true", help="a job on a warm cluster: before the clock, a tiny Ray Data "
                   "job (Ray Data's per-cluster actors start) and a wait until Ray's processes are idle")
    p.add_argument("--worker", choices=["direct", "ray-1", "ray-2"], help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        model = gguf_model("f32")
        if args.worker == "direct":
            got = direct_worker(model, args.n, args.batch)
        else:
            got = ray_worker(model, args.n, args.batch, int(args.worker[4:]), args.warm)
        print(json.dumps(got))
        return 0
    result = {}
    if not args.no_embeddings:
        result["embeddings"] = embeddings(args)
    if args.chat:
        result["chat"] = chat(args)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
