"""Regenerates tests/data/moe/: tiny random mixture-of-experts GGUFs and llama.cpp's outputs.

Usage (from the repo root; needs torch 2.13 CPU, transformers 5, tokenizers, sentencepiece,
safetensors, gguf, numpy and llama-cpp-python 0.3.36, with its sdist unpacked for the
converter; none of this is a llamapy dependency):

    tar xzf llama_cpp_python-0.3.36.tar.gz -C /tmp
    python tools/make_moe_fixtures.py --sdist /tmp/llama_cpp_python-0.3.36 \
        [--work /tmp/moew] [--families qwen3moe,mixtral,...] [--skip-record]

Steps, all seeded: shared tiny byte-level BPE (tools/moe/tokenizer.py) and the VLM fixtures'
SentencePiece model (tools/vlm/hf_models.py, for Mixtral) -> one HF checkpoint per family
(tools/moe/hf_models.py) -> convert_hf_to_gguf.py --outtype f16 (through
tools/moe/tokpre_shim.py for the BPE families) -> llama_model_quantize (Q8_0, Q4_K_M, and
MXFP4_MOE for gpt-oss) -> recordings (tools/moe/record.py) -> a cross-check of the F16
recording against transformers on the same checkpoint (tools/moe/hf_check.py) ->
manifest.json with size and sha256 of every file. This script is a fixture generator, not
part of llamapy.
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "moe"))

import hf_models  # noqa: E402
import tokenizer as moe_tok  # noqa: E402

REPO = HERE.parent
DATA = REPO / "tests" / "data" / "moe"
FAMILIES = ["qwen3moe", "qwen3moe_nonorm", "qwen3moe_kquant", "mixtral", "gptoss", "deepseek2",
            "glm4moe"]
# llama_ftype values (llama.h): name -> (ftype, file suffix)
QUANTS = {"Q8_0": (7, "q8_0"), "Q4_K_M": (15, "q4_k_m"), "MXFP4_MOE": (38, "mxfp4_moe")}
FAMILY_QUANTS = {f: ["Q8_0", "Q4_K_M"] for f in FAMILIES}
FAMILY_QUANTS["gptoss"] = ["Q8_0", "Q4_K_M", "MXFP4_MOE"]
# only the F16 file is made for the second Qwen3-MoE variant
FAMILY_QUANTS["qwen3moe_nonorm"] = []
# K-quant experts variant: only its Q4_K_M file is kept (the F16 source stays in --work)
FAMILY_QUANTS["qwen3moe_kquant"] = ["Q4_K_M"]
NO_F16 = {"qwen3moe_kquant"}


def _run(cmd: list[str], log: pathlib.Path, env: dict) -> None:
    with open(log, "w") as f:
        rc = subprocess.call(["nice", "-n", "5"] + cmd, stdout=f, stderr=subprocess.STDOUT,
                             env=env)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed (rc={rc}), see {log}")


def convert(fam: str, hf_dir: pathlib.Path, out: pathlib.Path, sdist: pathlib.Path,
            work: pathlib.Path) -> pathlib.Path:
    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    f16 = out / f"{fam}-f16.gguf"
    pre = hf_models.TOKPRE[fam]
    conv = [sys.executable]
    if pre is not None:
        conv += [str(HERE / "moe" / "tokpre_shim.py"), pre]
    conv += [str(lc / "convert_hf_to_gguf.py"), str(hf_dir), "--outtype", "f16",
             "--outfile", str(f16)]
    _run(conv, logs / f"{fam}-convert.log", env)
    return f16


def quantize(src: pathlib.Path, dst: pathlib.Path, qname: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = QUANTS[qname][0]
    params.nthread = 2
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(),
                                        ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama_model_quantize({qname}) rc={rc}")


def gguf_tensor_types(path: pathlib.Path) -> dict:
    """tensor name -> ggml type name, as written (read with llama.cpp's gguf-py)."""
    import gguf

    r = gguf.GGUFReader(str(path))
    return {t.name: t.tensor_type.name for t in r.tensors}


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest() -> None:
    entries = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "README.md"):
            entries[str(p.relative_to(DATA))] = {"bytes": p.stat().st_size, "sha256": _sha(p)}
    (DATA / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": sys.version.split()[0]}
    for p in ("torch", "transformers", "tokenizers", "sentencepiece", "safetensors", "gguf",
              "numpy", "llama_cpp_python"):
        try:
            out[p] = md.version(p)
        except Exception:
            out[p] = None
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/moew"))
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--skip-record", action="store_true")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    import importlib.util  # the VLM fixtures' SentencePiece trainer, loaded by path


    spec = importlib.util.spec_from_file_location("vlm_hf_models", HERE / "vlm" / "hf_models.py")
    vlm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vlm)
    spm_model = vlm.train_tokenizer(args.work)
    base_tok = moe_tok.train(args.work)
    for fam in args.families.split(","):
        print(f"[{fam}]", flush=True)
        out = DATA / fam
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        hf_dir = args.work / "hf" / fam
        shutil.rmtree(hf_dir, ignore_errors=True)
        files = {}
        try:
            cfg = hf_models.BUILDERS[fam](hf_dir, base_tok, spm_model)
            f16 = convert(fam, hf_dir, out, args.sdist, args.work)
            files["F16"] = f16.name
            for q in FAMILY_QUANTS[fam]:
                dst = out / f"{fam}-{QUANTS[q][1]}.gguf"
                try:
                    quantize(f16, dst, q)
                    files[q] = dst.name
                except Exception as e:
                    files[q] = {"error": repr(e)}
                    traceback.print_exc()
            if fam in NO_F16:
                shutil.move(f16, args.work / f16.name)
                del files["F16"]
        except Exception as e:
            (out / "FAILED.txt").write_text(f"build/convert failed: {e!r}\n")
            traceback.print_exc()
            continue
        hf_files = {p.name: p.stat().st_size for p in sorted(hf_dir.iterdir())}
        (out / "hf_config.json").write_text(json.dumps(
            {"family": fam, "doc": hf_models.DOCS[fam], "files": files,
             "tokenizer_pre_via_shim": hf_models.TOKPRE[fam], "config": cfg,
             "hf_checkpoint_files": hf_files,
             "tensor_types": {k: gguf_tensor_types(out / v) for k, v in files.items()
                              if isinstance(v, str)}},
            indent=1, default=str, ensure_ascii=False) + "\n")
        shutil.copy(hf_dir / "config.json", out / "config.json")
        if not args.skip_record:
            import numpy as np

            import record as rec

            result = {"reference": "llama-cpp-python 0.3.36 (llama.cpp vendored in it), CPU, "
                                   "AVX2 build", "n_threads": rec.N_THREADS, "n_ctx": rec.N_CTX,
                      "n_batch": rec.N_BATCH, "steps": rec.N_STEPS,
                      "versions": versions(), "files": {}}
            arrays: dict = {}
            for q, name in files.items():
                if not isinstance(name, str):
                    result["files"][q] = name
                    continue
                try:
                    result["files"][q] = {"file": name,
                                          **rec.record_file(str(out / name), q, arrays)}
                except Exception as e:
                    result["files"][q] = {"file": name, "error": repr(e)}
                    traceback.print_exc()
                print(f"  {fam} {q}: recorded", flush=True)
            np.savez_compressed(out / "logits.npz", **arrays)
            (out / "record.json").write_text(json.dumps(result, indent=1, ensure_ascii=False)
                                             + "\n")
            if "F16" in files:
                import hf_check

                try:
                    chk = hf_check.check(hf_dir, out, fam)
                except Exception as e:
                    chk = {"error": repr(e)}
                    traceback.print_exc()
                (out / "transformers_check.json").write_text(json.dumps(chk, indent=1) + "\n")
    write_manifest()


if __name__ == "__main__":
    main()
