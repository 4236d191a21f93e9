"""Cross-checks llama.cpp's F16 recordings against `transformers` on the same checkpoint.

What this is: the HF float32 model (the one the GGUF was converted from) evaluated on each
prompt + llama.cpp's greedy continuation (one forward pass), compared with llama.cpp's F16
recording: the last prompt position's full logits, and at every generated step whether HF's
argmax equals llama.cpp's token. It shows the conversion and llama.cpp's graph reproduce the
HF architecture (or where they do not). It is a sanity record, not the reference.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import torch

import record as rec


def _top(row: np.ndarray, k: int) -> list:
    i = np.argsort(-row, kind="stable")[:k]
    return [[int(j), round(float(row[j]), 5)] for j in i]


def _truncate_yarn(cfg) -> None:
    cfg.rope_parameters["truncate"] = True


# Extra HF runs with one config value changed, to show which reading llama.cpp follows.
VARIANTS = {"gptoss": {"yarn_truncate_true": _truncate_yarn}}


def check(hf_dir: pathlib.Path, out: pathlib.Path, family: str) -> dict:
    res = _check(hf_dir, out, None)
    for name, fn in VARIANTS.get(family, {}).items():
        res.setdefault("variants", {})[name] = _check(hf_dir, out, fn)
    return res


def _check(hf_dir: pathlib.Path, out: pathlib.Path, change) -> dict:
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.from_pretrained(str(hf_dir))
    if change is not None:
        change(cfg)
    model = AutoModelForCausalLM.from_pretrained(str(hf_dir), config=cfg, dtype=torch.float32)
    model.eval()
    recd = json.loads((out / "record.json").read_text())["files"]["F16"]
    z = np.load(out / "logits.npz")
    res = {"what": "transformers float32 (attn_implementation "
                   f"{model.config._attn_implementation!r}) on the HF checkpoint vs llama.cpp "
                   "F16 with flash attention on (record.json)",
           "hf_config_changes": None if change is None else change.__name__,
           "prompts": []}
    for k, prompt in enumerate(rec.PROMPTS):
        e = recd["prompts"][k]
        seq = prompt + e["ids"]
        with torch.no_grad():
            lg = model(torch.tensor([seq])).logits[0].float().numpy()
        last = lg[len(prompt) - 1]
        steps, deltas = [], []
        for i, tok in enumerate(e["ids"]):
            row = lg[len(prompt) - 1 + i]
            steps.append({"agree": int(np.argmax(row)) == tok, "hf_top2": _top(row, 2),
                          "llama_cpp_top2": e["top10"][i][:2]})
            deltas.append(round(max(abs(float(row[j]) - v) for j, v in e["top10"][i]), 5))
        res["prompts"].append({
            "prompt_ids": prompt,
            "max_abs_last_logits_vs_llama_cpp_f16": round(
                float(np.max(np.abs(last - z[f"F16.p{k}.last_logits"]))), 6),
            "hf_last_top10": _top(last, 10),
            "steps_argmax_agree": sum(s["agree"] for s in steps),
            "steps_top10_delta": deltas,
            "disagreements": [dict(step=i, **s) for i, s in enumerate(steps) if not s["agree"]],
        })
    return res
