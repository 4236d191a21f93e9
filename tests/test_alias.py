"""llamapy.install_as_llama_cpp(): libraries that import llama_cpp themselves
run on llamapy (in a fresh interpreter, so this process's modules stay as they are)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import llamapy

SCRIPT = r'''
import sys, llamapy
assert "llama_cpp" not in sys.modules          # nothing is aliased on import
llamapy.install_as_llama_cpp()
llamapy.install_as_llama_cpp()                 # a second call is harmless
import llama_cpp
from llama_cpp import Llama, LlamaGrammar      # what LangChain's LlamaCpp imports
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
import llama_cpp._internals as internals
import llama_cpp.llama_cpp as low
assert llama_cpp is llamapy and Llama is llamapy.Llama and internals is llamapy._internals
assert low.LLAMA_DEFAULT_SEED == 0xFFFFFFFF and Jinja2ChatFormatter is llamapy.llama_chat_format.Jinja2ChatFormatter
llm = Llama(sys.argv[1], n_ctx=64, n_parts=-1, f16_kv=True, verbose=False)  # LangChain's keywords
fmt = Jinja2ChatFormatter(template="{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}",
                          eos_token=llm._model.token_get_text(llm.token_eos()),
                          bos_token=llm._model.token_get_text(llm.token_bos()))
assert fmt(messages=[{"role": "user", "content": "hi"}]).prompt == "<bos>hi"
print("ok")
'''

REFUSES = r'''
import sys, types, llamapy
sys.modules["llama_cpp"] = types.ModuleType("llama_cpp")   # a real llama-cpp-python already imported
try:
    llamapy.install_as_llama_cpp()
except RuntimeError as e:
    assert "already imported" in str(e)
    print("ok")
'''


def _run(code, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(llamapy.__file__).resolve().parents[1])] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)


def test_libraries_importing_llama_cpp_get_llamapy(gemma_path):
    r = _run(SCRIPT, gemma_path)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr


def test_a_real_llama_cpp_python_is_never_replaced():
    r = _run(REFUSES)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
