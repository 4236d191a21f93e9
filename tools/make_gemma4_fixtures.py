"""Regenerates tests/data/gemma4/: tiny random Gemma 4 text GGUFs and llama.cpp's outputs.

Usage (from the repo root; the same environment as tools/make_moe_fixtures.py: torch 2.13 CPU,
transformers 5.25, tokenizers, sentencepiece, safetensors, gguf, numpy and llama-cpp-python
0.3.36, with its sdist unpacked for the converter; none of this is a llamapy dependency):

    python tools/make_gemma4_fixtures.py --sdist /tmp/llama_cpp_python-0.3.36 \
        [--work /tmp/g4w] [--variants e2b,dense,moe] [--skip-record]

Steps, all seeded: the VLM fixtures' SentencePiece model (tools/vlm/hf_models.py) rewritten as
a Gemma-style tokenizer.json (tools/gemma4/g4_tokenizer.py) -> one Gemma4ForCausalLM
checkpoint per variant (tools/gemma4/hf_models.py) -> convert_hf_to_gguf.py --outtype f16
(unpatched: Gemma 4's vocabulary path needs no shim) -> llama_model_quantize Q8_0 and Q4_K_M
-> recordings (tools/moe/record.py: greedy ids, top-10 logits per step, last-position logits,
flash on and off) -> a cross-check of the F16 recording against transformers on the same
checkpoint (tools/moe/hf_check.py) -> manifest.json with size and sha256 of every file.
This script is a fixture generator, not part of llamapy.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
import shutil
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
DATA = REPO / "tests" / "data" / "gemma4"
VARIANTS = ["e2b", "dense", "moe"]
QUANTS = ["Q8_0", "Q4_K_M"]


def _load(name: str, path: pathlib.Path):
    """A fixture module by path (tools/moe and tools/gemma4 both have an hf_models.py)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


moe = _load("make_moe_fixtures", HERE / "make_moe_fixtures.py")  # quantize, versions, _run, ...
g4 = _load("gemma4_hf_models", HERE / "gemma4" / "hf_models.py")
sys.path.insert(0, str(HERE / "moe"))
import record as rec  # noqa: E402  (tools/moe/record.py: the same prompts and recording)


def convert(variant: str, hf_dir: pathlib.Path, out: pathlib.Path, sdist: pathlib.Path,
            work: pathlib.Path) -> pathlib.Path:
    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    f16 = out / f"gemma4_{variant}-f16.gguf"
    moe._run([sys.executable, str(lc / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f16",
              "--outfile", str(f16)], logs / f"{variant}-convert.log", env)
    return f16


def write_manifest() -> None:
    import hashlib

    entries = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "README.md"):
            entries[str(p.relative_to(DATA))] = {"bytes": p.stat().st_size,
                                                 "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    (DATA / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/g4w"))
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--skip-record", action="store_true")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    vlm = _load("vlm_hf_models", HERE / "vlm" / "hf_models.py")
    spm_model = vlm.train_tokenizer(args.work)
    for v in args.variants.split(","):
        print(f"[{v}]", flush=True)
        out = DATA / v
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        hf_dir = args.work / "hf" / v
        shutil.rmtree(hf_dir, ignore_errors=True)
        files = {}
        try:
            cfg = g4.BUILDERS[v](hf_dir, spm_model)
            f16 = convert(v, hf_dir, out, args.sdist, args.work)
            files["F16"] = f16.name
            for q in QUANTS:
                dst = out / f"gemma4_{v}-{moe.QUANTS[q][1]}.gguf"
                try:
                    moe.quantize(f16, dst, q)
                    files[q] = dst.name
                except Exception as e:
                    files[q] = {"error": repr(e)}
                    traceback.print_exc()
        except Exception as e:
            (out / "FAILED.txt").write_text(f"build/convert failed: {e!r}\n")
            traceback.print_exc()
            continue
        hf_files = {p.name: p.stat().st_size for p in sorted(hf_dir.iterdir())}
        (out / "hf_config.json").write_text(json.dumps(
            {"variant": v, "doc": g4.DOCS[v], "files": files, "config": cfg,
             "hf_checkpoint_files": hf_files,
             "tensor_types": {k: moe.gguf_tensor_types(out / n) for k, n in files.items()
                              if isinstance(n, str)}},
            indent=1, default=str, ensure_ascii=False) + "\n")
        shutil.copy(hf_dir / "config.json", out / "config.json")
        if args.skip_record:
            continue
        import numpy as np

        result = {"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, AVX2 build",
                  "n_threads": rec.N_THREADS, "n_ctx": rec.N_CTX, "n_batch": rec.N_BATCH,
                  "steps": rec.N_STEPS, "versions": moe.versions(), "files": {}}
        arrays: dict = {}
        for q, name in files.items():
            if not isinstance(name, str):
                result["files"][q] = name
                continue
            try:
                result["files"][q] = {"file": name, **rec.record_file(str(out / name), q, arrays)}
            except Exception as e:
                result["files"][q] = {"file": name, "error": repr(e)}
                traceback.print_exc()
            print(f"  {v} {q}: recorded", flush=True)
        np.savez_compressed(out / "logits.npz", **arrays)
        (out / "record.json").write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
        import hf_check

        try:
            chk = hf_check.check(hf_dir, out, v)
        except Exception as e:
            chk = {"error": repr(e)}
            traceback.print_exc()
        (out / "transformers_check.json").write_text(json.dumps(chk, indent=1) + "\n")
    write_manifest()


if __name__ == "__main__":
    main()
