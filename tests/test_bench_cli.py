"""`python -m llamapy bench`: llama-bench's list options (-p, -n, -d, -fa, -t),
depth (tests run after N tokens already in the cache) and clear errors, on
tiny synthetic models (fast)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llamapy import bench
from llamapy.bench import bench_records, parse_flash_list, parse_int_list
from llamapy.cli import build_parser, main


def test_int_lists_and_ranges():
    assert parse_int_list("512") == [512]
    assert parse_int_list("0,4096, 16384") == [0, 4096, 16384]
    assert parse_int_list("0-16384+4096") == [0, 4096, 8192, 12288, 16384]
    assert parse_int_list("512-4096*2") == [512, 1024, 2048, 4096]
    assert parse_int_list("3-5") == [3, 4, 5]


@pytest.mark.parametrize("text, words", [
    ("abc", "not an integer"), ("1,,2", "not an integer"), ("-5", "below the minimum"),
    ("10-5", "empty or endless"), ("0-8*2", "empty or endless"), ("1-8+0", "empty or endless"),
    ("4096k", "not an integer"),
])
def test_bad_int_lists(text, words):
    with pytest.raises(ValueError, match=words) as e:
        parse_int_list(text, "depth")
    assert "depth" in str(e.value)


def test_flash_lists():
    assert parse_flash_list("0,1,auto") == [False, True, "auto"]
    assert parse_flash_list("on,OFF,true") == [True, False, True]
    for bad in ("2", "", "maybe", "0,"):
        with pytest.raises(ValueError, match="flash-attn"):
            parse_flash_list(bad)


def test_parser_takes_llama_bench_lists():
    a = build_parser().parse_args(["bench", "-p", "512", "-n", "128", "-d", "0,4096", "-fa", "0,1", "-t", "1,2"])
    assert (a.n_prompt, a.n_gen, a.depth, a.flash_attn, a.threads) == ([512], [128], [0, 4096], [False, True], [1, 2])
    a = build_parser().parse_args(["bench", "--flash-attn", "auto", "--depth", "0-8192+4096"])
    assert a.flash_attn == ["auto"] and a.depth == [0, 4096, 8192]
    a = build_parser().parse_args(["bench"])
    # -fa defaults to auto, as Llama(flash_attn=...) and llama-bench do
    assert (a.n_prompt, a.n_gen, a.depth, a.flash_attn, a.ctx_size) == ([512], [128], [0], ["auto"], 0)


@pytest.mark.parametrize("argv, words", [
    (["-d", "-1"], "depth"), (["-d", "x"], "depth"), (["-fa", "2"], "flash-attn"), (["-p", "1.5"], "n-prompt"),
    (["-t", "two"], "threads"),
])
def test_bad_values_are_usage_errors(capsys, argv, words):
    with pytest.raises(SystemExit) as e:
        build_parser().parse_args(["bench", *argv])
    assert e.value.code == 2
    assert words in capsys.readouterr().err


def test_bad_combinations_are_clear_errors(tiny, capsys):
    path = str(tiny("llama")[0])
    assert main(["bench", "-m", path, "-p", "8", "-n", "4", "-d", "16", "-c", "20"]) == 1
    assert "ctx-size 20 is too small" in capsys.readouterr().err
    assert main(["bench", "-m", path, "-p", "0", "-n", "0"]) == 1
    assert "nothing to measure" in capsys.readouterr().err
    assert main(["bench", "-m", path, "-p", "8", "-n", "0", "-r", "0"]) == 1
    assert "repetitions" in capsys.readouterr().err


def test_json_has_every_combination(tiny, capsys):
    path = str(tiny("llama")[0])
    argv = ["bench", "-m", path, "-p", "8", "-n", "4", "-d", "0,16", "-fa", "0,1", "-t", "1", "-r", "1", "--json"]
    assert main(argv) == 0
    res = json.loads(capsys.readouterr().out)
    got = [(r["test"], r["flash_attn"], r["n_depth"], r["n_ctx"]) for r in res["results"]]
    assert got == [("pp8", False, 0, 12), ("tg4", False, 0, 12), ("pp8 @ d16", False, 16, 28),
                   ("tg4 @ d16", False, 16, 28), ("pp8", True, 0, 12), ("tg4", True, 0, 12),
                   ("pp8 @ d16", True, 16, 28), ("tg4 @ d16", True, 16, 28)]
    for r in res["results"]:
        assert r["tokens_per_s"] > 0 and len(r["samples_ts"]) == 1 and r["n_threads"] == 1
        assert r["depth_n_tokens"] == r["n_depth"] == r["depth_kv_cells_used"]


def test_table_output(tiny, capsys):
    path = str(tiny("llama")[0])
    assert main(["bench", "-m", path, "-p", "8", "-n", "0", "-d", "16", "-fa", "auto", "-r", "1", "-t", "1"]) == 0
    out = capsys.readouterr().out
    assert "| fa |" in out and "| auto (1) | pp8 @ d16 |" in out and "tg" not in out


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_depth_is_in_the_cache_for_every_timed_run(tiny, monkeypatch, arch):
    """Every timed pp run starts after exactly the depth tokens, and gives the
    logits a fresh context gives for depth + prompt (gemma3's window cache
    has moved past the depth after a run: the saved state is restored)."""
    from llamapy.llama import Llama

    path = str(tiny(arch)[0])
    depth, n_prompt = 24, 8
    calls = []
    real_eval = Llama.eval

    def spy(self, tokens):
        before = self.n_tokens
        real_eval(self, tokens)
        calls.append((before, list(tokens), self._ctx.kv_n_used, np.array(self.scores[self.n_tokens - 1])))

    restores = []
    real_load = Llama.load_state

    def load_spy(self, state):
        restores.append(state.n_tokens)
        real_load(self, state)

    monkeypatch.setattr(Llama, "eval", spy)
    monkeypatch.setattr(Llama, "load_state", load_spy)
    # n_batch 8: gemma3's window cache (n_swa 5) then holds 13 cells, fewer than depth + prompt.
    res = bench_records(path, n_prompt=n_prompt, n_gen=3, depth=depth, threads=1, repetitions=3, batch_size=8,
                        flash_attn=False)
    monkeypatch.undo()
    assert all(n == depth for n in restores)
    assert bool(restores) == (arch == "gemma3")
    assert [r["test"] for r in res["results"]] == ["pp8 @ d24", "tg3 @ d24"]
    fill = calls[0]
    assert fill[0] == 0 and len(fill[1]) == depth
    pp = [c for c in calls[1:] if len(c[1]) == n_prompt]
    assert len(pp) == 1 + 3  # warm-up + repetitions
    assert all(c[0] == depth for c in pp)
    if arch == "llama":
        assert all(c[2] == depth + n_prompt for c in pp)
    with Llama(model_path=path, n_ctx=depth + n_prompt, n_batch=8, n_threads=1, flash_attn=False,
               verbose=False) as ref:
        ref.eval(fill[1])
        ref.eval(pp[0][1])
        want = np.array(ref.scores[ref.n_tokens - 1])
    for c in pp:
        np.testing.assert_allclose(c[3], want, rtol=0, atol=1e-5)
    # tg: (1 + 3) runs of 3 single-token steps, each run starting at the depth.
    tg = [c for c in calls[1 + len(pp):]]
    assert len(tg) == 4 * 3 and [c[0] for c in tg[:3]] == [depth, depth + 1, depth + 2]
    assert all(tg[i][0] == depth for i in range(0, len(tg), 3))


def test_flash_attn_values_reach_llama(tiny, monkeypatch):
    import llamapy.llama as L

    seen = []
    real_init = L.Llama.__init__

    def init(self, *a, **kw):
        seen.append(kw.get("flash_attn"))
        real_init(self, *a, **kw)

    monkeypatch.setattr(L.Llama, "__init__", init)
    bench.bench_records(str(tiny("llama")[0]), n_prompt=4, n_gen=0, flash_attn=[False, True, "auto"], threads=1,
                        repetitions=1)
    assert seen == [False, True, "auto"]


def test_auto_reports_what_it_resolved_to(tiny):
    from llamapy import bench

    meta = bench.bench_records(str(tiny("llama")[0]), n_prompt=4, n_gen=0, threads=1, repetitions=1)
    (r,) = meta["results"]
    assert r["flash_attn"] == "auto" and r["flash_attn_active"] is True  # decoders: flash under auto
    assert "| auto (1) |" in bench.format_table(meta)
    meta = bench.bench_records(str(tiny("llama")[0]), n_prompt=4, n_gen=0, threads=1, repetitions=1,
                               flash_attn=False)
    assert meta["results"][0]["flash_attn_active"] is False and "| 0 |" in bench.format_table(meta)
