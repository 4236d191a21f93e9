"""Record llama-imatrix's output for tests/test_imatrix.py. Run by hand where
llama-imatrix is built from the 0.3.36 sdist's llama.cpp (cmake
-DGGML_NATIVE=OFF -DGGML_AVX2=ON, target llama-imatrix), after llamapy is built:

    python tools/record_imatrix_fixtures.py --bin /tmp/x/lpp-build/bin/llama-imatrix [--out tests/data/imatrix]

It writes into --out, over tests/data/perplexity/text.txt with -c 64 -t 2:
  granite-f16.imatrix.gguf     llama-imatrix on the tiny Granite F16 model (dense)
  granitemoe-f16.imatrix.gguf  llama-imatrix on the tiny Granite MoE F16 model
                               (router and expert products: per-expert sums and counts)
  ours-resaved.imatrix.gguf    llamapy's file for Granite F16, loaded by llama-imatrix
                               (--in-file, no text: it only re-saves): llama.cpp reads ours
  record.json                  the commands and llama-imatrix's printed final perplexity
Each file is 10-40 KB. With --gemma it also runs llama-imatrix on the exact F16 copy of
Gemma 3 270M (tests/float_model.py) at -c 128 and keeps, in gemma-f16.json (its whole file
would be 500 KB), every matrix's count, the sum of its sums and its sums at 32 fixed columns
(every n_cols // 32-th), and llama-imatrix's own spread: the largest relative change of a sum
with -ub 32 and with flash attention off against the default run.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TEXT = DATA / "perplexity" / "text.txt"
THREADS, N_CTX = 2, 64
MODELS = {"granite-f16": DATA / "dense" / "granite" / "granite-f16.gguf",
          "granitemoe-f16": DATA / "dense" / "granitemoe" / "granitemoe-f16.gguf"}


def run(cmd) -> str:
    cmd = [str(c) for c in cmd]
    print(" ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout + "\n" + p.stderr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="llama-imatrix")
    ap.add_argument("--out", default=str(DATA / "imatrix"))
    ap.add_argument("--gemma", action="store_true", help="also the Gemma 3 270M F16 summary")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from llamapy.imatrix import compute_imatrix, write_imatrix

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    text_arg = TEXT.relative_to(ROOT)  # the dataset name the files record
    rec = {"tool": "llama-imatrix (llama.cpp of llama-cpp-python 0.3.36, AVX2 build)", "threads": THREADS,
           "n_ctx": N_CTX, "text": str(text_arg), "runs": {}}
    for name, model in MODELS.items():
        dst = out / f"{name}.imatrix.gguf"
        args = [a.bin, "-m", model.relative_to(ROOT), "-f", text_arg, "-c", N_CTX, "-t", THREADS, "-o", dst]
        text = run(args)
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", text)
        rec["runs"][name] = {"command": " ".join(str(x) for x in args[1:-2]) + " -o " + dst.name,
                             "ppl": float(m.group(1)), "ppl_unc": float(m.group(2))}
    from llamapy.imatrix import read_imatrix

    with tempfile.TemporaryDirectory() as tmp:
        # llama-imatrix's own spread: the same run with one chunk per batch (-b 64)
        # instead of 32 chunks side by side; the largest relative change of a sum.
        for name, model in MODELS.items():
            other = Path(tmp) / f"{name}-b64.gguf"
            run([a.bin, "-m", model, "-f", TEXT, "-c", N_CTX, "-b", N_CTX, "-t", THREADS, "-o", other])
            x, y = read_imatrix(str(out / f"{name}.imatrix.gguf")), read_imatrix(str(other))
            rec["runs"][name]["self_max_rel_b64"] = max(
                float(np.max(np.abs(y["entries"][k][0] - s) / np.maximum(np.abs(s), 1e-30)))
                for k, (s, _) in x["entries"].items())
        ours = Path(tmp) / "ours.imatrix.gguf"
        res = compute_imatrix(str(MODELS["granite-f16"]), TEXT.read_bytes().removesuffix(b"\n"), n_ctx=N_CTX,
                              n_threads=THREADS)
        write_imatrix(str(ours), res, [str(text_arg)])
        run([a.bin, "-m", MODELS["granite-f16"], "--in-file", ours, "-o", out / "ours-resaved.imatrix.gguf"])
    (out / "record.json").write_text(json.dumps(rec, indent=1) + "\n")
    if a.gemma:
        record_gemma(a.bin, out)
    print(f"wrote {out}", file=sys.stderr)


GEMMA_CTX, GEMMA_SAMPLES = 128, 32


def gemma_sample(sums: np.ndarray) -> list:
    """The sums at GEMMA_SAMPLES fixed columns of each matrix row."""
    step = max(sums.shape[1] // GEMMA_SAMPLES, 1)
    return [float(v) for v in sums[:, ::step][:, :GEMMA_SAMPLES].reshape(-1)]


def record_gemma(bin_path: str, out: Path) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from float_model import write_float_copy
    from llamapy.default_model import default_model_path
    from llamapy.imatrix import read_imatrix

    with tempfile.TemporaryDirectory() as tmp:
        f16 = write_float_copy(default_model_path(), str(Path(tmp) / "gemma-f16.gguf"), "F16")
        runs = {}
        for key, extra in (("default", []), ("ub32", ["-b", GEMMA_CTX, "-ub", 32]), ("fa_off", ["-fa", "off"])):
            dst = Path(tmp) / f"{key}.gguf"
            run([bin_path, "-m", f16, "-f", TEXT.relative_to(ROOT), "-c", GEMMA_CTX, "-t", THREADS, *extra, "-o", dst])
            runs[key] = read_imatrix(str(dst))
        base = runs["default"]
        spread = {k: max(float(np.max(np.abs(runs[k]["entries"][n][0] - s) / np.abs(s)))
                         for n, (s, _) in base["entries"].items()) for k in ("ub32", "fa_off")}
        summary = {"n_ctx": GEMMA_CTX, "chunk_count": base["chunk_count"], "self_max_rel": spread,
                   "samples": GEMMA_SAMPLES,
                   "entries": {n: {"counts": [int(c) for c in cnt], "total": float(np.sum(s, dtype=np.float64)),
                                   "sampled": gemma_sample(s)} for n, (s, cnt) in sorted(base["entries"].items())}}
    (out / "gemma-f16.json").write_text(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
