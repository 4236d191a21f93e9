"""use_mmap: the model file mapped (True) or read into anonymous memory up
front (False; the default where the file takes at most half of the memory
available). Both give the same numbers; a file that ends early is an error,
not a crash, either way."""
from __future__ import annotations

import logging
import shutil

import numpy as np
import pytest

from llamapy import Llama
from llamapy._params import _fits_in_memory


def _logits(llm, toks):
    llm.reset()
    llm.eval(toks)
    return np.array(llm.scores[: llm.n_tokens])


@pytest.mark.parametrize("wtype", ["F32", "Q8_0"])
def test_mapped_and_read_into_memory_give_the_same_logits(tiny, wtype):
    path = tiny("llama", wtype)[0]
    toks = [1, 5, 9, 2, 7, 3]
    mapped = Llama(str(path), n_ctx=64, logits_all=True, use_mmap=True, verbose=False)
    read = Llama(str(path), n_ctx=64, logits_all=True, use_mmap=False, verbose=False)
    assert not mapped._model.weights_in_memory and read._model.weights_in_memory
    assert np.array_equal(_logits(mapped, toks), _logits(read, toks))
    mapped.close()
    read.close()


def test_default_reads_into_memory_where_the_file_fits(tiny):
    path = str(tiny("llama", "F32")[0])
    assert _fits_in_memory(path)  # a tiny file on a machine with memory to spare
    llm = Llama(path, n_ctx=64, verbose=False)
    assert llm._model.weights_in_memory
    llm.close()
    assert not _fits_in_memory(path + ".missing")
    vocab = Llama(path, vocab_only=True, verbose=False)  # nothing to stream: mapped
    assert not vocab._model.weights_in_memory


def test_read_into_memory_of_a_truncated_file_is_an_error(tiny, tmp_path):
    src = tiny("llama", "F32")[0]
    cut = tmp_path / "cut.gguf"
    data = open(src, "rb").read()
    cut.write_bytes(data[: len(data) - 1000])
    for use_mmap in (False, True):
        with pytest.raises(ValueError, match="GGUF"):
            Llama(str(cut), n_ctx=64, use_mmap=use_mmap, verbose=False)


def test_verbose_report_says_where_the_weights_are(tiny, tmp_path, capfd):
    path = tmp_path / "m.gguf"
    shutil.copy(tiny("llama", "F32")[0], path)
    for use_mmap, want in ((False, "read into memory"), (True, "mapped from the file")):
        llm = Llama(str(path), n_ctx=64, use_mmap=use_mmap, verbose=True)
        llm.close()
        err = capfd.readouterr().err
        assert f"weights     = {want}" in err


def test_quiet_load_logs_nothing_about_it(tiny, caplog):
    with caplog.at_level(logging.DEBUG, logger="llamapy"):
        Llama(str(tiny("llama", "F32")[0]), n_ctx=64, use_mmap=False, verbose=False).close()
    assert not [r for r in caplog.records if "memory" in r.getMessage()]
