"""Perplexity of one text under several engine configurations, paired token by token
(issue 13: "Gemma 3 270M on lavapipe matches the CPU's perplexity within 0.5 %").

Each configuration runs in its own process (so LLAMAPY_ISA and the Vulkan driver apply to it
alone) and writes the negative log-likelihood of every scored token. The text is cut into
windows of --ctx tokens (BOS first, as llama.cpp's perplexity does); every token after a
window's first is scored from that window's logits.

Why paired: a model like Gemma 3 amplifies rounding differences layer by layer (the CPU's own
ISA levels give logits a few per cent apart after 18 layers), so two perplexities of a few
hundred tokens differ by noise of about that size. The per-token NLL differences give the
ratio exp(mean) and its standard error, which says how much of a gap is noise.

    python benchmarks/perplexity_backends.py --configs cpu,cpu:avx2,cpu:scalar,cpu:flash,vulkan:18 \\
        --tokens 1024 --ctx 512

Configurations: cpu[:ISA][:flash]; vulkan:NGL[:flash] (n_gpu_layers NGL, the build must have
the Vulkan backend; VK_ICD_FILENAMES picks the driver, e.g. Mesa's lavapipe). The first
configuration is the reference the others are compared with.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def worker(cfg: str, text_path: str, n_tokens: int, n_ctx: int, out: str) -> None:
    from llamapy import _engine as E
    from llamapy.default_model import default_model_path

    parts = cfg.split(":")
    flash = "flash" in parts[1:]
    ngl = int(parts[1]) if parts[0] == "vulkan" else 0
    from llamapy import Llama

    path = default_model_path()
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)
    text = open(text_path, encoding="utf-8").read()
    toks = vocab.tokenize(text.encode(), add_bos=False)[:n_tokens]
    bos = vocab.token_bos()
    model = E.Model(path)
    if len(toks) < n_tokens:
        raise SystemExit(f"the text has {len(toks)} tokens, fewer than --tokens {n_tokens}")
    ctx = E.Context(model, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=2, n_gpu_layers=ngl,
                    flash_attn=flash)
    nll = []
    t0 = time.time()
    step = n_ctx - 1
    for lo in range(0, len(toks), step):
        window = [bos] + toks[lo:lo + step]
        ctx.kv_clear()
        ctx.decode(tokens=window, pos=list(range(len(window))), seq_ids=[0] * len(window),
                   logits=[1] * len(window))
        logits = np.asarray(ctx.get_logits_all(), dtype=np.float64)
        for i in range(1, len(window)):
            row = logits[i - 1]
            m = row.max()
            nll.append(m + math.log(np.exp(row - m).sum()) - row[window[i]])
    np.save(out, np.array(nll))
    print(json.dumps({"config": cfg, "seconds": round(time.time() - t0, 1),
                      "placement": sorted({p["device"] for p in ctx.placement()})}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default="cpu,cpu:flash,vulkan:18")
    # A fixed text (the README of 2026-12-06), so perplexities stay comparable across runs.
    ap.add_argument("--text", default=os.path.join(REPO, "benchmarks", "data", "perplexity_text.md"))
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a.worker, a.text, a.tokens, a.ctx, a.out)
        return
    results, nlls = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for cfg in a.configs.split(","):
            env = dict(os.environ)
            isa = [p for p in cfg.split(":")[1:] if p in ("scalar", "avx2", "avx512")]
            if isa:
                env["LLAMAPY_ISA"] = isa[0]
            out = os.path.join(tmp, f"{len(nlls)}.npy")
            r = subprocess.run([sys.executable, __file__, "--worker", cfg, "--text", a.text, "--tokens",
                                str(a.tokens), "--ctx", str(a.ctx), "--out", out], env=env, capture_output=True,
                               text=True)
            if r.returncode:
                raise SystemExit(f"{cfg} failed:\n{r.stderr[-3000:]}")
            info = json.loads(r.stdout.strip().splitlines()[-1])
            nlls[cfg] = np.load(out)
            results.append(info)
    ref_cfg = next(iter(nlls))
    ref = nlls[ref_cfg]
    print(f"{len(ref)} scored tokens, windows of {a.ctx}, text {os.path.relpath(a.text, REPO)}")
    print(f"{'config':18s} {'ppl':>9s} {'vs ' + ref_cfg:>14s} {'± 1 s.e.':>9s} {'seconds':>8s}")
    for info in results:
        d = nlls[info["config"]] - ref
        info["ppl"] = float(math.exp(nlls[info["config"]].mean()))
        info["ratio"] = float(math.exp(d.mean()))
        info["stderr"] = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else 0.0
        print(f"{info['config']:18s} {info['ppl']:9.3f} {100 * (info['ratio'] - 1):+13.2f}% "
              f"{100 * info['stderr']:8.2f}% {info['seconds']:8.1f}")
    if a.json:
        json.dump({"reference": ref_cfg, "tokens": len(ref), "ctx": a.ctx, "results": results}, open(a.json, "w"),
                  indent=1)


if __name__ == "__main__":
    main()
