"""Serving benchmark: llamapy's server vs llama-server vs llama-cpp-python's
server, side by side, at 1, 2, 4 and 8 concurrent streaming clients.

Every server is started once per model (each on its own loopback port, all
loaded at the same time, so that rounds can alternate between them); then,
for each number of clients and each round, the servers take turns
(A B C A B C ...): N clients at once each send one streaming
/v1/completions request (a different prompt per client, greedy,
max_tokens = -n) and read it to the end. Per request: time to first token
(TTFT: the first chunk with text) and total time; per round: aggregate
generation throughput = completion tokens of all clients / the round's wall
time. Medians and p95 over every request of every round are reported.

    python benchmarks/server.py --models gemma --clients 1,2,4,8 --rounds 3 \\
        --llama-server /path/to/llama-server --lcp-site /path/to/llama-cpp-python-site

  --llama-server: a llama-server binary (build it from the llama.cpp sources in
      llama-cpp-python's sdist: cmake -B b vendor/llama.cpp -DLLAMA_CURL=OFF &&
      cmake --build b --target llama-server); without it that side is skipped.
  --lcp-site: a folder holding llama_cpp (llama-cpp-python) and its server's
      dependencies (starlette-context, pydantic-settings), put on PYTHONPATH of
      its server process only; without it that side is skipped.

Each server gets the same context: -c (default 4096) cells in all, --parallel
slots (default 4). llama-server divides -c between its slots; llamapy shares
one pool; llama-cpp-python's server has one slot and serialises requests
(started with --interrupt_requests False: by default a new request ends the
running stream early).
Tokens are counted as the chunks that carry text (one token each on all three
servers for these prompts; the usage block is not streamed by all of them).
Writes benchmarks/out/server-<time>.json and prints a markdown table.
Neither llama.cpp nor llama-cpp-python is ever a dependency of llamapy.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
if os.environ.get("LLAMAPY_BENCH_INSTALLED") != "1":  # the checkout under test, unless told otherwise
    sys.path.insert(0, ROOT)

PROMPTS = [
    "The history of the printing press begins",
    "A recipe for bread needs flour, water and",
    "In the middle of the ocean there is an island where",
    "The first rule of writing good software is",
    "When the train left the station, the old man",
    "Mountains are formed when tectonic plates",
    "The best way to learn a new language is",
    "On a cold winter morning the village woke up to",
]


def model_path(name: str) -> str:
    if name == "gemma":
        from llamapy.default_model import default_model_path

        return default_model_path()
    if name in ("llama1b-q4_k_m", "llama1b-q8_0"):
        from synthetic_models import write_llama_1b

        out = os.path.join(HERE, "out")
        os.makedirs(out, exist_ok=True)
        mix = "Q4_K_M" if name.endswith("q4_k_m") else "Q8_0"
        return write_llama_1b(os.path.join(out, f"llama1b-{mix}.gguf"), mix)
    return name  # a GGUF path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_command(impl: str, path: str, port: int, args) -> tuple:
    env = dict(os.environ)
    common = ["--host", "127.0.0.1", "--port", str(port)]
    if impl == "llamapy":
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        cmd = [sys.executable, "-m", "llamapy", "serve", "-m", path, "-c", str(args.ctx), "-np", str(args.parallel),
               "-t", str(args.threads), "-b", "512"] + common
    elif impl == "llama-server":
        cmd = [args.llama_server, "-m", path, "-c", str(args.ctx), "-np", str(args.parallel), "-t", str(args.threads),
               "-tb", str(args.threads), "-b", "512", "--no-webui"] + common
    elif impl == "llama-cpp-python":
        env["PYTHONPATH"] = args.lcp_site
        cmd = [sys.executable, "-m", "llama_cpp.server", "--model", path, "--n_ctx", str(args.ctx), "--n_threads",
               str(args.threads), "--n_batch", "512",
               # its default lets a new request cut the running stream short (the clients then count few
               # tokens and the aggregate means nothing): serialise instead, as its docs suggest for sharing
               "--interrupt_requests", "False"] + common
    else:
        raise ValueError(f"unknown server {impl}")
    return cmd, env


def wait_ready(port: int, proc: subprocess.Popen, timeout: float) -> None:
    import httpx

    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}")
        try:
            # llama-server answers /v1/models while it is still loading (and 503 to completions):
            # ready means /health is not 503 (llama-cpp-python's server has no /health: 404) and /v1/models is 200
            h = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0)
            r = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2.0)
            if h.status_code != 503 and r.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError("the server did not become ready in time")


async def one_request(client, url: str, prompt: str, n: int) -> dict:
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0.0, "stream": True, "seed": 0}
    t0 = time.perf_counter()
    ttft = None
    tokens = 0
    async with client.stream("POST", url, json=body) as r:
        if r.status_code != 200:
            text = (await r.aread()).decode(errors="replace")
            raise RuntimeError(f"HTTP {r.status_code}: {text[:200]}")
        async for line in r.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            choices = chunk.get("choices") or []
            if choices and choices[0].get("text"):
                tokens += 1
                if ttft is None:
                    ttft = time.perf_counter() - t0
    return {"ttft": ttft if ttft is not None else float("nan"), "total": time.perf_counter() - t0, "tokens": tokens}


async def one_round(port: int, n_clients: int, n: int, round_no: int) -> dict:
    import httpx

    url = f"http://127.0.0.1:{port}/v1/completions"
    limits = httpx.Limits(max_connections=n_clients + 2)
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0), limits=limits) as client:
        t0 = time.perf_counter()
        reqs = [one_request(client, url, f"{PROMPTS[(i + round_no) % len(PROMPTS)]} ({i})", n)
                for i in range(n_clients)]
        results = await asyncio.gather(*reqs)
        wall = time.perf_counter() - t0
    return {"wall": wall, "requests": results, "tokens": sum(r["tokens"] for r in results)}


def pct(xs: list, q: float) -> float:
    xs = sorted(x for x in xs if x == x)
    if not xs:
        return float("nan")
    k = min(len(xs) - 1, max(0, int(round(q * (len(xs) - 1)))))
    return xs[k]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="*", default=["gemma", "llama1b-q4_k_m"])
    ap.add_argument("--servers", default="llamapy,llama-server,llama-cpp-python")
    ap.add_argument("--clients", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=64, help="max_tokens per request")
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-np", "--parallel", type=int, default=4)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--llama-server", default=None)
    ap.add_argument("--lcp-site", default=None)
    ap.add_argument("--load-timeout", type=float, default=300.0)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    wanted = [s for s in args.servers.split(",") if s]
    servers = []
    for s in wanted:
        if s == "llama-server" and not (args.llama_server and os.path.exists(args.llama_server)):
            print("llama-server: no --llama-server binary given; skipped", file=sys.stderr)
            continue
        if s == "llama-cpp-python" and not args.lcp_site:
            print("llama-cpp-python: no --lcp-site given; skipped", file=sys.stderr)
            continue
        servers.append(s)
    clients = [int(x) for x in args.clients.split(",") if x]
    rows = []
    for name in args.models:
        path = model_path(name)
        procs = {}
        try:
            for s in servers:
                port = free_port()
                cmd, env = server_command(s, path, port, args)
                log = open(os.path.join(HERE, "out", f"server-{s}.log"), "w")
                procs[s] = (subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT), port, log)
            for s, (proc, port, _) in procs.items():
                wait_ready(port, proc, args.load_timeout)
                asyncio.run(one_round(port, 1, 8, 0))  # warm-up
            for nc in clients:
                samples = {s: {"ttft": [], "total": [], "tps": [], "tokens": 0} for s in procs}
                for rnd in range(args.rounds):
                    for s, (proc, port, _) in procs.items():
                        res = asyncio.run(one_round(port, nc, args.n, rnd))
                        d = samples[s]
                        d["ttft"] += [r["ttft"] for r in res["requests"]]
                        d["total"] += [r["total"] for r in res["requests"]]
                        d["tps"].append(res["tokens"] / res["wall"])
                        d["tokens"] += res["tokens"]
                for s, d in samples.items():
                    row = {"model": name, "server": s, "clients": nc, "rounds": args.rounds,
                           "ttft_p50": pct(d["ttft"], 0.5), "ttft_p95": pct(d["ttft"], 0.95),
                           "total_p50": pct(d["total"], 0.5), "total_p95": pct(d["total"], 0.95),
                           "agg_tps": statistics.median(d["tps"]), "tokens": d["tokens"]}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            for s, (proc, port, log) in procs.items():
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                log.close()

    out = args.json or os.path.join(HERE, "out", time.strftime("server-%Y%m%d-%H%M%S.json"))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    print("\n| model | server | clients | agg tok/s | vs 1 client | TTFT p50 / p95 (s) | total p50 / p95 (s) |")
    print("|---|---|---:|---:|---:|---|---|")
    for r in rows:
        one = next((x["agg_tps"] for x in rows if x["model"] == r["model"] and x["server"] == r["server"]
                    and x["clients"] == 1), float("nan"))
        print(f"| {r['model']} | {r['server']} | {r['clients']} | {r['agg_tps']:.1f} | {r['agg_tps'] / one:.2f}x | "
              f"{r['ttft_p50']:.2f} / {r['ttft_p95']:.2f} | {r['total_p50']:.2f} / {r['total_p95']:.2f} |")
    for m in args.models:
        for nc in clients:
            base = next((x for x in rows if x["model"] == m and x["server"] == "llamapy" and x["clients"] == nc), None)
            for other in ("llama-server", "llama-cpp-python"):
                o = next((x for x in rows if x["model"] == m and x["server"] == other and x["clients"] == nc), None)
                if base and o:
                    print(f"{m} {nc} clients: llamapy / {other} aggregate = {base['agg_tps'] / o['agg_tps']:.2f}x")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
