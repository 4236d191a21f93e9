"""Regenerates tests/data/hybrid/: tiny random hybrid GGUFs (Qwen3.5 dense and MoE, LFM2 and LFM2-MoE, Granite 4.0-H) and llama.cpp's outputs.

Usage (from the repo root; the same environment as tools/make_moe_fixtures.py: torch 2.13 CPU,
transformers 5.25, gguf, numpy, llama-cpp-python 0.3.36 with its sdist unpacked; none of this
is a llamapy dependency):

    python tools/make_hybrid_fixtures.py --sdist /tmp/llama_cpp_python-0.3.36 [--work /tmp/hybw]

Steps, all seeded: the MoE fixtures' tiny BPE (tools/moe/tokenizer.py) -> one HF checkpoint per
family (tools/hybrid/qwen35_models.py, with an MTP block; tools/hybrid/lfm2_models.py: lfm2, lfm2moe;
tools/hybrid/granitehybrid_models.py) -> convert_hf_to_gguf.py --outtype f16
(tools/moe/tokpre_shim.py: pre-tokenizer "qwen2") -> llama_model_quantize (Q8_0, Q4_K_M) ->
llama.cpp's recordings (tools/moe/record.py's, over this file's PROMPTS: the MoE prompts plus a
pair sharing a prefix, so a test can evaluate one after the other and compare the second with
llama.cpp's fresh evaluation of it) -> the transformers cross-check (tools/moe/hf_check.py) ->
manifest.json. A fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "moe"))
sys.path.insert(0, str(HERE / "hybrid"))
sys.path.insert(0, str(HERE))

import make_moe_fixtures as moe_fx  # noqa: E402  (convert / quantize / manifest helpers)
import granitehybrid_models  # noqa: E402
import lfm2_models  # noqa: E402
import qwen35_models  # noqa: E402
import record as rec  # noqa: E402
import tokenizer as moe_tok  # noqa: E402

REPO = HERE.parent
DATA = REPO / "tests" / "data" / "hybrid"
BUILDERS = {**qwen35_models.BUILDERS, **lfm2_models.BUILDERS, **granitehybrid_models.BUILDERS}
DOCS = {**qwen35_models.DOCS, **lfm2_models.DOCS, **granitehybrid_models.DOCS}
FAMILIES = list(BUILDERS)
QUANTS = ["Q8_0", "Q4_K_M"]
# The MoE prompts, then two sharing their first 12 ids (prefix reuse: the second after the first).
SHARED = [11, 42, 97, 150, 203, 260, 31, 77, 188, 5, 140, 222]
PROMPTS = rec.PROMPTS + [SHARED + [56, 90, 310, 12], SHARED + [7, 300, 45, 9, 120, 64]]


def convert(fam: str, hf_dir: pathlib.Path, out: pathlib.Path, sdist: pathlib.Path,
            work: pathlib.Path) -> pathlib.Path:
    import os

    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    (work / "logs").mkdir(exist_ok=True)
    f16 = out / f"{fam}-f16.gguf"
    conv = [sys.executable, str(HERE / "moe" / "tokpre_shim.py"), "qwen2",
            str(lc / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f16", "--outfile", str(f16)]
    moe_fx._run(conv, work / "logs" / f"{fam}-convert.log", env)
    return f16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/hybw"))
    ap.add_argument("--families", default=",".join(FAMILIES))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    rec.PROMPTS[:] = PROMPTS  # record.py and hf_check.py read this list
    moe_fx.DATA = DATA        # write_manifest's folder
    base_tok = moe_tok.train(args.work)
    for fam in args.families.split(","):
        print(f"[{fam}]", flush=True)
        out = DATA / fam
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        hf_dir = args.work / "hf" / fam
        shutil.rmtree(hf_dir, ignore_errors=True)
        cfg = BUILDERS[fam](hf_dir, base_tok)
        f16 = convert(fam, hf_dir, out, args.sdist, args.work)
        files = {"F16": f16.name}
        for q in QUANTS:
            dst = out / f"{fam}-{moe_fx.QUANTS[q][1]}.gguf"
            moe_fx.quantize(f16, dst, q)
            files[q] = dst.name
        (out / "hf_config.json").write_text(json.dumps(
            {"family": fam, "doc": DOCS[fam], "files": files, "config": cfg,
             "tokenizer_pre_via_shim": "qwen2",
             "tensor_types": {k: moe_fx.gguf_tensor_types(out / v) for k, v in files.items()}},
            indent=1, default=str, ensure_ascii=False) + "\n")
        shutil.copy(hf_dir / "config.json", out / "config.json")
        import numpy as np

        result = {"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, AVX2 build",
                  "n_threads": rec.N_THREADS, "n_ctx": rec.N_CTX, "n_batch": rec.N_BATCH,
                  "steps": rec.N_STEPS, "shared_prefix": {"prompts": [len(PROMPTS) - 2, len(PROMPTS) - 1],
                                                          "n_shared": len(SHARED)},
                  "versions": moe_fx.versions(), "files": {}}
        arrays: dict = {}
        for q, name in files.items():
            result["files"][q] = {"file": name, **rec.record_file(str(out / name), q, arrays)}
            print(f"  {fam} {q}: recorded", flush=True)
        np.savez_compressed(out / "logits.npz", **arrays)
        (out / "record.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        import hf_check

        try:
            chk = hf_check.check(hf_dir, out, fam)
        except Exception as e:
            chk = {"error": repr(e)}
            traceback.print_exc()
        (out / "transformers_check.json").write_text(json.dumps(chk, indent=1) + "\n")
    moe_fx.write_manifest()


if __name__ == "__main__":
    main()
