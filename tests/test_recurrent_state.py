"""The recurrent state of hybrid models (Qwen3.5: gated delta-net layers beside attention
layers; LFM2: gated short convolutions; Granite 4.0-H: Mamba-2 layers) under everything that rewinds or reuses a sequence: the engine's suffix removal
(kv_seq_rm: restored from a checkpoint at exactly the cut, or refused), Llama's prefix
reuse, save_state / load_state, and speculative decoding's rollback of rejected drafts.
Each is held against a fresh evaluation of the same tokens (a new context): the same
greedy tokens and logits within float rounding of a different batching.

Where this build has a Vulkan device (tools/vulkan_check.sh: lavapipe), the removal, the
prefix reuse, save / load and the rollback run again with every layer on the GPU and with
a partial split (the last two layers there), where the states live in device memory: the
fresh evaluations they are held against are made the same way."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from llamapy import Llama, _engine as E
from llamapy.llama_speculative import LlamaDraftModel

DATA = Path(__file__).parent / "data" / "hybrid"
FILES = [DATA / "qwen35" / "qwen35-q8_0.gguf", DATA / "qwen35moe" / "qwen35moe-q8_0.gguf",
         DATA / "lfm2" / "lfm2-q8_0.gguf", DATA / "lfm2moe" / "lfm2moe-q8_0.gguf",
         DATA / "granitehybrid" / "granitehybrid-q8_0.gguf"]
PROMPT = [11, 42, 97, 150, 203, 260, 31, 77, 188, 5, 140, 222, 56, 90, 310, 12]
ATOL = 2e-3  # batching changes the summation order of the matmuls only
# n_gpu_layers of each placement: the CPU, and where a Vulkan device exists every layer on
# it and the last two of four (a delta-net layer and the attention layer)
HAS_GPU = "vulkan" in E.backends() and bool(E.gpu_devices())
PLACEMENTS = {"cpu": 0, "gpu": -1, "split": 2} if HAS_GPU else {"cpu": 0}


def llama(path, n_gpu_layers=0, **kw):
    return Llama(model_path=str(path), n_ctx=256, n_batch=64, n_threads=2, verbose=False,
                 n_gpu_layers=n_gpu_layers, **kw)


def greedy(llm, prompt, n):
    out = []
    for t in llm.generate(prompt, temp=0.0):
        out.append(t)
        if len(out) == n:
            break
    return out


def fresh(path, prompt, n, n_gpu_layers=0):
    """Tokens and the prompt's last logits from a new context."""
    llm = llama(path, n_gpu_layers)
    toks = greedy(llm, prompt, n)
    llm.reset()
    llm.eval(prompt)
    return toks, np.array(llm._seq.last_logits())


def count_evals(llm):
    counts = []
    orig = llm._seq._eval_ids

    def counting(toks, *a):
        counts.append(len(toks))
        return orig(toks, *a)

    llm._seq._eval_ids = counting
    return counts


def ctx_decode(ctx, toks, p0, seq=0):
    n = len(toks)
    ctx.decode(tokens=np.array(toks, dtype=np.int32), pos=np.arange(p0, p0 + n, dtype=np.int32),
               seq_ids=np.full(n, seq, dtype=np.int32))
    return np.array(ctx.get_logits(-1))


# (file, placement): every family in every placement
CASES = [(f, w) for f in FILES for w in PLACEMENTS]


@pytest.fixture(params=CASES, ids=lambda c: f"{c[0].parent.name}-{c[1]}")
def case(request):
    return request.param


@pytest.fixture
def path(case):
    return case[0]


@pytest.fixture
def ngl(case):
    """n_gpu_layers of the placement under test."""
    return PLACEMENTS[case[1]]


def test_suffix_removal_restores_a_checkpoint_or_refuses(path, ngl):
    m = E.Model(str(path))
    ctx = E.Context(m, n_ctx=128, n_batch=64, n_threads=2, n_gpu_layers=ngl)
    assert ctx.recurrent_bytes > 0
    ctx_decode(ctx, PROMPT[:8], 0)          # checkpoint at 7 (end of a multi-row batch)
    ctx_decode(ctx, PROMPT[8:12], 8)        # at 7 (start) and 11 (end)
    for i in range(12, 16):
        ctx_decode(ctx, PROMPT[i:i + 1], i)  # single rows: no checkpoints
    assert ctx.n_state_checkpoints(0) == 2
    assert ctx.kv_seq_resume_pos(0, 16) == 16
    assert ctx.kv_seq_resume_pos(0, 14) == 12
    assert ctx.kv_seq_resume_pos(0, 11) == 8
    assert ctx.kv_seq_resume_pos(0, 5) == 0
    # a gap inside what the state summarises, and a suffix without a checkpoint: refused, nothing changes
    assert ctx.kv_seq_rm(0, 3, 5) is False
    assert ctx.kv_seq_rm(0, 14, -1) is False
    assert ctx.kv_seq_pos_max(0) == 15
    # past the end: nothing of the state is removed
    assert ctx.kv_seq_rm(0, 16, -1) is True
    # a suffix from the checkpoint at 11: the state is as after 11; continuing gives a fresh run's logits
    assert ctx.kv_seq_rm(0, 12, -1) is True
    assert ctx.kv_seq_pos_max(0) == 11
    got = ctx_decode(ctx, [7, 300, 45], 12)
    ref = E.Context(m, n_ctx=128, n_batch=64, n_threads=2, n_gpu_layers=ngl)
    want = ctx_decode(ref, PROMPT[:12] + [7, 300, 45], 0)
    np.testing.assert_allclose(got, want, atol=ATOL)
    # the whole sequence always goes
    assert ctx.kv_seq_rm(0, -1, -1) is True and ctx.kv_seq_pos_max(0) == -1


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)  # no placement in it
def test_rows_in_several_sequences_and_partial_copies_are_refused(path):
    m = E.Model(str(path))
    ctx = E.Context(m, n_ctx=64, n_batch=16, n_threads=1, n_seq_max=2)
    with pytest.raises(ValueError, match="several sequences"):
        ctx.decode(tokens=np.array([1, 2], dtype=np.int32), pos=np.arange(2, dtype=np.int32),
                   seq_ids=[[0, 1], [0]])
    ctx_decode(ctx, PROMPT[:6], 0)
    with pytest.raises(ValueError, match="whole sequences"):
        ctx.kv_seq_cp(0, 1, 0, 3)
    ctx.kv_seq_cp(0, 1, -1, -1)
    a = ctx_decode(ctx, [5], 6, seq=0)
    b = ctx_decode(ctx, [5], 6, seq=1)
    np.testing.assert_array_equal(a, b)


def test_prefix_reuse_matches_fresh_evaluation(path, ngl):
    llm = llama(path, ngl)
    first = greedy(llm, PROMPT, 6)
    counts = count_evals(llm)
    # A chat's next turn: everything so far plus new tokens. The live state is reused.
    nxt = PROMPT + first[:-1] + [64, 64, 199]
    got = greedy(llm, nxt, 8)
    assert counts[:2] == [3, 1] or counts[0] == 3, counts
    want, want_last = fresh(path, nxt, 8, ngl)
    assert got == want
    # Another continuation of the first prompt only: back to the checkpoint at its end.
    counts.clear()
    other = PROMPT + [300, 45, 9, 120]
    got = greedy(llm, other, 8)
    assert counts[0] == 4, counts  # only the new tokens: nothing before the checkpoint again
    want, want_last = fresh(path, other, 8, ngl)
    assert got == want
    llm.reset()
    llm.eval(other)
    np.testing.assert_allclose(np.array(llm._seq.last_logits()), want_last, atol=ATOL)
    # A prompt sharing only part of the first one: no checkpoint there, evaluated from the start.
    counts.clear()
    part = PROMPT[:10] + [7, 7, 7]
    got = greedy(llm, part, 8)
    assert got == fresh(path, part, 8, ngl)[0]


def test_save_and_load_state_include_the_recurrent_state(path, ngl):
    llm = llama(path, ngl)
    llm.eval(PROMPT)
    state = llm.save_state()
    cont = greedy(llm, PROMPT, 8)          # continues from the live state
    llm.reset()
    llm.eval([300, 45, 9, 120, 64])        # something else entirely
    llm.load_state(state)
    assert greedy(llm, PROMPT, 8) == cont
    other = llama(path, ngl)
    other.load_state(state)
    assert greedy(other, PROMPT, 8) == cont
    assert cont == fresh(path, PROMPT, 8, ngl)[0]


class ScriptedDraft(LlamaDraftModel):
    """Proposes the true greedy continuation for the first `right` tokens, then wrong ones."""

    def __init__(self, truth, prompt_len, right, n=4):
        self.truth, self.prompt_len, self.right, self.n = truth, prompt_len, right, n

    def __call__(self, input_ids, **kw):
        done = len(input_ids) - self.prompt_len
        good = self.truth[done:done + self.right]
        return np.array(good + [(t + 1) % 300 for t in self.truth[done + self.right:done + self.n]], dtype=np.intc)


@pytest.mark.parametrize("right", [0, 1, 3])
def test_speculative_rollback_matches_plain_greedy(path, right, ngl):
    truth = fresh(path, PROMPT, 20, ngl)[0]
    llm = llama(path, ngl, draft_model=ScriptedDraft(truth, len(PROMPT), right))
    assert greedy(llm, PROMPT, 16) == truth[:16]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.parent.name)  # no placement in it
def test_plan_memory_counts_the_states_and_checkpoints(path):
    import llamapy

    plan = llamapy.plan_memory(str(path), n_ctx=128, n_parallel=2, n_batch=64)
    m = E.Model(str(path))
    ctx = E.Context(m, n_ctx=128, n_batch=64, n_threads=1, n_seq_max=2)
    assert plan.kv_bytes == ctx.kv_bytes          # attention layers only: no cells for the recurrent ones
    assert plan.state_bytes == ctx.recurrent_bytes * (1 + 8)
    for seq in (0, 1):                             # fill every checkpoint slot of both sequences
        for i in range(12):
            ctx_decode(ctx, [5, 6], 2 * i, seq=seq)
        assert ctx.n_state_checkpoints(seq) == 8
    assert ctx.recurrent_bytes + ctx.checkpoint_bytes == plan.state_bytes


@pytest.mark.skipif(not HAS_GPU, reason="no GPU backend device in this build")
@pytest.mark.parametrize("path", FILES[:2], ids=lambda p: p.parent.name)  # 3 of their 4 layers recurrent
def test_plan_memory_puts_each_layers_live_state_on_its_device(path):
    """The live states follow their layers (recurrent_state.h); the checkpoints stay on the host."""
    import llamapy

    ctx = E.Context(E.Model(str(path)), n_ctx=128, n_batch=64, n_threads=1, n_seq_max=2)
    live = ctx.recurrent_bytes
    host = llamapy.plan_memory(str(path), n_ctx=128, n_parallel=2, n_batch=64).devices
    for ngl, share in ((-1, 1.0), (2, 1 / 3)):  # the split puts 1 of the 3 delta-net layers on the GPU
        devs = {d["device"]: d for d in llamapy.plan_memory(str(path), n_ctx=128, n_parallel=2, n_batch=64,
                                                           n_gpu_layers=ngl).devices}
        assert devs["gpu0"]["other_bytes"] == live * share
        assert devs["cpu"]["other_bytes"] == host[0]["other_bytes"] - live * share
