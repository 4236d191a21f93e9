"""Regenerates tests/data/vlm/: tiny random vision-language GGUFs and llama.cpp's outputs.

Usage (from the repo root; needs torch 2.13 CPU, transformers, sentencepiece, safetensors,
pillow, gguf, and llama-cpp-python 0.3.36 with its sdist unpacked for the converters):

    tar xzf llama_cpp_python-0.3.36.tar.gz -C /tmp
    tools/vlm/build_libmtmd.sh /tmp/llama_cpp_python-0.3.36 /tmp/vlm_mtmd
    MTMD_CPP_LIB=/tmp/vlm_mtmd python tools/make_vlm_fixtures.py \
        --sdist /tmp/llama_cpp_python-0.3.36 [--work /tmp/vlmw] [--types llava15,gemma3]

Steps, all seeded: images -> shared SentencePiece tokenizer -> one HF checkpoint per type
(tools/vlm/hf_models.py) -> convert_hf_to_gguf.py (text, F16) and --mmproj (F16, Q8_0);
LLaVA 1.5/1.6 projectors go through the legacy convert_image_encoder_to_gguf.py -> record
captions, image chunks, projector embeddings and preprocessed pixels (tools/vlm/record.py)
-> manifest.json with sizes and sha256 of every file. This script is a fixture generator,
not part of llamapy.
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
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "vlm"))

import hf_models  # noqa: E402
import images as image_gen  # noqa: E402

REPO = HERE.parent
DATA = REPO / "tests" / "data" / "vlm"
TYPES = ["llava15", "llava16", "gemma3", "idefics3", "qwen2vl", "qwen25vl"]
Q8_TYPES = {"gemma3", "idefics3", "qwen2vl", "qwen25vl"}  # converter-written projectors


def _run(cmd: list[str], log: pathlib.Path, env: dict) -> None:
    with open(log, "w") as f:
        rc = subprocess.call(["nice", "-n", "5"] + cmd, stdout=f, stderr=subprocess.STDOUT,
                             env=env)
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} failed (rc={rc}), see {log}")


def convert(kind: str, hf_dir: pathlib.Path, out: pathlib.Path, sdist: pathlib.Path,
            work: pathlib.Path) -> dict:
    """Writes <kind>-text-f16.gguf and <kind>-mmproj-f16.gguf (+ -q8_0) into out/."""
    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    conv = [sys.executable, str(lc / "convert_hf_to_gguf.py")]
    logs = work / "logs"
    logs.mkdir(exist_ok=True)
    files = {}
    text_dir = hf_dir / "text" if kind in ("idefics3", "llava16") else hf_dir
    text = out / f"{kind}-text-f16.gguf"
    _run(conv + [str(text_dir), "--outtype", "f16", "--outfile", str(text)],
         logs / f"{kind}-text.log", env)
    files["text_f16"] = text.name
    mm = out / f"{kind}-mmproj-f16.gguf"
    if kind in ("llava15", "llava16"):
        tmp = work / f"{kind}-mm"
        shutil.rmtree(tmp, ignore_errors=True)
        legacy = lc / "tools" / "mtmd" / "legacy-models" / "convert_image_encoder_to_gguf.py"
        _run([sys.executable, str(HERE / "vlm" / "legacy_llava_shim.py"), str(legacy),
              "-m", str(hf_dir / "vision"), "--llava-projector", str(hf_dir / "llava.projector"),
              "--clip-model-is-vision", "--projector-type", "mlp", "-o", str(tmp)],
             logs / f"{kind}-mmproj.log", env)
        shutil.move(tmp / "mmproj-model-f16.gguf", mm)
    else:
        _run(conv + [str(hf_dir), "--mmproj", "--outtype", "f16", "--outfile", str(mm)],
             logs / f"{kind}-mmproj.log", env)
    files["mmproj_f16"] = mm.name
    if kind in Q8_TYPES:
        q8 = out / f"{kind}-mmproj-q8_0.gguf"
        _run(conv + [str(hf_dir), "--mmproj", "--outtype", "q8_0", "--outfile", str(q8)],
             logs / f"{kind}-mmproj-q8.log", env)
        files["mmproj_q8_0"] = q8.name
    return files


def record(kind: str, out: pathlib.Path, files: dict, imgs: list[pathlib.Path]) -> dict:
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama, mtmd_cpp
    from llama_cpp.llama_chat_format import (Llava15ChatHandler, Llava16ChatHandler,
                                             MTMDChatHandler)

    import record as rec

    handler_cls = {"llava15": Llava15ChatHandler,
                   "llava16": Llava16ChatHandler}.get(kind, MTMDChatHandler)
    text = str(out / files["text_f16"])
    result = {"handler": handler_cls.__name__, "prompt": rec.PROMPT,
              "sampling": {"temperature": 0.0, "repeat_penalty": 1.0, "seed": 0,
                           "max_tokens": rec.N_CAPTION},
              "n_ctx": rec.N_CTX, "n_threads": rec.N_THREADS, "images": {}}
    arrays: dict = {}
    llm = Llama(model_path=text, n_ctx=rec.N_CTX, n_threads=rec.N_THREADS, verbose=False)
    prompt_text = rec.render_prompt(llm.metadata["tokenizer.chat_template"])
    for img in imgs:
        entry: dict = {}
        for variant in [k for k in ("mmproj_f16", "mmproj_q8_0") if k in files]:
            try:
                entry[variant] = rec.record_chunks(mtmd_cpp, llama_cpp, llm,
                                                   str(out / files[variant]), img, arrays,
                                                   f"{img.name}.{variant}")
            except Exception as e:  # recorded, not hidden
                entry[variant] = {"error": repr(e)}
                traceback.print_exc()
        try:
            handler = handler_cls(clip_model_path=str(out / files["mmproj_f16"]), verbose=False)
            entry["caption_mmproj_f16"] = rec.record_caption(Llama, handler, text, img)
        except Exception as e:
            entry["caption_mmproj_f16"] = {"error": repr(e)}
            traceback.print_exc()
        try:
            entry["caption_mtmd_helper_mmproj_f16"] = rec.record_caption_mtmd(
                mtmd_cpp, llama_cpp, text, str(out / files["mmproj_f16"]), img, prompt_text)
        except Exception as e:
            entry["caption_mtmd_helper_mmproj_f16"] = {"error": repr(e)}
            traceback.print_exc()
        result["images"][img.name] = entry
        print(f"  {kind} {img.name}: done", flush=True)
    llm.close()
    np.savez_compressed(out / "arrays.npz", **arrays)
    result["arrays_file"] = "arrays.npz"
    return result


def _sha(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_manifest() -> None:
    entries = {}
    for p in sorted(DATA.rglob("*")):
        if p.is_file() and p.name not in ("manifest.json", "README.md"):
            entries[str(p.relative_to(DATA))] = {"bytes": p.stat().st_size, "sha256": _sha(p)}
    (DATA / "manifest.json").write_text(json.dumps(entries, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True)
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/vlmw"))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--skip-record", action="store_true")
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    imgs = image_gen.write_images(DATA / "images")
    spm_model = hf_models.train_tokenizer(args.work)
    shutil.copy(spm_model, DATA / "tokenizer.model")
    for kind in args.types.split(","):
        print(f"[{kind}]", flush=True)
        out = DATA / kind
        out.mkdir(parents=True, exist_ok=True)
        hf_dir = args.work / "hf" / kind
        shutil.rmtree(hf_dir, ignore_errors=True)
        try:
            cfg = hf_models.BUILDERS[kind](hf_dir, spm_model)
            files = convert(kind, hf_dir, out, args.sdist, args.work)
        except Exception as e:
            (out / "FAILED.txt").write_text(f"build/convert failed: {e!r}\n")
            traceback.print_exc()
            continue
        (out / "hf_config.json").write_text(json.dumps(
            {"builder": kind, "doc": hf_models.BUILDERS[kind].__doc__, "files": files,
             "config": cfg}, indent=1, default=str) + "\n")
        if not args.skip_record:
            result = record(kind, out, files, imgs)
            result["files"] = files
            (out / "record.json").write_text(json.dumps(result, indent=1) + "\n")
    write_manifest()


if __name__ == "__main__":
    main()
