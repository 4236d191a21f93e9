"""The tensor-dump hook (Context.set_tensor_callback, llamapy.debug): for a
tiny model of every architecture, the named intermediates of a forward pass
(llama.cpp's graph names), their shapes, their values against the numpy
reference (tests/model_ref.py traces the same names), and that setting the
hook changes no output; and Gemma 3 270M's intermediates against llama.cpp's
own, recorded through its eval callback (tests/data/gemma3_270m_intermediates.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import encoder_ref as ER
import model_ref as R
from llamapy import _engine as E
from llamapy.debug import TensorDump

PROMPT = [1, 5, 17, 42, 9, 88]
DECODERS = list(R.SPECS)


def new_ctx(path, **kw):
    kw.setdefault("n_ctx", 64)
    kw.setdefault("n_threads", 2)
    kw.setdefault("n_threads_batch", 2)
    return E.Context(E.Model(str(path)), **kw)


def decode(ctx, toks):
    n = len(toks)
    ctx.decode(tokens=toks, pos=list(range(n)), seq_ids=[0] * n, logits=[1] * n)


def decoder_names(spec: R.ArchSpec, cfg: R.Config) -> list[str]:
    """The names one decoder pass emits, in order."""
    names = ["inp_embd"] + (["inp_scaled"] if spec.embd_scale or spec.embd_mul else [])
    for il in range(cfg.n_layer):
        layer = ["attn_norm"] if spec.pre_norm else []  # olmo2 has no pre-norms
        if spec.mla:
            layer += ["q", "Qcur", "Kcur", "kqv_out", "kqv_out_v", "attn_out"]
        else:
            layer += ["Qcur_normed", "Kcur_normed"] if spec.qk_norm or spec.qk_norm_full else []
            layer += ["Qcur", "Kcur", "Vcur", "kqv_out", "attn_out"]
        layer += ["attn_post_norm"] if spec.post_norms else []
        layer += ["sa_out"] if spec.post_norms and spec.pre_norm else ["ffn_inp"]  # llama.cpp's names
        moe = cfg.n_expert and not (spec.glm and il == 0)  # glm4moe's first layer is dense
        layer += ["ffn_norm"] if spec.pre_norm else []
        layer += ["ffn_moe_logits", "ffn_moe_out"] if moe else []
        layer += ["ffn_shexp_out"] if moe and spec.glm else []
        layer += ["ffn_out"] + (["ffn_post_norm"] if spec.post_norms else []) + ["l_out"]
        names += [f"{s}-{il}" for s in layer]
    return names + ["result_norm", "result_output"]


@pytest.mark.parametrize("arch", DECODERS)
def test_decoder_names_shapes_and_values(tiny, arch):
    path, spec, cfg, w = tiny(arch)
    ctx = new_ctx(path, type_k="f32", type_v="f32")
    with TensorDump(ctx) as dump:
        decode(ctx, PROMPT)
    assert [name for name, _ in dump.calls] == decoder_names(spec, cfg)
    n, H, KV, D = len(PROMPT), cfg.n_head, cfg.n_head_kv, cfg.head_dim
    cols = {"Qcur": H * D, "Qcur_normed": H * D, "Kcur": KV * D, "Kcur_normed": KV * D, "Vcur": KV * D,
            "kqv_out": H * D, "result_output": cfg.n_vocab, "ffn_moe_logits": cfg.n_expert}
    if spec.mla:
        C = cfg.kv_lora
        cols.update(q=H * cfg.head_k_mla, Qcur=H * (C + D), Kcur=C + D, kqv_out=H * C, kqv_out_v=H * cfg.head_v_mla)
    for name, a in dump.calls:
        assert a.dtype == np.float32 and a.shape == (n, cols.get(name.split("-")[0], cfg.n_embd)), name

    # Every named value against the reference pass (F32 weights and cache).
    ref: dict[str, np.ndarray] = {}
    logits, _ = R.forward(spec, cfg, w, PROMPT, "F32", kv_f16=False, trace=ref)
    assert set(ref) == set(dump.tensors)
    for name, got in dump.tensors.items():
        want = ref[name]
        err = np.abs(got - want).max() / max(np.abs(want).max(), 1e-30)
        assert err < 2e-4, f"{name}: relative error {err:.2e}"
    # The last one is what the context returns.
    np.testing.assert_array_equal(dump["result_output"], np.array(ctx.get_logits_all()))


@pytest.mark.parametrize("arch", DECODERS)
def test_hook_does_not_change_outputs(tiny, arch):
    path, _, _, _ = tiny(arch)
    runs = []
    for hooked in (False, True, False):
        ctx = new_ctx(path, n_ubatch=4)  # several micro-batches, F16 cache
        if hooked:
            ctx.set_tensor_callback(lambda name, a: None)
        decode(ctx, PROMPT)
        ctx.decode(tokens=[7], pos=[len(PROMPT)], seq_ids=[0])  # one more token, through the cache
        runs.append((np.array(ctx.get_logits_all()), np.array(ctx.get_logits(0))))
    for a, b in zip(runs[0], runs[1]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(runs[0], runs[2]):
        np.testing.assert_array_equal(a, b)


def test_only_output_rows_after_the_last_gather(tiny):
    path, spec, cfg, _ = tiny("llama")
    ctx = new_ctx(path)
    with TensorDump(ctx) as dump:
        ctx.decode(tokens=PROMPT, pos=list(range(len(PROMPT))), seq_ids=[0] * len(PROMPT))  # last row only
    last = cfg.n_layer - 1
    assert dump[f"kqv_out-{last}"].shape[0] == len(PROMPT)  # attention runs for every row
    assert dump[f"attn_out-{last}"].shape[0] == 1  # then only the output row goes on
    assert dump["result_output"].shape == (1, cfg.n_vocab)


def test_micro_batches_concatenate(tiny):
    path, _, cfg, _ = tiny("qwen3")
    ctx = new_ctx(path, n_ubatch=4)
    with TensorDump(ctx, names=lambda s: s.startswith("attn_norm-")) as dump:
        decode(ctx, PROMPT)
    assert sorted(dump.tensors) == [f"attn_norm-{il}" for il in range(cfg.n_layer)]
    assert [a.shape[0] for name, a in dump.calls if name == "attn_norm-0"] == [4, 2]
    assert dump["attn_norm-0"].shape == (len(PROMPT), cfg.n_embd)
    ctx2 = new_ctx(path)
    with TensorDump(ctx2) as whole:
        decode(ctx2, PROMPT)
    np.testing.assert_allclose(dump["attn_norm-0"], whole["attn_norm-0"], rtol=0, atol=1e-6)


@pytest.mark.parametrize("arch", ["bert", "nomic-bert"])
def test_encoder_names_and_values(tmp_path, arch):
    path, cfg, w = ER.make_model(tmp_path, arch)
    ctx = new_ctx(path, embeddings=True, pooling_type=0, n_ctx=32, n_batch=32)
    toks = [1, 5, 7, 9, 4]
    with TensorDump(ctx) as dump:
        ctx.decode(tokens=toks, pos=list(range(len(toks))), seq_ids=[0] * len(toks))
    names = ["inp_embd", "inp_norm-0"]
    for il in range(cfg.n_layer):
        names += [f"{s}-{il}" for s in ("Qcur", "Kcur", "Vcur", "kqv_out", "attn_out", "ffn_inp", "ffn_out", "l_out")]
    assert [name for name, _ in dump.calls] == names + ["result_embd"]
    for name, a in dump.calls:
        assert a.shape == (len(toks), cfg.n_embd), name
    ref = ER.forward(cfg, w, toks)
    assert np.abs(dump["result_embd"] - ref).max() < 1e-4
    np.testing.assert_array_equal(dump["result_embd"], np.array(ctx.get_embeddings_all()))
    # The input norm, in numpy from the dumped sum of embeddings.
    want = ER.layer_norm(dump["inp_embd"].astype(np.float64), w["token_embd_norm.weight"],
                         w.get("token_embd_norm.bias"), cfg.eps)
    assert np.abs(dump["inp_norm-0"] - want).max() < 1e-5


def test_bad_callbacks(tiny):
    path, _, _, _ = tiny("llama")
    ctx = new_ctx(path)
    with pytest.raises(TypeError):
        ctx.set_tensor_callback(42)

    def boom(name, a):
        raise KeyError("from the callback")

    ctx.set_tensor_callback(boom)
    with pytest.raises(KeyError, match="from the callback"):
        decode(ctx, PROMPT)
    assert ctx.kv_n_used == 0  # the failed decode left nothing in the cache
    ctx.set_tensor_callback(None)
    decode(ctx, PROMPT)
    assert ctx.kv_n_used == len(PROMPT)


def test_llama_tensor_dump(tiny):
    from llamapy import Llama
    from llamapy.debug import collect_tensors

    path, _, cfg, _ = tiny("gemma3")
    llm = Llama(model_path=str(path), n_ctx=32, n_threads=2, verbose=False)
    t = collect_tensors(llm, [1, 2, 3])
    assert t["inp_embd"].shape == (3, cfg.n_embd)
    assert t[f"l_out-{cfg.n_layer - 1}"].shape == (1, cfg.n_embd)  # Llama keeps the logits of the last row
    # The hook is removed afterwards; later evaluations are not recorded.
    llm.eval([4])
    assert t["inp_embd"].shape == (3, cfg.n_embd)
    llm.close()


# ---------------------------------------------------------------------------
# Gemma 3 270M against llama.cpp's own intermediates
# ---------------------------------------------------------------------------

FIXTURE = Path(__file__).parent / "data" / "gemma3_270m_intermediates.json"

# Our name -> the fixture's key: where llama.cpp names several tensors alike,
# the last one (Qcur after q-norm and RoPE: "#2"); it leaves wo · kqv_out
# unnamed (the recorder calls it "attn_out-<l> (unnamed)").
def fixture_key(name: str, tensors: dict) -> str | None:
    for k in (name + "#2", name, name + " (unnamed)"):
        if k in tensors:
            return k
    return None


# (layer, largest difference relative to the tensor's largest value, of row L2 norms)
# The weights are Q4_K / Q6_K with 8-bit activations, recorded by an AVX2
# build: rounding noise grows along the layers (llama.cpp moves its own
# logits by up to ~0.6 between batch and stepwise evaluation).
LAYER_TOL = {0: (1e-2, 1e-2), 5: (8e-2, 3e-2), -1: (8e-2, 3e-2)}


@pytest.mark.model
def test_gemma3_270m_matches_llama_cpp_intermediates(gemma_path):
    fx = json.loads(FIXTURE.read_text())
    assert fx["model_sha256"] == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    tensors = {t["key"]: t for t in fx["tensors"]}
    ids = fx["prompt_ids"]
    n = len(ids)
    ctx = E.Context(E.Model(gemma_path), n_ctx=512, n_batch=512, n_threads=2, n_threads_batch=2,
                    flash_attn=False)  # as recorded
    with TensorDump(ctx) as dump:
        ctx.decode(tokens=ids, pos=list(range(n)), seq_ids=[0] * n, logits=[0] * (n - 1) + [1])
    compared = []
    for name in dump.names():
        key = fixture_key(name, tensors)
        if key is None:
            continue
        t = tensors[key]
        il = int(name.rsplit("-", 1)[1]) if "-" in name else -1
        if il not in LAYER_TOL:
            continue
        tol_v, tol_l2 = LAYER_TOL[il]
        got = dump[name].astype(np.float64)
        rows = got.reshape(-1, t["ne"][0])  # ggml's rows: ne[0] consecutive values, token-major
        ref_l2 = np.array(t["row_l2"])
        assert rows.shape[0] == len(ref_l2), name
        scale = np.abs(rows).max()
        assert np.abs(np.linalg.norm(rows, axis=1) - ref_l2).max() <= tol_l2 * ref_l2.max(), name
        per_token = rows.shape[0] // got.shape[0]
        for tok, ref_rows in (t.get("token_rows") or {}).items():
            ref_rows = np.array(ref_rows, dtype=np.float64)
            mine = rows[int(tok) * per_token:][: len(ref_rows), : ref_rows.shape[1]]
            assert np.abs(mine - ref_rows).max() <= tol_v * scale, (name, tok)
        if t.get("values"):
            ref_v = np.array(t["values"], dtype=np.float64)
            assert np.abs(got.reshape(-1) - ref_v).max() <= tol_v * np.abs(ref_v).max(), name
        compared.append(name)
    layer0 = ["attn_norm", "Qcur_normed", "Kcur_normed", "Qcur", "Kcur", "Vcur", "kqv_out", "attn_out",
              "attn_post_norm", "sa_out", "ffn_norm", "ffn_out", "ffn_post_norm", "l_out"]
    assert {f"{s}-0" for s in layer0} <= set(compared)
    assert {"inp_scaled", "result_norm", "result_output", "l_out-5"} <= set(compared)
    # The logits of llama.cpp's top 20 within its own batch-vs-step noise.
    logits = np.array(ctx.get_logits(0))
    for tok, value in fx["logits_top20"]:
        assert abs(logits[tok] - value) < 0.6, tok
    assert int(np.argmax(logits)) in [tok for tok, _ in fx["logits_top20"][:2]]


def test_callback_cannot_reenter_its_context(tiny):
    path, _, _, _ = tiny("llama")
    ctx = new_ctx(path)

    def reenter(name, a):
        if name == "attn_norm-0":
            ctx.kv_seq_rm(0)

    ctx.set_tensor_callback(reenter)
    with pytest.raises(ValueError, match="middle of a decode"):
        decode(ctx, PROMPT)
    ctx.set_tensor_callback(lambda name, a: ctx.set_tensor_callback(None))
    with pytest.raises(ValueError, match="middle of a decode"):
        decode(ctx, PROMPT)
    ctx.set_tensor_callback(None)
    assert ctx.kv_n_used == 0
    decode(ctx, PROMPT)  # usable afterwards
    assert ctx.kv_n_used == len(PROMPT)
