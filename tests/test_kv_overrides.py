"""kv_overrides: metadata values given at load time replace the file's, as in
llama-cpp-python (bool / int / float / str values; arrays cannot be
overridden). The model loader and the tokenizer both see them, ``metadata``
reports the effective values, and a key of the wrong kind is refused with
its name."""
from __future__ import annotations

import logging

import numpy as np
import pytest

from llamapy import GGUFError, Llama

pytestmark = pytest.mark.model


def load(path, **kw):
    return Llama(path, n_ctx=kw.pop("n_ctx", 64), n_threads=2, verbose=False, **kw)


def test_bool_override_reaches_the_tokenizer(gemma_path):
    plain = load(gemma_path, vocab_only=True)
    no_bos = load(gemma_path, vocab_only=True, kv_overrides={"tokenizer.ggml.add_bos_token": False})
    assert plain.tokenize(b"Hello")[0] == plain.token_bos()
    assert no_bos.tokenize(b"Hello") == plain.tokenize(b"Hello")[1:]
    assert no_bos.metadata["tokenizer.ggml.add_bos_token"] == "false"


def test_int_override_reaches_the_model(gemma_path):
    llm = load(gemma_path, n_ctx=0, kv_overrides={"gemma3.context_length": 1024})
    assert llm.n_ctx() == 1024
    assert llm.metadata["gemma3.context_length"] == "1024"


IDS = [2, 818, 7488, 13401, 528]


def last_logits(path, **kw):
    llm = load(path, **kw)
    llm.eval(IDS)
    return llm, np.asarray(llm.scores[len(IDS) - 1])


def test_float_override_changes_the_computation(gemma_path):
    _, plain = last_logits(gemma_path)
    llm, moved = last_logits(gemma_path, kv_overrides={"gemma3.rope.freq_base": 10000.0})
    assert llm.metadata["gemma3.rope.freq_base"] == "10000.000000"
    assert not np.array_equal(plain, moved)
    _, same = last_logits(gemma_path, kv_overrides={"gemma3.rope.freq_base": 1000000})  # an int for a float key is fine
    np.testing.assert_array_equal(plain, same)


def test_string_override_of_the_chat_template(gemma_path):
    template = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    llm = load(gemma_path, kv_overrides={"tokenizer.chat_template": template})
    assert llm.metadata["tokenizer.chat_template"] == template


@pytest.mark.parametrize("key,value,needs", [
    ("gemma3.context_length", 1.5, "an int"),
    ("gemma3.context_length", "1024", "an int"),
    ("gemma3.context_length", True, "an int"),
    ("gemma3.rope.freq_base", "big", "a float"),
    ("tokenizer.ggml.add_bos_token", 1, "a bool"),
    ("general.name", 3, "a str"),
    ("tokenizer.ggml.tokens", "x", "an array"),
])
def test_wrong_kind_is_refused_by_name(gemma_path, key, value, needs):
    with pytest.raises(GGUFError) as e:
        load(gemma_path, kv_overrides={key: value})
    assert key in str(e.value) and needs in str(e.value)


def test_bad_values_are_type_errors(gemma_path):
    with pytest.raises(TypeError):
        load(gemma_path, kv_overrides={"gemma3.context_length": [1, 2]})
    with pytest.raises(TypeError):
        load(gemma_path, kv_overrides=["gemma3.context_length"])


def test_unused_key_is_reported(gemma_path, caplog):
    with caplog.at_level(logging.WARNING, logger="llamapy"):
        llm = load(gemma_path, kv_overrides={"gemma3.no_such_key": 7, "tokenizer.ggml.add_bos_token": True})
    assert "gemma3.no_such_key" in caplog.text and "add_bos_token" not in caplog.text
    assert llm.metadata["gemma3.no_such_key"] == "7"


def test_an_override_may_supply_a_missing_key(gemma_path):
    """Gemma's file has no rope.freq_base_swa; an override supplies it."""
    _, plain = last_logits(gemma_path)
    _, moved = last_logits(gemma_path, kv_overrides={"gemma3.rope.freq_base_swa": 500.0})
    assert not np.array_equal(plain, moved)
