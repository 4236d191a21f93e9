"""Regenerates tests/data/convert/: tiny Hugging Face decoder folders and what llama.cpp's
converter makes of them, for tests/test_convert_decoder.py.

Usage (from the repo root, in the fixture environment: torch CPU, transformers 5, tokenizers,
llama-cpp-python 0.3.36 with its sdist unpacked; none of this is a llamapy dependency):

    /tmp/moeenv/bin/python tools/make_convert_fixtures.py --sdist /tmp/moesd/llama_cpp_python-0.3.36 \
        [--work /tmp/convw] [--families llama,qwen2,...]

Per family: a seeded random `transformers` model (hidden 64, 2-4 layers; the MoE and small
dense families through tools/moe's and tools/dense's builders) saved with the shared tiny
byte-level BPE (tools/moe/tokenizer.py) plus the family's special tokens and a chat template
(gemma2 / gemma3 / mixtral: the VLM fixtures' tiny SentencePiece model, tools/vlm/hf_models.py)
-> tests/data/convert/<family>/hf/ (committed: CI has no torch). Then the 0.3.36 sdist's
convert_hf_to_gguf.py (through tools/moe/tokpre_shim.py for BPE families, since the tiny
tokenizer's pre-tokenizer hash is unknown to it) at every --outtype; each output is reduced to a digest
(every metadata key and value, every tensor's shape, type and sha256 of its bytes) in
reference.json, and llama.cpp's logits on the F16 file for one prompt go to logits.npz. Also
recorded: the chkhsh transformers computes for the tokenizer, so the test can check ours.
A fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE / "moe"))
sys.path.insert(0, str(REPO / "tests"))

import tokenizer as moe_tok  # noqa: E402
from convert_digest import gguf_digest  # noqa: E402

DATA = REPO / "tests" / "data" / "convert"
OUTTYPES = ["f32", "f16", "bf16", "q8_0"]
PROMPT = [17, 101, 250, 45, 9, 120]
TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

# family -> (special tokens, bos, eos, pad, add_bos, the pre-tokenizer name the real family carries)
TOKENS = {
    "llama": (["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"],
              "<|begin_of_text|>", "<|end_of_text|>", None, True, "llama-bpe"),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", "<|endoftext|>",
              False, "qwen2"),
    "qwen3": (["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"], None,
              "<|im_end|>", "<|endoftext|>", False, "qwen2"),
    # SentencePiece (tokenizer.model) as Gemma 3 ships it, with the tokenizer.json transformers
    # derives from it (its TemplateProcessing adds <s>): no BPE pre-tokenizer involved
    "gemma3": ([], "<s>", "</s>", None, True, None),
    # tools/moe's Qwen3-MoE builder (its own tokenizer specials), 2 layers of 4 experts
    "qwen3moe": ([], None, None, None, False, "qwen2"),
    # tools/moe's Mixtral builder: the tiny SentencePiece model, 2 layers of 4 experts
    "mixtral": ([], None, None, None, True, None),
    # tools/dense's builders (their own tokenizer specials and pre-tokenizer names)
    "smollm3": ([], None, None, None, False, "llama-bpe"),
    "olmo2": ([], None, None, None, False, "dbrx"),
    "olmo3": ([], None, None, None, False, "dbrx"),
    "granite": ([], None, None, None, False, "refact"),
    "gemma2": ([], "<s>", "</s>", None, True, None),
    "granitemoe": ([], None, None, None, False, "refact"),
    # Phi-4-mini style: byte-level BPE behind tokenizer_class GPT2Tokenizer (the converter's
    # phi3 path reads tokenizer.model unless the class says GPT2Tokenizer)
    "phi3": (["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], None, "<|end|>",
             "<|endoftext|>", False, "gpt-4o"),
    # Phi-3-mini style: SentencePiece tokenizer.model (the VLM fixtures' tiny model) with chat
    # tokens added past it (special and not), a config vocab_size padded past them
    "phi3spm": ([], None, None, None, True, None),
    # tools/moe's builders (their own tokenizer specials), weights re-saved as BF16
    "gptoss": ([], None, None, None, False, "gpt-4o"),
    # the gpt-oss fixture with its experts as the released checkpoints store them: MXFP4
    # blocks / scales (uint8, seeded random codes and scales near 2^-6) and quant_method mxfp4
    "gptossmxfp4": ([], None, None, None, False, "gpt-4o"),
    "deepseek2": ([], None, None, None, False, "deepseek-v3"),
    "glm4moe": ([], None, None, None, False, "glm4"),
    # tools/hybrid's builders (Qwen's / Granite's specials from tools/moe), weights re-saved as BF16
    "qwen35": ([], None, None, None, False, "qwen2"),
    "qwen35moe": ([], None, None, None, False, "qwen2"),
    "lfm2": ([], None, None, None, False, "qwen2"),
    "granitehybrid": ([], None, None, None, False, "qwen2"),
    # tools/gemma4's builders (a Gemma-style tokenizer.json from the VLM fixtures' SentencePiece
    # model; no BPE pre-tokenizer involved), weights re-saved as BF16
    "gemma4": ([], None, None, None, True, None),
    "gemma4dense": ([], None, None, None, True, None),
    "gemma4moe": ([], None, None, None, True, None),
    "gemma3vlm": ([], None, None, None, True, None),
    "qwen2vl": ([], None, None, None, True, None),
    "qwen25vl": ([], None, None, None, True, None),
    "idefics3": ([], None, None, None, True, None),
}
GEMMA4_BUILDERS = {"gemma4": "e2b", "gemma4dense": "dense", "gemma4moe": "moe"}
# --mmproj fixtures: tools/vlm's builders (the same seeds as tests/data/vlm, so the projector
# converted here is the one tests/data/vlm's text model was recorded with)
MMPROJ_BUILDERS = {"gemma3vlm": "build_gemma3", "qwen2vl": "build_qwen2vl", "qwen25vl": "build_qwen25vl",
                   "idefics3": "build_idefics3"}
MOE_BUILDERS = ("gptoss", "deepseek2", "glm4moe")
HYBRID_BUILDERS = ("qwen35", "qwen35moe", "lfm2", "granitehybrid")
GEMMA_TEMPLATE = ("{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
                  "<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def write_spm_tokenizer(out: pathlib.Path) -> int:
    """tools/vlm's tiny SentencePiece model + the tokenizer.json / tokenizer_config.json that
    transformers' GemmaTokenizer writes for it (special pieces marked special, BOS added)."""
    import importlib.util

    import sentencepiece as spm
    from transformers import AutoTokenizer

    spec = importlib.util.spec_from_file_location("vlm_models", HERE / "vlm" / "hf_models.py")
    vlm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vlm)
    model = vlm.train_tokenizer(ARGS.work)
    shutil.copy(model, out / "tokenizer.model")
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "GemmaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
         "add_bos_token": True, "add_eos_token": False}))
    AutoTokenizer.from_pretrained(out).save_pretrained(out)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    cfg.pop("vocab_file", None)
    cfg["chat_template"] = GEMMA_TEMPLATE
    cfg["add_bos_token"], cfg["add_eos_token"] = True, False
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    return spm.SentencePieceProcessor(model_file=str(model)).vocab_size()


PHI3_ADDED = [("<|endoftext|>", True), ("<|assistant|>", True), ("<|end|>", True), ("<|user|>", False),
              ("<|placeholder1|>", False)]


def write_phi3_spm_tokenizer(out: pathlib.Path) -> int:
    """The tiny SentencePiece model as Phi-3-mini ships its tokenizer: tokenizer.model,
    tokenizer_config.json (LlamaTokenizer, added_tokens_decoder past the pieces: some special,
    some not) and the tokenizer.json transformers derives; returns the config vocab_size
    (padded past the added tokens, as Phi-3's 32064)."""
    n = write_spm_tokenizer(out)
    cfg = json.loads((out / "tokenizer_config.json").read_text())
    tok = json.loads((out / "tokenizer.json").read_text())
    cfg["tokenizer_class"] = "LlamaTokenizer"
    for k, (text, special) in enumerate(PHI3_ADDED):
        entry = {"content": text, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                 "special": special}
        cfg.setdefault("added_tokens_decoder", {})[str(n + k)] = entry
        tok["added_tokens"].append({"id": n + k, **entry})
    cfg["eos_token"] = "<|end|>"
    cfg["chat_template"] = TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
    (out / "tokenizer.json").write_text(json.dumps(tok, indent=1, ensure_ascii=False))
    return n + len(PHI3_ADDED) + 3


def write_tokenizer(fam: str, base: pathlib.Path, out: pathlib.Path, template_file: bool) -> int:
    from tokenizers import AddedToken, Tokenizer

    specials, bos, eos, pad, add_bos, _ = TOKENS[fam]
    tok_class = "GPT2Tokenizer" if fam == "phi3" else "PreTrainedTokenizerFast"
    tok = Tokenizer.from_file(str(base))
    n_base = tok.get_vocab_size()
    # <think> / </think> are added but not special in Qwen3: USER_DEFINED in the GGUF
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials if "think" not in t])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in specials if "think" in t])
    tok.save(str(out / "tokenizer.json"))
    cfg = {"tokenizer_class": tok_class, "model_max_length": 4096,
           "bos_token": bos, "eos_token": eos, "pad_token": pad, "add_bos_token": add_bos,
           "add_eos_token": False, "clean_up_tokenization_spaces": False}
    if template_file:
        (out / "chat_template.jinja").write_text(TEMPLATE)
    else:
        cfg["chat_template"] = TEMPLATE
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1, ensure_ascii=False))
    return n_base + len(specials)


def build(fam: str, out: pathlib.Path, base_tok: pathlib.Path) -> None:
    import torch
    import transformers as tf

    sys.path.insert(0, str(HERE / "moe"))
    import hf_models

    if fam in ("smollm3", "olmo2", "olmo3", "granite", "granitemoe"):
        sys.path.insert(0, str(HERE / "dense"))
        import dense_models

        assert dense_models.TOKPRE[fam] == TOKENS[fam][5]
        dense_models.BUILDERS[fam](out, base_tok)
        (out / "generation_config.json").unlink(missing_ok=True)
        return
    if fam == "mixtral":
        import importlib.util

        spec = importlib.util.spec_from_file_location("vlm_models", HERE / "vlm" / "hf_models.py")
        vlm = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(vlm)
        hf_models.build_mixtral(out, vlm.train_tokenizer(ARGS.work), 212)
        (out / "generation_config.json").unlink(missing_ok=True)
        return
    if fam in GEMMA4_BUILDERS:
        import importlib.util

        spec = importlib.util.spec_from_file_location("gemma4_hf_models", HERE / "gemma4" / "hf_models.py")
        g4 = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(g4)
        vspec = importlib.util.spec_from_file_location("vlm_models", HERE / "vlm" / "hf_models.py")
        vlm = importlib.util.module_from_spec(vspec)
        vspec.loader.exec_module(vlm)
        g4.BUILDERS[GEMMA4_BUILDERS[fam]](out, vlm.train_tokenizer(ARGS.work))
        (out / "generation_config.json").unlink(missing_ok=True)
        to_bf16(out)
        return
    if fam in HYBRID_BUILDERS:
        sys.path.insert(0, str(HERE / "hybrid"))
        import granitehybrid_models
        import lfm2_models
        import qwen35_models

        builders = {**qwen35_models.BUILDERS, **lfm2_models.BUILDERS, **granitehybrid_models.BUILDERS}
        builders[fam](out, base_tok)
        (out / "generation_config.json").unlink(missing_ok=True)
        to_bf16(out)
        return
    if fam == "gptossmxfp4":
        hf_models.BUILDERS["gptoss"](out, base_tok, None)
        (out / "generation_config.json").unlink(missing_ok=True)
        to_bf16(out)
        to_mxfp4_experts(out)
        return
    if fam in MOE_BUILDERS:
        hf_models.BUILDERS[fam](out, base_tok, None)
        (out / "generation_config.json").unlink(missing_ok=True)
        to_bf16(out)
        return
    if fam == "qwen3moe":
        hf_models.build_qwen3moe(out, base_tok, True, 111, n_layers=2, n_experts=4, moe_ffn=32)
        (out / "generation_config.json").unlink(missing_ok=True)
        return
    out.mkdir(parents=True)
    if fam in ("gemma3", "gemma2"):
        n_tok = write_spm_tokenizer(out)
    elif fam == "phi3spm":
        n_tok = write_phi3_spm_tokenizer(out)
    else:
        n_tok = write_tokenizer(fam, base_tok, out, template_file=(fam == "qwen3"))
    common = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6)
    if fam == "llama":
        # untied output, F32 weights, a vocab padded past the tokenizer's ids
        cfg = tf.LlamaConfig(vocab_size=n_tok + 6, tie_word_embeddings=False, rope_theta=500000.0,
                             bos_token_id=320, eos_token_id=321, **common)
        model, dtype, shard = tf.LlamaForCausalLM(cfg), torch.float32, None
    elif fam == "qwen2":
        # q/k/v biases, tied embeddings, BF16 weights, sharded safetensors
        cfg = tf.Qwen2Config(vocab_size=n_tok, tie_word_embeddings=True, rope_theta=1000000.0,
                             eos_token_id=322, **common)
        model, dtype, shard = tf.Qwen2ForCausalLM(cfg), torch.bfloat16, "60KB"
    elif fam == "gemma3":
        # Gemma 3 text: q/k norms, four norms per layer stored as (w - 1), sliding / full layers
        # with their own rope bases, linear rope scaling on the full layers, tied embeddings,
        # head_dim 32, an embedding padded past the tokenizer, F32 weights
        layer_types = ["sliding_attention", "full_attention"]
        cfg = tf.Gemma3TextConfig(
            vocab_size=n_tok + 8, head_dim=32, sliding_window=8, layer_types=layer_types,
            rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
                             "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
            query_pre_attn_scalar=32, bos_token_id=1, eos_token_id=2, pad_token_id=0,
            tie_word_embeddings=True, **common)
        model, dtype, shard = tf.Gemma3ForCausalLM(cfg), torch.float32, None
    elif fam in ("phi3", "phi3spm"):
        # fused qkv_proj and gate_up_proj, no sliding window (Phi-4 style), untied output, F32
        cfg = tf.Phi3Config(vocab_size=n_tok, tie_word_embeddings=False, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0}, original_max_position_embeddings=4096,
            sliding_window=None, bos_token_id=None, eos_token_id=n_tok - 1, pad_token_id=n_tok - 5,
            **common)
        model, dtype, shard = tf.Phi3ForCausalLM(cfg), torch.float32, None
    elif fam == "gemma2":
        # Gemma 2: attention and final logit soft-caps, sliding / global layers, four norms per
        # layer stored as (w - 1), tied embeddings, head_dim 32, BF16 weights
        cfg = tf.Gemma2Config(vocab_size=n_tok, head_dim=32, sliding_window=8, query_pre_attn_scalar=32,
                              attn_logit_softcapping=50.0, final_logit_softcapping=30.0,
                              rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                              bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=True,
                              **common)
        model, dtype, shard = tf.Gemma2ForCausalLM(cfg), torch.bfloat16, None
    else:
        # q/k norms, head_dim (32) != hidden / heads (16), BF16 weights
        cfg = tf.Qwen3Config(vocab_size=n_tok, tie_word_embeddings=False, head_dim=32, rope_theta=1000000.0,
                             eos_token_id=322, **common)
        model, dtype, shard = tf.Qwen3ForCausalLM(cfg), torch.bfloat16, None
    hf_models.randomize(model, seed=sum(map(ord, fam)))
    model = model.to(dtype)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(out, **kw)
    for extra in ("generation_config.json",):
        (out / extra).unlink(missing_ok=True)


def to_bf16(out: pathlib.Path) -> None:
    """Re-saves every floating tensor of out/'s safetensors as BF16 (half the committed size;
    also the dtype released checkpoints carry)."""
    import torch
    from safetensors.torch import load_file, save_file

    for f in sorted(out.glob("*.safetensors")):
        sd = load_file(str(f))
        save_file({k: v.to(torch.bfloat16) if v.is_floating_point() else v for k, v in sd.items()}, str(f),
                  metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg["torch_dtype"] = cfg["dtype"] = "bfloat16"
    (out / "config.json").write_text(json.dumps(cfg, indent=1))


def to_mxfp4_experts(out: pathlib.Path) -> None:
    """gpt-oss's expert matrices replaced by MXFP4 ``*_blocks`` (n_expert, rows, cols / 32, 16)
    and ``*_scales`` (n_expert, rows, cols / 32) in the released layout (rows = outputs; gate and
    up rows interleaved), seeded random: any bytes are valid MXFP4."""
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    f = out / "model.safetensors"
    sd = load_file(str(f))
    rng = np.random.default_rng(7)
    for name in sorted(k for k in sd if k.endswith(("experts.gate_up_proj", "experts.down_proj"))):
        w = sd.pop(name)                      # (n_expert, cols, rows): input-major in transformers
        n_exp, cols, rows = w.shape
        blocks = rng.integers(0, 256, (n_exp, rows, cols // 32, 16), dtype=np.uint8)
        scales = rng.integers(119, 123, (n_exp, rows, cols // 32), dtype=np.uint8)  # 2^-8 .. 2^-5
        sd[name + "_blocks"] = torch.from_numpy(blocks)
        sd[name + "_scales"] = torch.from_numpy(scales)
    save_file(sd, str(f), metadata={"format": "pt"})
    cfg = json.loads((out / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    (out / "config.json").write_text(json.dumps(cfg, indent=1))


def chkhsh(hf_dir: pathlib.Path) -> str:
    """The pre-tokenizer hash exactly as convert_hf_to_gguf.py computes it (transformers)."""
    from transformers import AutoTokenizer

    lc = ARGS.sdist / "vendor" / "llama.cpp"
    src = (lc / "conversion" / "base.py").read_text()
    chktxt = src.split("chktxt = ", 1)[1].split("\n", 1)[0]
    text = eval(chktxt)  # the literal from the converter's own source
    ids = AutoTokenizer.from_pretrained(hf_dir).encode(text)
    return hashlib.sha256(str(ids).encode()).hexdigest()


def convert(fam: str, hf_dir: pathlib.Path, outtype: str, dst: pathlib.Path, extra: tuple = ()) -> None:
    lc = ARGS.sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    pre = TOKENS[fam][5]
    shim = [str(HERE / "moe" / "tokpre_shim.py"), pre] if pre else []
    cmd = [sys.executable, *shim, str(lc / "convert_hf_to_gguf.py"), str(hf_dir), *extra, "--outtype", outtype,
           "--outfile", str(dst)]
    log = ARGS.work / f"{fam}-{outtype}.log"
    with open(log, "w") as f:
        r = subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        raise SystemExit(f"converter failed for {fam} {outtype}: see {log}")


def record_logits(path: pathlib.Path):
    import numpy as np
    from llama_cpp import Llama

    llm = Llama(model_path=str(path), n_ctx=64, n_batch=64, n_threads=2, logits_all=True, verbose=False)
    llm.eval(PROMPT)
    rows = np.array(llm.scores[:len(PROMPT)], dtype=np.float32)
    llm.close()
    return rows


def main() -> None:
    import numpy as np

    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/convw"))
    ap.add_argument("--families", default=",".join(TOKENS))
    ARGS = ap.parse_args()
    ARGS.work.mkdir(parents=True, exist_ok=True)
    base_tok = moe_tok.train(ARGS.work)
    for fam in ARGS.families.split(","):
        print(f"[{fam}]", flush=True)
        if fam in MMPROJ_BUILDERS:
            make_mmproj(fam)
            continue
        out = DATA / fam
        shutil.rmtree(out, ignore_errors=True)
        hf_dir = out / "hf"
        build(fam, hf_dir, base_tok)
        ref = {"family": fam, "tokenizer_pre": TOKENS[fam][5],
               "chkhsh": chkhsh(hf_dir) if TOKENS[fam][5] else None,
               "prompt": PROMPT, "outtypes": {}}
        for outtype in OUTTYPES:
            dst = ARGS.work / f"{fam}-{outtype}.gguf"
            convert(fam, hf_dir, outtype, dst)
            ref["outtypes"][outtype] = gguf_digest(str(dst))
            if outtype == "f16":
                np.savez_compressed(out / "logits.npz", rows=record_logits(dst))
        (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")


def make_mmproj(fam: str) -> None:
    """A VLM folder and the reference's --mmproj digests (no logits: a projector alone
    generates nothing; the test pairs it with tests/data/vlm's text model)."""
    import importlib.util

    out = DATA / fam
    shutil.rmtree(out, ignore_errors=True)
    hf_dir = out / "hf"
    spec = importlib.util.spec_from_file_location("vlm_models", HERE / "vlm" / "hf_models.py")
    vlm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vlm)
    getattr(vlm, MMPROJ_BUILDERS[fam])(hf_dir, vlm.train_tokenizer(ARGS.work))
    (hf_dir / "generation_config.json").unlink(missing_ok=True)
    shutil.rmtree(hf_dir / "text", ignore_errors=True)  # idefics3's Llama copy of its text half
    ref = {"family": fam, "mmproj": True, "outtypes": {}}
    for outtype in OUTTYPES:
        dst = ARGS.work / f"{fam}-mmproj-{outtype}.gguf"
        convert(fam, hf_dir, outtype, dst, ("--mmproj",))
        ref["outtypes"][outtype] = gguf_digest(str(dst))
    if fam in TEXT_TOO:  # the text model of the same folder, as the converter writes it
        ref["text_outtypes"] = {}
        for outtype in ("f16", "q8_0"):
            dst = ARGS.work / f"{fam}-text-{outtype}.gguf"
            convert(fam, hf_dir, outtype, dst)
            ref["text_outtypes"][outtype] = gguf_digest(str(dst))
    (out / "reference.json").write_text(json.dumps(ref, indent=1, ensure_ascii=False) + "\n")
    if fam not in TEXT_TOO:
        strip_text_model(hf_dir)


# VLM folders whose text model is converted too (kept whole; the others keep only what --mmproj reads)
TEXT_TOO = ("gemma3vlm", "qwen2vl", "qwen25vl")
# what --mmproj reads of a VLM folder: the tower and projector tensors, config.json and the
# preprocessor config; the text model and tokenizer are dropped after recording (half the size)
TEXT_TENSORS = ("lm_head.", "model.language_model.", "language_model.", "model.text_model.", "model.layers.",
                "model.embed_tokens.", "model.norm.")


def strip_text_model(hf_dir: pathlib.Path) -> None:
    from safetensors.torch import load_file, save_file

    for f in sorted(hf_dir.glob("*.safetensors")):
        sd = load_file(str(f))
        save_file({k: v for k, v in sd.items() if not k.startswith(TEXT_TENSORS)}, str(f), metadata={"format": "pt"})
    for name in ("tokenizer.model", "tokenizer.json", "tokenizer_config.json"):
        (hf_dir / name).unlink(missing_ok=True)


ARGS = None

if __name__ == "__main__":
    main()
