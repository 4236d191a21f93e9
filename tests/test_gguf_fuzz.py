"""GGUF reader: a small deterministic run of the mutation fuzzer
(tests/fuzz/fuzz_gguf.py) in child processes — no mutant may crash the
process or raise anything but GGUFError. The full run is
`python tests/fuzz/fuzz_gguf.py --n 10000 --seed 0`.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import llamapy

FUZZER = Path(__file__).resolve().parent / "fuzz" / "fuzz_gguf.py"


def run_fuzzer(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    # the children must import the same llamapy as this process
    package_root = str(Path(llamapy.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, str(FUZZER), "--quiet", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_fuzz_sample_has_no_failures_or_crashes(tmp_path):
    proc = run_fuzzer("--n", "500", "--seed", "1", "--batch", "250", "--out", str(tmp_path / "findings"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["failures"] == 0 and summary["crashes"] == 0
    assert summary["ok"] + summary["gguf_error"] == 500
    assert summary["ok"] > 0 and summary["gguf_error"] > 0  # the mutants exercise both paths


def test_fuzzer_detects_and_pins_a_crash(tmp_path):
    proc = run_fuzzer("--n", "40", "--seed", "1", "--batch", "20", "--crash-at", "27", "--out", str(tmp_path))
    assert proc.returncode == 1
    assert "CRASH mutant 27: signal SIGSEGV" in proc.stdout
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["crashes"] == 1 and summary["ok"] + summary["gguf_error"] == 39
    assert (tmp_path / "seed1-mutant27.gguf").exists()
