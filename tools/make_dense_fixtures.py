"""Regenerates tests/data/dense/: tiny random GGUFs of the small dense families and llama.cpp's outputs.

Usage (from the repo root; the same environment as tools/make_moe_fixtures.py: torch 2.13 CPU,
transformers 5, tokenizers, safetensors, gguf, numpy and llama-cpp-python 0.3.36, with its
sdist unpacked for the converter; none of this is a llamapy dependency):

    python tools/make_dense_fixtures.py --sdist /tmp/llama_cpp_python-0.3.36 \
        [--work /tmp/densew] [--families smollm3,olmo2,...] [--skip-record]

The MoE fixtures' pipeline, reused by import: the shared tiny byte-level BPE
(tools/moe/tokenizer.py) -> one HF checkpoint per family (tools/dense/dense_models.py) ->
convert_hf_to_gguf.py --outtype f16 through tools/moe/tokpre_shim.py -> llama_model_quantize
(Q8_0, Q4_K_M) -> recordings (tools/moe/record.py) -> a cross-check of the F16 recording
against transformers (tools/moe/hf_check.py) -> manifest.json with size and sha256 of every
file. A fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "moe"))
sys.path.insert(0, str(HERE / "dense"))
sys.path.insert(0, str(HERE))

import dense_models  # noqa: E402
import make_moe_fixtures as moefx  # noqa: E402  (quantize, tensor types, versions, _run, _sha)
import tokenizer as moe_tok  # noqa: E402

REPO = HERE.parent
DATA = REPO / "tests" / "data" / "dense"
FAMILIES = list(dense_models.BUILDERS)
QUANTS = ["Q8_0", "Q4_K_M"]


def convert(fam: str, hf_dir: pathlib.Path, out: pathlib.Path, sdist: pathlib.Path,
            work: pathlib.Path) -> pathlib.Path:
    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    (work / "logs").mkdir(exist_ok=True)
    f16 = out / f"{fam}-f16.gguf"
    cmd = [sys.executable, str(HERE / "moe" / "tokpre_shim.py"), dense_models.TOKPRE[fam],
           str(lc / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f16", "--outfile", str(f16)]
    moefx._run(cmd, work / "logs" / f"{fam}-convert.log", env)
    return f16


def write_manifest() -> None:
    entries = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "README.md"):
            entries[str(p.relative_to(DATA))] = {"bytes": p.stat().st_size, "sha256": moefx._sha(p)}
    (DATA / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")


def record_family(fam: str, out: pathlib.Path, files: dict, hf_dir: pathlib.Path) -> None:
    import numpy as np

    import hf_check
    import record as rec

    result = {"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, AVX2 build",
              "n_threads": rec.N_THREADS, "n_ctx": rec.N_CTX, "n_batch": rec.N_BATCH,
              "steps": rec.N_STEPS, "versions": moefx.versions(), "files": {}}
    arrays: dict = {}
    for q, name in files.items():
        try:
            result["files"][q] = {"file": name, **rec.record_file(str(out / name), q, arrays)}
        except Exception as e:  # kept as data: what llama.cpp refused
            result["files"][q] = {"file": name, "error": repr(e)}
            traceback.print_exc()
        print(f"  {fam} {q}: recorded", flush=True)
    np.savez_compressed(out / "logits.npz", **arrays)
    (out / "record.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    try:
        chk = hf_check.check(hf_dir, out, fam)
    except Exception as e:
        chk = {"error": repr(e)}
        traceback.print_exc()
    (out / "transformers_check.json").write_text(json.dumps(chk, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/densew"))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--skip-record", action="store_true")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    base_tok = moe_tok.train(args.work)
    for fam in args.families.split(","):
        print(f"[{fam}]", flush=True)
        out = DATA / fam
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        hf_dir = args.work / "hf" / fam
        shutil.rmtree(hf_dir, ignore_errors=True)
        cfg = dense_models.BUILDERS[fam](hf_dir, base_tok)
        f16 = convert(fam, hf_dir, out, args.sdist, args.work)
        files = {"F16": f16.name}
        for q in QUANTS:
            dst = out / f"{fam}-{moefx.QUANTS[q][1]}.gguf"
            moefx.quantize(f16, dst, q)
            files[q] = dst.name
        (out / "hf_config.json").write_text(json.dumps(
            {"family": fam, "doc": dense_models.DOCS[fam], "files": files,
             "tokenizer_pre_via_shim": dense_models.TOKPRE[fam], "config": cfg,
             "hf_checkpoint_files": {p.name: p.stat().st_size for p in sorted(hf_dir.iterdir())},
             "tensor_types": {k: moefx.gguf_tensor_types(out / v) for k, v in files.items()}},
            indent=1, default=str, ensure_ascii=False) + "\n")
        shutil.copy(hf_dir / "config.json", out / "config.json")
        if not args.skip_record:
            record_family(fam, out, files, hf_dir)
    write_manifest()


if __name__ == "__main__":
    main()
