"""Side-by-side multimodal benchmark: llamapy against llama.cpp (llama-cpp-python + libmtmd)
on a CLIP-L-sized random LLaVA 1.5 model, at 2 threads (issue 11).

The model: tools/vlm/make_bench_projector.py (CLIP ViT-L/14 at 336 px, 23 of 24 blocks run,
F16 projector, a 2-layer n_embd-2048 Llama), in benchmarks/out/vlm-bench/. The images:
tests/data/vlm/images/ (PNG/JPEG; every one becomes one 336x336 chunk of 576 tokens).

Two kinds of worker process, one process per side and kind, the sides alternating rep after
rep (A B A B); medians over images within a rep, then over reps:
  encode       one image chunk through the vision tower + projector, preprocessing excluded:
               llamapy ``VisionEncoder.encode_image(preprocess(...))`` (flash_attn "auto", as for a
               default Llama: flash attention for these 577 rows; side ``llamapy_explicit``: off,
               here and through ``Llama(flash_attn=False)`` for chat); llama.cpp
               ``mtmd_encode_chunk`` on the chunk ``mtmd_tokenize`` made (ctypes on libmtmd,
               flash attention off as Llava15ChatHandler sets it for a default Llama;
               side ``llama_cpp_fa``: on, here and, through ``Llama(flash_attn=True)``, in
               the text model and the handler's mtmd context for chat). One untimed
               warm-up encode, then --encodes timed encodes per image.
  chat         (1) first_token: a captioning request (``create_chat_completion`` with
               Llava15ChatHandler, image + "Describe this image.", max_tokens=1,
               temperature 0) on an image the process has not seen (the last image is the
               untimed warm-up): decode + preprocess + encode + prompt evaluation + one token.
               (2) second_turn: a follow-up about the same image (the caption request again
               with max_tokens=8, its reply appended as the assistant turn, then a new user
               question, max_tokens=1): the second turn's time to first token.
               llama-cpp-python clears the KV cache and re-encodes on every multimodal call;
               llamapy reuses the image embedding and the evaluated prefix.
Wall seconds and CPU seconds of the process (time.process_time, all threads) are reported;
on a shared machine the CPU seconds are the steadier number.

llamapy is the package ``import llamapy`` finds (PYTHONPATH, an installed one), else this
checkout's. llama-cpp-python is the one ``import llama_cpp`` finds, or --llama-cpp-site DIR
(a ``pip install --target`` folder) put first on sys.path in its workers only. A source
build of 0.3.36 ships libmtmd.so in llama_cpp/lib/; for an install without it, build one with
tools/vlm/build_libmtmd.sh and set MTMD_CPP_LIB, as for tools/vlm/record.py.

    python benchmarks/multimodal.py --llama-cpp-site /tmp/lcp/native-site \\
        --sides llamapy,llama_cpp,llama_cpp_fa --reps 3 --json out.json
"""
from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH_DIR = os.path.join(HERE, "out", "vlm-bench")
TEXT = os.path.join(BENCH_DIR, "llava15-bench-text-f16.gguf")
MMPROJ = os.path.join(BENCH_DIR, "llava15-bench-mmproj-f16.gguf")
IMAGES = os.path.join(REPO, "tests", "data", "vlm", "images")
PROMPT = "Describe this image."
FOLLOW_UP = "What colour is the largest object in it?"
N_CTX = 2048
KINDS = ("encode", "chat")
DEFAULT_IMAGES = ("huge_1536x1152.jpg", "tall_37x91.png", "wide_120x33.jpg", "grey_50x64.png")
SIDES = ("llamapy", "llamapy_explicit", "llama_cpp", "llama_cpp_fa")


def default_images() -> list:
    """Three timed images and, last, the chat warm-up image (the encode warm-up is the first)."""
    found = {os.path.basename(p): p for p in glob.glob(os.path.join(IMAGES, "*.png")) + glob.glob(os.path.join(IMAGES, "*.jpg"))}
    return [found[n] for n in DEFAULT_IMAGES if n in found]


def use_llamapy_under_test() -> None:
    """``import llamapy`` finds PYTHONPATH's / the installed package, else this checkout."""
    import importlib.util

    if importlib.util.find_spec("llamapy") is None and REPO not in sys.path:
        sys.path.append(REPO)


def use_llama_cpp(site: str | None) -> None:
    if site:
        sys.path.insert(0, site)


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t) -> tuple:
    return time.perf_counter() - t[0], time.process_time() - t[1]


# ------------------------------------------------------------------ encode
def encode_llamapy(threads: int, images: list, n: int, flash_attn: object = "auto") -> list:
    import llamapy
    from llamapy.multimodal.encoder import VisionEncoder
    from llamapy.multimodal.image_input import load_image
    from llamapy.multimodal.preprocess import preprocess

    print(f"llamapy from {os.path.dirname(llamapy.__file__)}", file=sys.stderr)
    enc = VisionEncoder(MMPROJ, n_threads=threads, flash_attn=flash_attn)
    pres = [preprocess(load_image(p), enc.info) for p in images]
    enc.encode_image(pres[0])  # warm-up
    rows = []
    for path, pre in zip(images, pres):
        for _ in range(n):
            t = _clock()
            out = enc.encode_image(pre)
            wall, cpu = _since(t)
            assert len(out) == 1 and out[0].shape == (576, enc.n_embd), [o.shape for o in out]
            rows.append({"image": os.path.basename(path), "wall_s": wall, "cpu_s": cpu})
    return rows


def encode_llama_cpp(threads: int, images: list, n: int, flash: bool) -> list:
    import llama_cpp
    from llama_cpp import Llama, mtmd_cpp as mtmd

    print(f"llama_cpp {llama_cpp.__version__} from {os.path.dirname(llama_cpp.__file__)}", file=sys.stderr)
    llm = Llama(model_path=TEXT, n_ctx=N_CTX, n_threads=threads, n_threads_batch=threads, verbose=False)
    params = mtmd.mtmd_context_params_default()
    params.use_gpu = False
    params.print_timings = False
    params.n_threads = threads
    params.warmup = False  # the warm-up encode below is the same for both sides
    params.flash_attn_type = (llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash
                              else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED)
    ctx = mtmd.mtmd_init_from_file(MMPROJ.encode(), llm.model, params)
    assert ctx, "mtmd_init_from_file failed"
    n_embd = llama_cpp.llama_model_n_embd(llm.model)

    def image_chunk(path: str):
        """(chunks, the image chunk) of marker + PROMPT with the image, as the handlers tokenize."""
        data = open(path, "rb").read()
        bmp = mtmd.mtmd_helper_bitmap_init_from_buf(
            ctx, (ctypes.c_uint8 * len(data)).from_buffer(bytearray(data)), len(data), False)
        assert bmp, path
        text = (mtmd.mtmd_default_marker().decode() + PROMPT).encode()
        inp = mtmd.mtmd_input_text()
        inp.text, inp.text_len, inp.add_special, inp.parse_special = text, len(text), True, True
        chunks = mtmd.mtmd_input_chunks_init()
        rc = mtmd.mtmd_tokenize(ctx, chunks, ctypes.byref(inp), (mtmd.mtmd_bitmap_p_ctypes * 1)(bmp), 1)
        mtmd.mtmd_bitmap_free(bmp)
        assert rc == 0, f"mtmd_tokenize rc={rc}"
        found = [mtmd.mtmd_input_chunks_get(chunks, i) for i in range(mtmd.mtmd_input_chunks_size(chunks))]
        found = [c for c in found if mtmd.mtmd_input_chunk_get_type(c) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE]
        assert len(found) == 1, len(found)
        return chunks, found[0]

    prepared = [image_chunk(p) for p in images]
    assert mtmd.mtmd_encode_chunk(ctx, prepared[0][1]) == 0  # warm-up
    rows = []
    for path, (_chunks, chunk) in zip(images, prepared):
        n_tok = mtmd.mtmd_input_chunk_get_n_tokens(chunk)
        assert n_tok == 576, n_tok
        for _ in range(n):
            t = _clock()
            rc = mtmd.mtmd_encode_chunk(ctx, chunk)
            wall, cpu = _since(t)
            assert rc == 0, f"mtmd_encode_chunk rc={rc}"
            rows.append({"image": os.path.basename(path), "wall_s": wall, "cpu_s": cpu})
        emb = mtmd.mtmd_get_output_embd(ctx)
        assert emb and all(emb[i] == emb[i] for i in (0, n_tok * n_embd - 1)), "NaN embedding"
    for chunks, _ in prepared:
        mtmd.mtmd_input_chunks_free(chunks)
    mtmd.mtmd_free(ctx)
    llm.close()
    return rows


# ------------------------------------------------------------------ chat
def _user(path: str, text: str) -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file://" + os.path.abspath(path)}},
                                        {"type": "text", "text": text}]}


def chat_rows(side: str, threads: int, images: list, warm_image: str) -> list:
    if side.startswith("llamapy"):
        import llamapy
        from llamapy import Llama
        from llamapy.llama_chat_format import Llava15ChatHandler

        print(f"llamapy from {os.path.dirname(llamapy.__file__)}", file=sys.stderr)
    else:
        import llama_cpp
        from llama_cpp import Llama
        from llama_cpp.llama_chat_format import Llava15ChatHandler

        print(f"llama_cpp {llama_cpp.__version__} from {os.path.dirname(llama_cpp.__file__)}", file=sys.stderr)
    handler = Llava15ChatHandler(clip_model_path=MMPROJ, verbose=False)
    # llama_cpp_fa: Llama(flash_attn=True), which the handler also passes on to its mtmd context
    extra = {"llama_cpp_fa": {"flash_attn": True}, "llamapy_explicit": {"flash_attn": False}}.get(side, {})
    llm = Llama(model_path=TEXT, chat_handler=handler, n_ctx=N_CTX, n_threads=threads,
                n_threads_batch=threads, seed=0, verbose=False, **extra)
    greedy = dict(temperature=0.0, repeat_penalty=1.0, seed=0)

    def ask(messages: list, max_tokens: int):
        t = _clock()
        r = llm.create_chat_completion(messages=messages, max_tokens=max_tokens, **greedy)
        wall, cpu = _since(t)
        return r, wall, cpu

    ask([_user(warm_image, PROMPT)], 1)  # warm-up: loads the projector, first graph runs
    rows = []
    for path in images:
        first = [_user(path, PROMPT)]
        r, wall, cpu = ask(first, 1)
        row = {"image": os.path.basename(path), "first_token_wall_s": wall, "first_token_cpu_s": cpu,
               "first_prompt_tokens": r["usage"]["prompt_tokens"]}
        r, wall, cpu = ask(first, 8)
        reply = r["choices"][0]["message"]["content"] or ""
        row.update(turn1_wall_s=wall, turn1_cpu_s=cpu, reply=reply)
        second = first + [{"role": "assistant", "content": reply}, {"role": "user", "content": FOLLOW_UP}]
        r, wall, cpu = ask(second, 1)
        row.update(second_turn_wall_s=wall, second_turn_cpu_s=cpu,
                   second_prompt_tokens=r["usage"]["prompt_tokens"])
        rows.append(row)
    llm.close() if hasattr(llm, "close") else None
    return rows


def worker(side: str, kind: str, threads: int, images: list, encodes: int, site: str | None) -> dict:
    if side.startswith("llamapy"):
        use_llamapy_under_test()
    else:
        use_llama_cpp(site)
    t = _clock()
    if kind == "encode":
        rows = (encode_llamapy(threads, images, encodes, False if side == "llamapy_explicit" else "auto")
                if side.startswith("llamapy")
                else encode_llama_cpp(threads, images, encodes, flash=side == "llama_cpp_fa"))
    else:
        rows = chat_rows(side, threads, images[:-1], images[-1])
    return {"rows": rows, "process_wall_s": _since(t)[0]}


# ------------------------------------------------------------------ driver
def _median_of(rows: list, key: str) -> float:
    return statistics.median(r[key] for r in rows)


def summarize(kind: str, rows: list) -> dict:
    keys = {"encode": ["wall_s", "cpu_s"],
            "chat": ["first_token_wall_s", "first_token_cpu_s", "second_turn_wall_s", "second_turn_cpu_s",
                     "turn1_wall_s"]}
    return {k: _median_of(rows, k) for k in keys[kind]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--encodes", type=int, default=2, help="timed encodes per image per process")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--sides", default="llamapy,llama_cpp", help=f"from {', '.join(SIDES)}")
    ap.add_argument("--images", nargs="*", help="image files, the last one the chat warm-up "
                    "(default: DEFAULT_IMAGES from tests/data/vlm/images/)")
    ap.add_argument("--llama-cpp-site", help="a pip --target folder holding llama_cpp (first on sys.path there)")
    ap.add_argument("--json", help="also write every run and the medians to this file")
    ap.add_argument("--worker", nargs=2, metavar=("SIDE", "KIND"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    images = args.images or default_images()
    if args.worker:
        res = worker(args.worker[0], args.worker[1], args.threads, images, args.encodes, args.llama_cpp_site)
        print(json.dumps(res))
        return 0
    for f in (TEXT, MMPROJ):
        if not os.path.exists(f):
            raise SystemExit(f"missing {f}: run tools/vlm/make_bench_projector.py first")
    kinds = args.kinds.split(",")
    sides = args.sides.split(",")
    runs: dict = {k: {s: [] for s in sides} for k in kinds}
    for rep in range(args.reps):
        for kind in kinds:
            for side in runs[kind]:
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", side, kind,
                       "--threads", str(args.threads), "--encodes", str(args.encodes), "--images", *images]
                if args.llama_cpp_site:
                    cmd += ["--llama-cpp-site", args.llama_cpp_site]
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    raise SystemExit(f"{side} {kind} failed:\n{r.stderr[-3000:]}")
                res = json.loads(r.stdout.strip().splitlines()[-1])
                res["summary"] = summarize(kind, res["rows"])
                runs[kind][side].append(res)
                s = res["summary"]
                print(f"rep {rep + 1} {kind:11s} {side:12s} " +
                      "  ".join(f"{k} {v:.3f}" for k, v in s.items()), flush=True)
    medians = {k: {s: {m: statistics.median(x["summary"][m] for x in runs[k][s]) for m in runs[k][s][0]["summary"]}
                   for s in runs[k]} for k in kinds}
    print(f"\nmedians over {args.reps} reps, {args.threads} threads, {len(images)} images:")
    measures = {"encode": ["wall_s"], "chat": ["first_token_wall_s", "second_turn_wall_s"]}
    ratios: dict = {}
    for kind in kinds:
        for side, m in medians[kind].items():
            print(f"  {kind:6s} {side:12s} " + "  ".join(f"{k} {v:.3f}" for k, v in m.items()))
            if side == "llamapy" or "llamapy" not in medians[kind]:
                continue
            for key in measures[kind]:
                cpu_key = key.replace("wall", "cpu")
                ratio = m[key] / medians[kind]["llamapy"][key]
                ratio_cpu = m[cpu_key] / medians[kind]["llamapy"][cpu_key]
                ratios[f"{kind}:{key[:-7] or 'encode'}:{side}"] = {"wall": ratio, "cpu": ratio_cpu}
                print(f"      {key[:-7] or 'encode':12s} llamapy is {ratio:.2f}x {side} (wall), {ratio_cpu:.2f}x (CPU s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"threads": args.threads, "reps": args.reps, "images": [os.path.basename(i) for i in images],
                       "medians": medians, "ratios": ratios, "runs": runs}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
