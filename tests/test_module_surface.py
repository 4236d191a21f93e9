"""llamapy has the public names of llama-cpp-python's modules, under the same
module names (``llama_cpp`` -> ``llamapy``, ``llama_cpp.X`` -> ``llamapy.X``).

The names are read from the llama-cpp-python 0.3.36 sdist's sources with
``ast`` (never imported), so a name it adds shows up here. What llamapy
leaves out on purpose is listed below, each with its reason.
"""
from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Set

import pytest

MODULES = ["llama_types", "llama_chat_format", "llama_grammar", "llama_cache", "llama_speculative",
           "llama_tokenizer", "_internals"]

# Deliberately absent, by module.
ABSENT = {
    "_internals": {
        # They work on llama.cpp's ctypes candidate arrays (llama_token_data_array); the sampling
        # context and its params drive LlamaContext.sample_*, which llama-cpp-python itself made raise.
        "LlamaTokenDataArray", "CustomSampler", "LlamaSamplingParams", "LlamaSamplingContext",
    },
    "llama_chat_format": {
        # Functionary's handlers need functionary's own Hugging Face tokenizer and prompt code.
        "functionary_chat_handler", "functionary_v1_v2_chat_handler",
    },
    "llama_grammar": {
        # The example grammars of llama.cpp's grammars/ folder (load those files with LlamaGrammar.from_file).
        "ARITHMETIC_GBNF", "C_GBNF", "CHESS_GBNF", "JAPANESE_GBNF", "LIST_GBNF",
        # The internals of llama-cpp-python's JSON-schema converter; llamapy has its own
        # (json_schema_to_gbnf, LlamaGrammar.from_json_schema).
        "SchemaConverter", "BuiltinRule", "PRIMITIVE_RULES", "STRING_FORMAT_RULES", "SPACE_RULE", "DOT", "DOTALL",
        "RESERVED_NAMES", "INVALID_RULE_CHARS_RE", "GRAMMAR_LITERAL_ESCAPE_RE", "GRAMMAR_LITERAL_ESCAPES",
        "NON_LITERAL_SET", "ESCAPED_IN_REGEXPS_BUT_NOT_IN_LITERALS",
    },
}
# Top level (llama_cpp/__init__.py: ``from .llama_cpp import *`` and ``from .llama import *``).
TOP_ABSENT = {
    "set_verbose", "suppress_stdout_stderr",  # helpers for the C library's logging to stdout/stderr
}
# From llama_cpp/llama_cpp.py: every constant is mirrored; of its functions and
# types (the raw ctypes C API: llama_decode on ctypes pointers, structures,
# callbacks) only these, which make sense without llama.cpp's C objects.
LOW_LEVEL_MIRRORED = {
    "llama_backend_init", "llama_backend_free", "llama_numa_init", "llama_supports_mmap", "llama_supports_mlock",
    "llama_supports_gpu_offload", "llama_supports_rpc", "llama_max_devices", "llama_time_us",
    "llama_print_system_info", "llama_model_default_params", "llama_context_default_params", "llama_model_params",
    "llama_context_params",
}
LOW_LEVEL_CONSTANT_DIFFERENT: Set[str] = set()


def _defined(path: Path) -> dict:
    """Public module-level names defined in a source file -> the ast node that defines them."""
    out = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    out[target.id] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return {n: v for n, v in out.items() if not n.startswith("_")}


def _package_imports(path: Path) -> Set[str]:
    """Names a module imports from llama-cpp-python's own package (and so re-exports by ``import *``)."""
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("llama_cpp")):
            names |= {a.asname or a.name for a in node.names if a.name != "*"}
        elif isinstance(node, ast.Import):
            names |= {a.asname for a in node.names if a.name.startswith("llama_cpp.") and a.asname}
    return {n for n in names if not n.startswith("_")}


@pytest.fixture(scope="module")
def src(llama_cpp_sdist) -> Path:
    return Path(llama_cpp_sdist) / "llama_cpp"


@pytest.mark.parametrize("module", MODULES)
def test_module_has_llama_cpp_python_names(src, module):
    mod = importlib.import_module(f"llamapy.{module}")
    expected = set(_defined(src / f"{module}.py"))
    assert expected, module
    absent = ABSENT.get(module, set())
    assert absent <= expected, f"stale exclusions: {sorted(absent - expected)}"
    missing = sorted(n for n in expected - absent if not hasattr(mod, n))
    assert not missing, f"llamapy.{module} lacks {missing}"
    leaked = sorted(n for n in absent if hasattr(mod, n))
    assert not leaked, f"listed as absent but present: {leaked}"


def test_top_level_names(src):
    import llamapy

    llama_py = src / "llama.py"
    expected = set(_defined(llama_py)) | _package_imports(llama_py) | set(_defined(src / "llama_types.py"))
    expected |= {"llama_cpp", "llama_chat_format", "llama_types", "llama_grammar", "llama_cache",
                 "llama_speculative", "llama_tokenizer", "__version__"}
    assert TOP_ABSENT <= expected, f"stale exclusions: {sorted(TOP_ABSENT - expected)}"
    missing = sorted(n for n in expected - TOP_ABSENT if not hasattr(llamapy, n))
    assert not missing, f"llamapy lacks {missing}"
    from llamapy import ChatCompletionRequestUserMessage, LlamaGrammar, LlamaRAMCache  # noqa: F401


def test_low_level_names(src):
    import llamapy
    import llamapy.llama_cpp as low

    defined = _defined(src / "llama_cpp.py")
    constants = {n for n in defined if n.isupper()}
    assert len(constants) > 200
    for name in sorted(constants):
        assert hasattr(low, name) and hasattr(llamapy, name), name
        node = defined[name]
        # Values written as literals in llama-cpp-python's source must be the same here.
        if isinstance(node, ast.Assign) and isinstance(node.value, (ast.Constant, ast.UnaryOp)) \
                and name not in LOW_LEVEL_CONSTANT_DIFFERENT:
            assert getattr(low, name) == ast.literal_eval(node.value), name
    assert LOW_LEVEL_MIRRORED <= set(defined)
    for name in sorted(LOW_LEVEL_MIRRORED):
        assert hasattr(low, name) and hasattr(llamapy, name), name


def test_low_level_functions_work():
    import llamapy as lc

    params = lc.llama_model_default_params()
    if lc.llama_supports_mmap() and lc.llama_supports_mlock():
        params.load_mode = lc.LLAMA_LOAD_MODE_MMAP_MLOCK
    elif lc.llama_supports_mmap():
        params.load_mode = lc.LLAMA_LOAD_MODE_MMAP
    assert params.load_mode == lc.LLAMA_LOAD_MODE_MMAP and params.n_gpu_layers == -1
    cparams = lc.llama_context_default_params()
    assert (cparams.n_ctx, cparams.n_batch, cparams.type_k) == (512, 2048, lc.GGML_TYPE_F16)
    cparams.flash_attn_type = lc.LLAMA_FLASH_ATTN_TYPE_ENABLED
    cparams.logits_all = False  # llama-cpp-python's tests set fields the struct lacks
    assert not lc.llama_supports_gpu_offload() and lc.llama_max_devices() == lc.LLAMA_MAX_DEVICES
    assert lc.llama_print_system_info().startswith(b"CPU : ")
    t0 = lc.llama_time_us()
    assert lc.llama_time_us() >= t0 > 0
    lc.llama_backend_init()
    lc.llama_numa_init(lc.GGML_NUMA_STRATEGY_DISABLED)
    lc.llama_backend_free()


def test_tokenizer_interface():
    from llamapy.llama_tokenizer import BaseLlamaTokenizer, LlamaHFTokenizer, LlamaTokenizer

    assert issubclass(LlamaTokenizer, BaseLlamaTokenizer)

    class Words:  # stands in for a Hugging Face tokenizer
        vocab = ["<s>", " hello", " world"]

        def encode(self, text, add_special_tokens=True):
            return [0] * add_special_tokens + [self.vocab.index(" " + w) for w in text.split()]

        def decode(self, ids, skip_special_tokens=True):
            return "".join(self.vocab[i] for i in ids if not (skip_special_tokens and i == 0))

    tok = LlamaHFTokenizer(Words())
    assert tok.tokenize(b"hello world") == [0, 1, 2] and tok.tokenize(b"world", special=False) == [2]
    assert tok.detokenize([0, 1, 2]) == b" hello world" and tok.detokenize([0, 1], special=True) == b"<s> hello"
    assert tok.detokenize([2], prev_tokens=[1]) == b" world"
