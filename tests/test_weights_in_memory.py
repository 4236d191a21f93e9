"""use_mmap: the model file mapped (True) or read into anonymous memory up
front (False; the default where the file takes at most half of the memory
available). Both give the same numbers; a file that ends early is an error,
not a crash, either way."""
from __future__ import annotations

import logging
import os
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


def _smaps_huge_kb(path: str) -> int:
    """FilePmdMapped (kB) of this process's mappings of path."""
    total, ours = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[:1] in "0123456789abcdef":
                ours = line.rstrip().endswith(path)
            elif ours and line.startswith("FilePmdMapped:"):
                total += int(line.split()[1])
    return total


def test_load_options_of_use_mmap():
    # the default reads the file in through a mapping in 2 MiB pages where
    # the kernel gives it those, else copies it; False always copies
    from llamapy._params import load_options

    assert load_options(__file__, None, False) == {"use_mmap": False, "huge_pages": True}
    assert load_options(__file__, False, False) == {"use_mmap": False, "huge_pages": False}
    assert load_options(__file__, True, False) == {"use_mmap": True, "huge_pages": True}


def test_default_placement_of_a_large_file_is_what_it_says(gemma_path):
    # Gemma 3 270M (~250 MB): mapped in 2 MiB pages where this kernel does it
    # (Linux with transparent huge pages and a filesystem with large folios),
    # else read into memory; whichever, the kernel's own page tables agree
    # with the report, and the numbers equal the copy's.
    toks = [2, 818, 5279, 529, 7001, 563]
    default = Llama(gemma_path, n_ctx=64, logits_all=True, verbose=False)
    copy = Llama(gemma_path, n_ctx=64, logits_all=True, use_mmap=False, verbose=False)
    assert copy._model.weights_placement == "read into memory"
    where = default._model.weights_placement
    assert where in ("mapped from the file in 2 MiB pages", "read into memory")
    if where != "read into memory":
        assert not default._model.weights_in_memory
        # at least half of what is resident, as huge_pages.cpp requires
        assert _smaps_huge_kb(os.path.realpath(gemma_path)) * 1024 >= os.path.getsize(gemma_path) // 2
    assert np.array_equal(_logits(default, toks), _logits(copy, toks))
    default.close()
    copy.close()


def test_small_files_are_read_into_memory_even_where_huge_pages_are_preferred(tiny):
    llm = Llama(str(tiny("llama", "F32")[0]), n_ctx=64, verbose=False)
    assert llm._model.weights_placement == "read into memory"
    llm.close()
