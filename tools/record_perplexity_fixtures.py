"""Record llama-perplexity's numbers for tests/test_perplexity.py. Run by hand
where llama-perplexity is built from the 0.3.36 sdist's llama.cpp
(cmake -DGGML_NATIVE=OFF -DGGML_AVX2=ON, target llama-perplexity):

    python tools/record_perplexity_fixtures.py --bin /tmp/x/lpp-build/bin/llama-perplexity \\
        [--gemma PATH] [--out tests/data/perplexity]

It writes into --out:
  record.json        llama-perplexity's outputs (see CASES and the keys below)
  granite-base.kld   llama-perplexity's --kl-divergence-base file of the tiny
                     Granite F16 model over the fixture text, -c 64 --chunks 4
                     (4 chunks x 31 scored rows x 328 uint16: 81 KB)

Cases, all with -t 2 and otherwise llama-perplexity's defaults (-b 2048):
  ppl     "Final estimate" and the running [i] estimates for the tiny Granite
          model (tests/data/dense/granite: it adds BOS, so BOS replacement is
          exercised) F16 and Q4_K_M at -c 128 (one batch of all chunks) and at
          -c 128 -b 32 (four batches per chunk), and for Gemma 3 270M Q4_K_M
          and its exact F16 copy (tests/float_model.py) at -c 128.
  kld     the final statistics of --kl-divergence: Granite Q4_K_M against
          llama-perplexity's own base file (granite-base.kld), Granite Q4_K_M
          against a base file written by llamapy (ours_base: llama.cpp reading
          our file), and Gemma Q4_K_M against the Gemma F16 copy's base file
          (99 MB, not kept).
The text is tests/data/perplexity/text.txt (original prose, 2.2 KB).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"
TEXT = DATA / "perplexity" / "text.txt"
GRANITE = DATA / "dense" / "granite"
THREADS = 2

_NUM = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?|nan|inf)"


def run(bin_path: str, args) -> str:
    cmd = [bin_path, "-t", str(THREADS), *map(str, args)]
    print(" ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"llama-perplexity failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return p.stdout + "\n" + p.stderr


def parse_ppl(text: str) -> dict:
    m = re.search(r"Final estimate: PPL = " + _NUM + r" \+/- " + _NUM, text)
    if not m:
        sys.exit("no final estimate in llama-perplexity's output:\n" + text[-3000:])
    running = [float(v) for v in re.findall(r"\[\d+\]" + _NUM + ",", text)]
    return {"ppl": float(m.group(1)), "ppl_unc": float(m.group(2)), "chunk_ppl": running}


def parse_kld(text: str) -> dict:
    """The final statistics block: {label: [value, uncertainty]} for lines
    with ±, {label: value} for the percentile lines (Δp ones in %)."""
    start = text.find("====== Perplexity statistics ======")
    if start < 0:
        sys.exit("no KL statistics in llama-perplexity's output:\n" + text[-3000:])
    out = {}
    for line in text[start:].splitlines():
        if ":" not in line or line.startswith("="):
            continue
        label, rest = line.split(":", 1)
        nums = re.findall(_NUM, rest.replace("%", " "))
        if not nums:
            continue
        out[" ".join(label.split())] = [float(v) for v in nums] if len(nums) > 1 else float(nums[0])
        if label.strip().startswith("Same top p"):
            break
    return out


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", required=True, help="llama-perplexity")
    ap.add_argument("--gemma", default=None, help="Gemma 3 270M Q4_K_M (default: llamapy's test model)")
    ap.add_argument("--out", default=str(DATA / "perplexity"))
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    sys.path.insert(0, str(ROOT))
    import llamapy
    from float_model import write_float_copy

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    from llamapy.default_model import default_model_path

    gemma = a.gemma or default_model_path()
    f16, q4 = GRANITE / "granite-f16.gguf", GRANITE / "granite-q4_k_m.gguf"
    rec = {"tool": "llama-perplexity (llama.cpp of llama-cpp-python 0.3.36, AVX2 build)", "threads": THREADS,
           "text": "perplexity/text.txt", "text_sha256": sha256(TEXT),
           "models": {"granite-f16": str(f16.relative_to(DATA)), "granite-q4_k_m": str(q4.relative_to(DATA)),
                      "gemma-q4_k_m_sha256": sha256(Path(gemma))},
           "ppl": {}, "kld": {}}
    for name, model in (("granite-f16", f16), ("granite-q4_k_m", q4)):
        for key, extra in (("c128", []), ("c128_b32", ["-b", 32])):
            rec["ppl"][f"{name}/{key}"] = parse_ppl(run(a.bin, ["-m", model, "-f", TEXT, "-c", 128, *extra]))

    base = out / "granite-base.kld"
    text = run(a.bin, ["-m", f16, "-f", TEXT, "-c", 64, "--chunks", 4, "--kl-divergence-base", base])
    rec["ppl"]["granite-f16/c64_chunks4_base"] = parse_ppl(text)
    rec["kld"]["granite-q4_k_m/llama_cpp_base"] = parse_kld(
        run(a.bin, ["-m", q4, "-c", 64, "--kl-divergence-base", base, "--kl-divergence"]))
    with tempfile.TemporaryDirectory() as tmp:
        ours = Path(tmp) / "ours.kld"
        llamapy.perplexity(str(f16), TEXT.read_bytes().removesuffix(b"\n"), n_ctx=64, n_chunks=4,
                           n_threads=THREADS, kl_divergence_base=str(ours))
        rec["kld"]["granite-q4_k_m/ours_base"] = parse_kld(
            run(a.bin, ["-m", q4, "-c", 64, "--kl-divergence-base", ours, "--kl-divergence"]))

        gemma_f16 = write_float_copy(gemma, str(Path(tmp) / "gemma-f16.gguf"), "F16")
        rec["ppl"]["gemma-q4_k_m/c128"] = parse_ppl(run(a.bin, ["-m", gemma, "-f", TEXT, "-c", 128]))
        gbase = Path(tmp) / "gemma-base.kld"
        rec["ppl"]["gemma-f16/c128"] = parse_ppl(
            run(a.bin, ["-m", gemma_f16, "-f", TEXT, "-c", 128, "--kl-divergence-base", gbase]))
        rec["kld"]["gemma-q4_k_m/gemma_f16_base"] = parse_kld(
            run(a.bin, ["-m", gemma, "-c", 128, "--kl-divergence-base", gbase, "--kl-divergence"]))
    rec["granite_base_sha256"] = sha256(base)
    (out / "record.json").write_text(json.dumps(rec, indent=1) + "\n")
    print(f"wrote {out / 'record.json'} and {base}", file=sys.stderr)


if __name__ == "__main__":
    main()
