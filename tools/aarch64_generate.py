"""Greedy generation with the Gemma 3 270M test model, for
tools/aarch64_python_check.sh: run once by the x86 interpreter and once by
the aarch64 one under qemu, the two outputs are compared by --compare.

  python tools/aarch64_generate.py MODEL N_PROMPTS N_TOKENS > out.json
  python tools/aarch64_generate.py --compare x86.json aarch64.json
  python tools/aarch64_generate.py --compare-exact x86.json aarch64.json

The prompts (token ids) are the first N_PROMPTS of
tests/data/gemma3_llama_cpp_margins.json; each output records the greedy
tokens, the top-1/top-2 logit margin at every step, the ISA level and the
llama.cpp reference continuation (for the report).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "gemma3_llama_cpp_margins.json"


def generate(model: str, n_prompts: int, n_tokens: int) -> dict:
    import numpy as np

    import llamapy
    from llamapy import Llama

    ref = json.loads(DATA.read_text())
    llm = Llama(model, n_ctx=256, n_threads=2, verbose=False)
    cases = []
    for case in ref["greedy"][:n_prompts]:
        llm.reset()
        llm.eval(case["prompt_ids"])
        out, margins = [], []
        for _ in range(n_tokens):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float64)
            top = np.argsort(row)[::-1][:2]
            out.append(int(top[0]))
            margins.append(float(row[top[0]] - row[top[1]]))
            llm.eval([out[-1]])
        cases.append({"prompt": case["prompt"], "ids": out, "margins": margins,
                      "llama_cpp": case["ids"][:n_tokens]})
    llm.close()
    return {"system_info": llamapy.system_info(), "noise": ref["batch_vs_step_top10_max_diff"], "cases": cases}


def compare_exact(a_path: str, b_path: str) -> int:
    """0 when both runs gave the same tokens and bit-identical margins (the
    scalar level: the same C++ on both architectures, -ffp-contract=off)."""
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    same = [ca["ids"] == cb["ids"] and ca["margins"] == cb["margins"] for ca, cb in zip(a["cases"], b["cases"])]
    print(f"  scalar level: {sum(same)}/{len(same)} continuations bit-identical to x86 (tokens and logit margins)")
    return 0 if all(same) and len(same) == len(a["cases"]) == len(b["cases"]) else 1


def compare(a_path: str, b_path: str) -> int:
    """A is x86's output file, or "-" for llama.cpp's continuations.
    0 when every continuation is identical, or leaves the other at a
    near-tie (top-1/top-2 margin within llama.cpp's own batch-vs-step noise
    on both sides); 1 otherwise."""
    b = json.loads(Path(b_path).read_text())
    if a_path == "-":  # no x86 build: llama.cpp's continuations, its own margins
        ref = json.loads(DATA.read_text())
        a = {"noise": ref["batch_vs_step_top10_max_diff"], "cases": [
            {"prompt": c["prompt"], "ids": c["ids"][: len(cb["ids"])],
             "margins": [t2[0][1] - t2[1][1] for t2 in c["top2"][: len(cb["ids"])]]}
            for c, cb in zip(ref["greedy"], b["cases"])]}
        other = "llama.cpp"
    else:
        a = json.loads(Path(a_path).read_text())
        other = "x86"
    noise = a["noise"]
    status, identical = 0, 0
    for ca, cb in zip(a["cases"], b["cases"]):
        d = next((i for i, (x, y) in enumerate(zip(ca["ids"], cb["ids"])) if x != y), None)
        lc = next((i for i, (x, y) in enumerate(zip(cb["ids"], cb["llama_cpp"])) if x != y), None)
        vs_lc = "same as llama.cpp" if lc is None else f"leaves llama.cpp at token {lc}"
        if d is None:
            identical += 1
            print(f"  identical ({len(ca['ids'])} tokens, {vs_lc}): {ca['prompt']!r}")
            continue
        near_tie = ca["margins"][d] <= noise and cb["margins"][d] <= noise
        print(f"  {'near tie' if near_tie else 'DIFFERENT'} at token {d} (margins {other} {ca['margins'][d]:.3f}, "
              f"aarch64 {cb['margins'][d]:.3f}, noise {noise:.3f}): {ca['prompt']!r}\n"
              f"    {other:9} {ca['ids']}\n    {'aarch64':9} {cb['ids']}")
        if not near_tie:
            status = 1
    print(f"  greedy: {identical}/{len(a['cases'])} continuations identical to {other}")
    return status


if __name__ == "__main__":
    if sys.argv[1] == "--compare":
        sys.exit(compare(sys.argv[2], sys.argv[3]))
    if sys.argv[1] == "--compare-exact":
        sys.exit(compare_exact(sys.argv[2], sys.argv[3]))
    json.dump(generate(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])), sys.stdout)
