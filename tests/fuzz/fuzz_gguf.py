"""Deterministic mutation fuzzer for the GGUF reader.

Builds a few valid GGUF files with gguf.GGUFWriter, mutates them (bit flips,
bytes set to 0x00/0xff, forged u32/u64 values at field positions,
truncations, insertions, deletions, duplicated chunks) and opens every mutant
through llamapy.GGUFFile, touching all metadata, every tensor view and the
inspect command. Any exception other than GGUFError is a failure; mutants run
in batches in a child process so a crash (signal) or hang is caught and
pinned to the mutant that caused it. Mutant i depends only on (seed, i).

    python tests/fuzz/fuzz_gguf.py --n 10000 --seed 0 [--out DIR]
    python tests/fuzz/fuzz_gguf.py --seed 0 --only 1234     # replay one mutant

Not here: the fixed regression cases (tests/test_gguf_malformed.py).
"""
from __future__ import annotations

import argparse
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/: gguf_samples

from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import GGUFValueType as VT  # noqa: E402

import gguf_samples as samples  # noqa: E402

INTERESTING_U64 = [0, 1, 2, 3, 4, 7, 8, 31, 32, 33, 64, 255, 256, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF,
                   2**32, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------
def build_bases(tmp: Path) -> List[bytes]:
    """A few valid files: all value types + tensors, a vocabulary with custom
    alignment, and a minimal quantized one."""
    vocab = [("tokenizer.ggml.tokens", [f"t{i}" for i in range(1500)], VT.ARRAY, VT.STRING),
             ("tokenizer.ggml.scores", [float(i) for i in range(1500)], VT.ARRAY, VT.FLOAT32),
             ("tokenizer.ggml.model", "llama", VT.STRING, None)]
    tensors = samples.sample_tensors(1)
    paths = [
        samples.write_with_gguf(tmp / "all.gguf", samples.ALL_TYPES_METADATA, samples.sample_tensors(0)),
        samples.write_with_gguf(tmp / "vocab.gguf", vocab, tensors[:3], alignment=64),
        samples.write_with_gguf(tmp / "min.gguf", [], [t for t in tensors if t[2] == QT.Q8_0]),
    ]
    return [p.read_bytes() for p in paths]


def mutate(rng: random.Random, base: bytes, spans: List[Tuple[int, int]]) -> bytes:
    """Apply 1 to 4 random mutations to a copy of `base`."""
    data = bytearray(base)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        if not data:
            break
        kind = rng.randrange(8)
        pos = rng.randrange(len(data))
        if kind == 0:  # bit flip
            data[pos] ^= 1 << rng.randrange(8)
        elif kind == 1:  # byte to 0x00 / 0xff
            data[pos] = rng.choice((0x00, 0xFF))
        elif kind in (2, 3):  # forged integer at a field
            at, width = rng.choice(spans)
            value = rng.choice(INTERESTING_U64 + [len(data), len(data) - at, rng.getrandbits(64)])
            value += rng.choice((0, 0, 0, 1, -1))
            value &= (1 << (8 * width)) - 1
            data[at:at + width] = value.to_bytes(width, "little")[: max(0, len(data) - at)]
        elif kind == 4:  # truncation
            del data[pos:]
        elif kind == 5:  # insertion
            data[pos:pos] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 16)))
        elif kind == 6:  # deletion
            del data[pos:pos + rng.randint(1, 16)]
        else:  # duplicated chunk
            n = rng.randint(1, 32)
            data[pos:pos] = data[pos:pos + n]
    return bytes(data)


def make_mutant(seed: int, index: int, bases: List[bytes], spans: List[List[Tuple[int, int]]]) -> bytes:
    rng = random.Random(f"gguf-fuzz-{seed}-{index}")
    which = rng.randrange(len(bases))
    return mutate(rng, bases[which], spans[which])


# ---------------------------------------------------------------------------
# Exercising one mutant
# ---------------------------------------------------------------------------
def touch_value(value) -> None:
    from llamapy.gguf_file import GGUFArray

    if isinstance(value, GGUFArray):
        n = len(value)
        if n:
            touch_value(value[0])
            touch_value(value[-1])
            touch_value(value[n // 2: n // 2 + 64])
        if value.elem_type not in ("string", "array"):
            value.numpy().sum()
    elif isinstance(value, list):
        for v in value:
            touch_value(v)
    else:
        str(value)


def exercise(path: Path) -> str:
    """Open and walk one file; 'ok' or 'error' (GGUFError). Anything else raises."""
    import llamapy
    from llamapy.inspect_cmd import run_inspect

    try:
        with llamapy.GGUFFile(path) as f:
            for value in f.metadata.values():
                touch_value(value)
            f.architecture
            for t in f.tensors:
                view = f.tensor(t.name)
                raw = view.reshape(-1).view("uint8") if view.size else view
                int(raw.sum()) if raw.size else None
        llamapy._engine.GGUFReader.from_bytes(path.read_bytes()).metadata()
    except llamapy.GGUFError:
        if run_inspect(str(path), out=io.StringIO()) != 1:
            raise AssertionError("inspect did not report the GGUFError")
        return "error"
    if run_inspect(str(path), out=io.StringIO()) != 0:
        raise AssertionError("inspect failed on a file that opens")
    return "ok"


# ---------------------------------------------------------------------------
# Worker (child process) and driver
# ---------------------------------------------------------------------------
def run_worker(seed: int, start: int, count: int, crash_at: int = -1) -> int:
    """Child: run mutants [start, start+count), one stdout line per event:
    'S i' (starting i), 'R ok' / 'R error' (i's result), 'F {json}' (failure)."""
    with tempfile.TemporaryDirectory(prefix="gguf-fuzz-") as tmp_name:
        tmp = Path(tmp_name)
        bases = build_bases(tmp)
        spans = [samples.field_spans(b) for b in bases]
        for k, base in enumerate(bases):  # the unmutated inputs must read cleanly
            (tmp / "base.gguf").write_bytes(base)
            if exercise(tmp / "base.gguf") != "ok":
                raise SystemExit(f"base file {k} does not open")
        for i in range(start, start + count):
            print(f"S {i}", flush=True)
            if i == crash_at:  # self-test of the crash detection
                os.kill(os.getpid(), signal.SIGSEGV)
            path = tmp / f"m{i}.gguf"
            path.write_bytes(make_mutant(seed, i, bases, spans))
            try:
                print(f"R {exercise(path)}", flush=True)
            except Exception as e:  # noqa: BLE001 — every non-GGUFError is a finding
                failure = {"index": i, "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc(limit=4)}
                print("F " + json.dumps(failure), flush=True)
            path.unlink()
    print("DONE", flush=True)
    return 0


def run_batch(seed: int, start: int, count: int, timeout: float, crash_at: int = -1) -> Tuple[Dict, Optional[Dict]]:
    """Run mutants [start, start+count) in a child. Returns (result, crash):
    result has the counts and failures of the mutants that finished, crash
    (or None) names the mutant that killed or hung the child."""
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--seed", str(seed),
           "--start", str(start), "--n", str(count), "--crash-at", str(crash_at)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        out, rc, err = proc.stdout, proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc, err = None, "timeout"
    result: Dict = {"counts": {"ok": 0, "error": 0}, "failures": [], "last": start - 1}
    done = False
    for line in out.splitlines():
        if line.startswith("S "):
            result["last"] = int(line[2:])
        elif line.startswith("R "):
            result["counts"][line[2:]] += 1
        elif line.startswith("F "):
            result["failures"].append(json.loads(line[2:]))
        elif line == "DONE":
            done = True
    if done and rc == 0:
        return result, None
    how = "hang (timeout)" if rc is None else (f"signal {signal.Signals(-rc).name}" if rc < 0 else f"exit {rc}")
    return result, {"index": max(result["last"], start), "how": how, "stderr": err[-2000:]}


def drive(n: int, seed: int, batch: int, out_dir: Optional[Path], timeout: float, quiet: bool,
          crash_at: int = -1) -> int:
    totals = {"ok": 0, "error": 0}
    failures: List[Dict] = []
    crashes: List[Dict] = []
    t0 = time.time()
    i = 0
    while i < n:
        count = min(batch, n - i)
        result, crash = run_batch(seed, i, count, timeout, crash_at)
        for k in totals:
            totals[k] += result["counts"][k]
        failures.extend(result["failures"])
        if crash:
            crashes.append(crash)
            i = crash["index"] + 1  # resume after the mutant that crashed the child
        else:
            i += count
        if not quiet:
            print(f"[{i}/{n}] ok={totals['ok']} gguf_error={totals['error']} failures={len(failures)} "
                  f"crashes={len(crashes)} ({time.time() - t0:.1f} s)", flush=True)
    save_findings(seed, failures + crashes, out_dir)
    for f in failures:
        print(f"FAILURE mutant {f['index']}: {f['error']}\n{f['trace']}")
    for c in crashes:
        print(f"CRASH mutant {c['index']}: {c['how']}\n{c['stderr']}")
    print(json.dumps({"n": n, "seed": seed, "ok": totals["ok"], "gguf_error": totals["error"],
                      "failures": len(failures), "crashes": len(crashes), "seconds": round(time.time() - t0, 1)}))
    return 1 if failures or crashes else 0


def save_findings(seed: int, findings: List[Dict], out_dir: Optional[Path]) -> None:
    if not out_dir or not findings:
        return
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        bases = build_bases(Path(tmp))
        spans = [samples.field_spans(b) for b in bases]
        for f in findings:
            (out_dir / f"seed{seed}-mutant{f['index']}.gguf").write_bytes(make_mutant(seed, f["index"], bases, spans))


def replay(seed: int, index: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        bases = build_bases(Path(tmp))
        spans = [samples.field_spans(b) for b in bases]
        path = Path(tmp) / "mutant.gguf"
        path.write_bytes(make_mutant(seed, index, bases, spans))
        print(exercise(path))
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=10000, help="number of mutants")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--batch", type=int, default=1000, help="mutants per child process")
    p.add_argument("--timeout", type=float, default=300, help="seconds a batch may take")
    p.add_argument("--out", type=Path, help="save failing and crashing mutants here")
    p.add_argument("--only", type=int, help="replay one mutant in this process")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--crash-at", type=int, default=-1, help=argparse.SUPPRESS)  # self-test
    args = p.parse_args(argv)
    if args.worker:
        return run_worker(args.seed, args.start, args.n, args.crash_at)
    if args.only is not None:
        return replay(args.seed, args.only)
    return drive(args.n, args.seed, args.batch, args.out, args.timeout, args.quiet, args.crash_at)


if __name__ == "__main__":
    sys.exit(main())
