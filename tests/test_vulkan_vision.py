"""The vision encoder on the Vulkan backend (VisionEncoder(gpu=N), and the chat
handlers' use_gpu): every recorded projector's pixels give llama.cpp's recorded
embeddings within the CPU path's tolerances, and the CPU's own output within
the device tolerance. CI runs this on Mesa's lavapipe (tools/vulkan_check.sh);
without the backend or a device the module is skipped (a build without it
refuses gpu=0 with a ValueError: tests/test_vision_encoder.py)."""
from __future__ import annotations

import numpy as np
import pytest

import test_vision_encoder as V
from llamapy import _engine as E
from llamapy.multimodal import VisionEncoder

pytestmark = pytest.mark.skipif("vulkan" not in E.backends() or not E.gpu_devices(),
                                reason="built without the Vulkan backend, or no Vulkan device")


@pytest.mark.parametrize("vlm_type,variant", V.CASES)
def test_recorded_pixels_on_the_device(vlm_type, variant):
    path = V.VLM / vlm_type / f"{vlm_type}-mmproj-{variant}.gguf"
    gpu = VisionEncoder(path, n_threads=2, gpu=0)
    cpu = V.encoder(vlm_type, variant, flash_attn=True)
    assert gpu.gpu == 0 and cpu.gpu is None
    arrays = np.load(V.VLM / vlm_type / "arrays.npz")
    image = sorted({k.split(".mmproj_")[0] for k in arrays.files})[0]
    chunks = V.recorded_chunks(arrays, image, variant)[:2]  # lavapipe is slow: two chunks of the first image
    assert chunks
    for pixels, ref in chunks:
        got = gpu.encode(pixels)
        assert got.shape == ref.shape
        assert V.rel_err(got, ref) <= V.TOL[variant], V.rel_err(got, ref)
        assert V.rel_err(got, cpu.encode(pixels)) <= V.TOL[variant]


def test_bad_device_numbers():
    path = V.VLM / V.CASES[0][0] / f"{V.CASES[0][0]}-mmproj-{V.CASES[0][1]}.gguf"
    with pytest.raises(ValueError, match="Vulkan device"):
        VisionEncoder(path, gpu=len(E.gpu_devices()))
    with pytest.raises(ValueError, match="gpu"):
        VisionEncoder(path, gpu=-2)


def test_handler_puts_the_encoder_beside_the_gpu_layers(tmp_path):
    """use_gpu=True: the encoder runs on the device of the language model's GPU
    layers; use_gpu=False, or a model on the CPU: on the CPU."""
    from llamapy.multimodal.handlers import MTMDChatHandler

    path = V.VLM / V.CASES[0][0] / f"{V.CASES[0][0]}-mmproj-{V.CASES[0][1]}.gguf"

    class FakeLlama:  # only what MTMDChatHandler.encoder reads
        n_threads = 2

        def __init__(self, devices):
            self._devices = devices

        def device_map(self):
            return [{"device": d} for d in self._devices]

    assert MTMDChatHandler(str(path)).encoder(FakeLlama(["cpu", "gpu0", "gpu0"])).gpu == 0
    assert MTMDChatHandler(str(path)).encoder(FakeLlama(["cpu", "cpu", "cpu"])).gpu is None
    assert MTMDChatHandler(str(path), use_gpu=False).encoder(FakeLlama(["cpu", "gpu0", "gpu0"])).gpu is None


@pytest.mark.parametrize("vtype,cls_name", [("llava15", "Llava15ChatHandler"), ("gemma3", "MTMDChatHandler"),
                                            ("qwen2vl", "MTMDChatHandler")])
def test_caption_with_everything_on_the_device(vtype, cls_name):
    """A whole caption on the device: language model layers (n_gpu_layers=-1)
    and the vision encoder beside them; llama.cpp's greedy tokens (or a
    departure only after a near-tie, as on the CPU)."""
    pytest.importorskip("PIL")
    import os

    import test_mm_handlers as M
    from llamapy import Llama

    image = "grey_50x64.png"
    rec = M.record(vtype)["images"][image]["caption_mmproj_f16"]
    text, proj = M.model_paths(vtype)
    handler = getattr(M.lcf, cls_name)(clip_model_path=proj, verbose=False)
    llm = Llama(text, n_ctx=1024, n_threads=2, verbose=False, chat_handler=handler, n_gpu_layers=-1)
    out, steps = M.greedy(llm, [M.user(os.path.join(M.IMAGES, image), "Describe this image.")])
    assert handler.encoder(llm).gpu == 0
    assert out["usage"]["prompt_tokens"] == rec["n_prompt_tokens"]
    M.assert_tokens_match(steps, rec["steps"], rec["token_ids"])
    llm.close()
