"""Multimodal building blocks: image input, projector (mmproj) metadata, preprocessing.

- ``image_input.py`` — any accepted image source -> a decoded RGB ``PIL.Image``, and the
  content hash that keys the image-embedding cache;
- ``mmproj.py``      — a projector GGUF (``general.architecture = "clip"``) -> a validated
  ``MmprojInfo``;
- ``preprocess.py``  — an RGB image -> the float32 CHW tiles a projector type's vision
  encoder takes, as llama.cpp's mtmd preprocessors make them.

Not here yet: the vision encoders (C++) and the chat handlers that use them; nothing in
``llamapy.llama_chat_format`` refers to this package until they exist.
"""
