"""Multimodal building blocks: image input, projector (mmproj) metadata, preprocessing.

- ``image_input.py`` — any accepted image source -> a decoded RGB ``PIL.Image``, and the
  content hash that keys the image-embedding cache;
- ``mmproj.py``      — a projector GGUF (``general.architecture = "clip"``) -> a validated
  ``MmprojInfo``;
- ``preprocess.py``  — an RGB image -> the float32 CHW tiles a projector type's vision
  encoder takes, as llama.cpp's mtmd preprocessors make them;
- ``encoder.py``     — ``VisionEncoder``: those tiles -> the language model's image
  embeddings, through the native vision encoders (vendor/engine/vision/; projector types
  ``mlp``, ``gemma3``, ``idefics3``, ``qwen2vl_merger``, ``qwen2.5vl_merger``);
- ``chunks.py``      — prompts of text and image chunks (placeholder ids, chunk-unit prefixes);
- ``evaluate.py``    — a chunked prompt into a Llama's context (image chunks as embeddings);
- ``embed_cache.py`` — the projector-output LRU cache;
- ``handlers.py``    — the multimodal chat handlers (re-exported by ``llamapy.llama_chat_format``).
"""
from .image_input import decode_image, image_hash, image_url_from_part, load_image, read_image_bytes
from .mmproj import SUPPORTED_PROJECTOR_TYPES, MmprojInfo, check_compatible, read_mmproj
from .encoder import ENCODER_PROJECTOR_TYPES, VisionEncoder
from .preprocess import Preprocessed, PreprocessParams, preprocess, preprocess_params, preprocess_u8

__all__ = [
    "ENCODER_PROJECTOR_TYPES", "SUPPORTED_PROJECTOR_TYPES", "VisionEncoder", "MmprojInfo", "PreprocessParams", "Preprocessed", "check_compatible",
    "decode_image", "image_hash", "image_url_from_part", "load_image", "preprocess", "preprocess_params",
    "preprocess_u8", "read_image_bytes", "read_mmproj",
]
