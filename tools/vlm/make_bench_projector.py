"""Builds the CLIP-L-sized random LLaVA 1.5 model that benchmarks/multimodal.py times.

What this is: a seeded, randomly initialised ``LlavaForConditionalGeneration`` with the
vision tower of LLaVA 1.5 (CLIP ViT-L/14 at 336 px: patch 14, 24 layers, width 1024,
16 heads, FFN 4096, quick-GELU; 576 patches + class token) and its 2-layer GELU MLP
projector (mm.0 1024 -> n_embd, mm.2 n_embd -> n_embd), converted with llama.cpp's own
converters from the llama-cpp-python sdist, the same way tools/make_vlm_fixtures.py builds
the tiny fixtures:
  - the projector by the legacy ``convert_image_encoder_to_gguf.py`` (through
    tools/vlm/legacy_llava_shim.py for transformers 5), F16, 23 blocks written (feature
    layer -2, as in the released mmproj-model-f16.gguf of LLaVA 1.5);
  - the text model by ``convert_hf_to_gguf.py``, F16.
The text model is a Llama with n_embd 2048 (the projector's output width has to match it),
2 layers, 16 heads (head 128), 4 KV heads, FFN 5632, and the fixtures' 402-token vocabulary
(tests/data/vlm/tokenizer.model + "\\n\\n"). Why this size: it keeps the files moderate
(~0.6 GB projector, ~0.2 GB text) while the image side is full size, so encode time is real;
a 2-layer text model makes prompt evaluation cheap, which makes the second-turn comparison
(llama-cpp-python re-encodes and re-evaluates the image every call) conservative: with a
7B text model the re-evaluation llamapy skips would cost far more.
What it is not: a trained model. Outputs are noise; only their cost is measured.

Usage (from the repo root):
    python tools/vlm/make_bench_projector.py --sdist /tmp/lcp-src/llama_cpp_python-0.3.36
Writes benchmarks/out/vlm-bench/{llava15-bench-text-f16.gguf, llava15-bench-mmproj-f16.gguf,
build.json} (benchmarks/out/ is git-ignored; nothing here is committed).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

import hf_models  # noqa: E402

OUT = REPO / "benchmarks" / "out" / "vlm-bench"
TOKENIZER = REPO / "tests" / "data" / "vlm" / "tokenizer.model"
TEXT_NAME = "llava15-bench-text-f16.gguf"
MMPROJ_NAME = "llava15-bench-mmproj-f16.gguf"

VISION = dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
              num_attention_heads=16, image_size=336, patch_size=14, projection_dim=768,
              hidden_act="quick_gelu", layer_norm_eps=1e-5)
TEXT = dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=2,
            num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096)


def build_checkpoint(hf_dir: pathlib.Path, seed: int) -> dict:
    """The HF checkpoint (hf_dir/), its vision tower (hf_dir/vision/) and the projector
    tensors (hf_dir/llava.projector), laid out as the legacy converter wants them."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaForConditionalGeneration

    torch.manual_seed(seed)
    vcfg = CLIPVisionConfig(**VISION)
    tcfg = LlamaConfig(**hf_models._text_kwargs(**TEXT))
    cfg = LlavaConfig(vision_config=vcfg, text_config=tcfg,
                      image_token_index=hf_models.token_id(TOKENIZER, "<image>"),
                      projector_hidden_act="gelu", vision_feature_layer=-2,
                      vision_feature_select_strategy="default")
    # transformers' own initialisation (std 0.02): the fixtures' wider re-draw would overflow
    # F16 activations through 24 layers of width 1024
    model = LlavaForConditionalGeneration(cfg).eval()
    hf_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(hf_dir)
    hf_models._write_common(hf_dir, TOKENIZER, hf_models.TEMPLATE_PLAIN,
                            {"image_mean": hf_models.CLIP_MEAN, "image_std": hf_models.CLIP_STD})
    model.model.vision_tower.save_pretrained(hf_dir / "vision")
    proj = {f"multi_modal_projector.{k}": v.detach().clone()
            for k, v in model.model.multi_modal_projector.state_dict().items()}
    torch.save(proj, hf_dir / "llava.projector")
    n_params = sum(p.numel() for p in model.parameters())
    n_vision = sum(p.numel() for p in model.model.vision_tower.parameters())
    return {"seed": seed, "vision": VISION, "text": TEXT, "n_params": n_params,
            "n_vision_params": n_vision, "transformers_init": "default (std 0.02)"}


def _run(cmd: list, log: pathlib.Path, env: dict) -> None:
    with open(log, "w") as f:
        rc = subprocess.call(["nice", "-n", "5"] + [str(c) for c in cmd], stdout=f,
                             stderr=subprocess.STDOUT, env=env)
    if rc != 0:
        raise SystemExit(f"{cmd[1]} failed (rc={rc}); see {log}")


def convert(hf_dir: pathlib.Path, sdist: pathlib.Path, work: pathlib.Path) -> None:
    lc = sdist / "vendor" / "llama.cpp"
    env = dict(os.environ, PYTHONPATH=str(lc / "gguf-py"))
    text = OUT / TEXT_NAME
    _run([sys.executable, lc / "convert_hf_to_gguf.py", hf_dir, "--outtype", "f16",
          "--outfile", text], work / "text.log", env)
    tmp = work / "mm"
    shutil.rmtree(tmp, ignore_errors=True)
    legacy = lc / "tools" / "mtmd" / "legacy-models" / "convert_image_encoder_to_gguf.py"
    _run([sys.executable, HERE / "legacy_llava_shim.py", legacy, "-m", hf_dir / "vision",
          "--llava-projector", hf_dir / "llava.projector", "--clip-model-is-vision",
          "--projector-type", "mlp", "-o", tmp], work / "mmproj.log", env)
    shutil.move(tmp / "mmproj-model-f16.gguf", OUT / MMPROJ_NAME)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sdist", type=pathlib.Path, required=True,
                    help="unpacked llama_cpp_python-0.3.36 (has vendor/llama.cpp)")
    ap.add_argument("--work", type=pathlib.Path, default=pathlib.Path("/tmp/vlm-bench-work"))
    ap.add_argument("--seed", type=int, default=336)
    ap.add_argument("--keep-hf", action="store_true", help="keep the HF checkpoint in --work")
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    hf_dir = args.work / "hf"
    t0 = time.time()
    info = build_checkpoint(hf_dir, args.seed)
    print(f"checkpoint: {info['n_params'] / 1e6:.0f}M parameters "
          f"({info['n_vision_params'] / 1e6:.0f}M vision) in {time.time() - t0:.0f}s", flush=True)
    convert(hf_dir, args.sdist, args.work)
    files = {}
    for name in (TEXT_NAME, MMPROJ_NAME):
        files[name] = (OUT / name).stat().st_size
        print(f"  {OUT / name}: {files[name] / 2**20:.0f} MiB")
    info.update(files=files, sdist=str(args.sdist))
    (OUT / "build.json").write_text(json.dumps(info, indent=1) + "\n")
    if not args.keep_hf:
        shutil.rmtree(hf_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
