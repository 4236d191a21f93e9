"""Runs llama.cpp's legacy `convert_image_encoder_to_gguf.py` (the LLaVA 1.5 mmproj writer)
under transformers 5.

What this is: a shim. transformers 5 flattened `CLIPVisionModel` (no `.vision_model`
submodule, state-dict keys without the `vision_model.` prefix); the legacy script expects the
transformers 4 layout. This wraps the loaded model in a module whose only child is
`vision_model`, which restores both, then runs the script unchanged.
Usage: python legacy_llava_shim.py PATH/TO/convert_image_encoder_to_gguf.py ARGS...
"""
import runpy
import sys

import torch
import transformers

_FlatCLIPVisionModel = transformers.CLIPVisionModel
_flat_from_pretrained = _FlatCLIPVisionModel.from_pretrained


class _NestedCLIPVisionModel(torch.nn.Module):
    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.vision_model = inner

    @classmethod
    def from_pretrained(cls, path, *args, **kwargs):
        return cls(_flat_from_pretrained(path, *args, **kwargs))


# transformers' lazy module hands out the class itself, so patch its loader
_FlatCLIPVisionModel.from_pretrained = _NestedCLIPVisionModel.from_pretrained
script = sys.argv[1]
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
