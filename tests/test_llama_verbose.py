"""``verbose`` as in llama-cpp-python (True: load report and per-completion
timings on stderr; False: nothing printed, messages only through logging),
and the messages about options that have no effect naming those options."""
from __future__ import annotations

import enum
import logging

import pytest

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def model_path(gemma_path):
    return gemma_path


def test_verbose_true_prints_load_report_and_timings(model_path, capfd):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=64, n_threads=2)  # verbose=True is the default, as there
    out, err = capfd.readouterr()
    assert out == ""
    for needle in ("loaded meta data with 33 key-value pairs and 236 tensors", "general.architecture",
                   "- type   Q4_K:   27 tensors", "n_vocab     = 262144", "n_ctx       = 64", "n_batch     = 64",
                   "system info:"):
        assert needle in err, needle
    m("Hello", max_tokens=3, temperature=0.0)
    out, err = capfd.readouterr()
    assert out == ""
    lines = err.splitlines()
    for label in ("load time", "prompt eval time", "eval time", "total time"):
        assert any(line.split("=")[0].strip().endswith(label) for line in lines), label
    prompt_line = next(line for line in lines if "prompt eval time" in line)
    assert "/     2 tokens" in prompt_line  # BOS + "Hello", evaluated in one batch
    eval_line = next(line for line in lines if " eval time" in line and "prompt" not in line)
    assert "/     2 runs" in eval_line  # 3 tokens sampled, the last one never evaluated
    # Streaming prints them too, once the generation is over.
    chunks = list(m.create_completion("Hello", max_tokens=2, temperature=0.0, stream=True))
    assert chunks[-1]["choices"][0]["finish_reason"] is not None
    _, err = capfd.readouterr()
    assert err.count("total time") == 1
    m.close()


def test_verbose_false_prints_nothing_even_for_ignored_options(model_path, capfd, caplog):
    from llamapy import Llama

    with caplog.at_level(logging.INFO, logger="llamapy"):
        m = Llama(model_path=model_path, n_ctx=64, verbose=False, main_gpu=1, offload_kqv=False,
                  kv_overrides={"no.such.key": 1}, numa=True)
        m("Hi", max_tokens=2, tfs_z=0.5)
        m.close()
    out, err = capfd.readouterr()
    assert out == "" and err == ""
    text = caplog.text
    assert "main_gpu=1" in text and "offload_kqv=False" in text
    assert "n_gpu_layers" not in text and "split_mode" not in text and "tensor_split" not in text
    assert "no.such.key" in text and "tfs_z=0.5" in text and "numa=True" in text


def test_gpu_option_messages_only_for_given_values(model_path, caplog):
    from llamapy import Llama

    with caplog.at_level(logging.WARNING, logger="llamapy"):
        Llama(model_path=model_path, n_ctx=64, verbose=False, vocab_only=True).close()
    assert not caplog.records
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        Llama(model_path=model_path, n_ctx=64, verbose=False, vocab_only=True, tensor_split=[0.5, 0.5]).close()
    assert "tensor_split=[0.5, 0.5]" in caplog.text and "main_gpu" not in caplog.text


def test_verbose_true_prints_option_notes_instead_of_logging(model_path, capfd, caplog):
    from llamapy import Llama

    with caplog.at_level(logging.WARNING, logger="llamapy"):
        Llama(model_path=model_path, n_ctx=64, vocab_only=True, n_gpu_layers=-1).close()
    _, err = capfd.readouterr()
    assert "n_gpu_layers=-1" in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # not twice


def test_chat_template_override_is_not_reported_unused(model_path, caplog):
    from llamapy import Llama
    from llamapy.chat.completion import resolve_chat_handler

    template = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        m = Llama(model_path=model_path, n_ctx=64, verbose=False, vocab_only=True,
                  kv_overrides={"tokenizer.chat_template": template, "no.such.key": 1})
    assert "no.such.key" in caplog.text and "chat_template" not in caplog.text
    handler = resolve_chat_handler(m)
    assert handler.format.render([{"role": "user", "content": "hi"}], add_generation_prompt=False) == "<<hi>>"
    m.close()


class GGMLType(enum.IntEnum):  # what llama_cpp.GGML_TYPE_* constants are: ints
    Q8_0 = 8


@pytest.mark.parametrize("value, want", [("q8_0", 8), ("Q8_0", 8), (" f16 ", 1), ("F32", 0), ("bf16", 30),
                                         ("GGML_TYPE_Q4_0", 2), (8, 8), (GGMLType.Q8_0, 8), (None, 1)])
def test_kv_cache_types_by_name_or_id(value, want):
    # Parsed by the engine's option carrier, as Llama(type_k=...) is.
    from llamapy import _engine

    assert int(_engine.ContextParams(type_k=value).type_k) == want


@pytest.mark.parametrize("value, exc", [("q9_0", ValueError), (99, ValueError), (8.5, TypeError), ([8], TypeError)])
def test_bad_kv_cache_types_name_the_option(value, exc):
    from llamapy import _engine

    with pytest.raises(exc, match="type_v"):
        _engine.ContextParams(type_v=value)


def test_kv_cache_type_name_reaches_the_context(model_path):
    from llamapy import Llama

    m = Llama(model_path=model_path, n_ctx=64, verbose=False, type_k="Q8_0", type_v="q8_0", flash_attn=True)
    assert m.context_params.type_k == 8 and m.context_params.type_v == 8
    out = m("Hello", max_tokens=2, temperature=0.0)
    assert out["usage"]["completion_tokens"] >= 1
    m.close()


# ------------------------------------------------------------------ messages
def test_encoder_without_embedding_names_the_llama_keyword(tmp_path):
    import encoder_ref as ER
    from llamapy import Llama

    path, _, _ = ER.make_model(tmp_path, "bert", "F32", 1)
    m = Llama(model_path=str(path), verbose=False)
    with pytest.raises(ValueError, match=r"embedding=True") as info:
        m.create_completion("hello", max_tokens=1)
    assert "embeddings=True" not in str(info.value)
    m.close()


def test_missing_default_model_hint_uses_the_distribution_name(monkeypatch):
    import builtins

    from llamapy import default_model
    from llamapy._dist import DIST_NAME

    real_import = builtins.__import__

    def no_model(name, *args, **kwargs):
        if name == default_model.PACKAGE:
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_model)
    monkeypatch.setattr("importlib.import_module", lambda name: no_model(name))
    with pytest.raises(FileNotFoundError) as info:
        default_model.default_model_path()
    assert f'pip install "{DIST_NAME}[demo]"' in str(info.value) and '"llamapy[' not in str(info.value)
