"""Stream a completion token by token, stopping at a blank line."""
import sys

from llamapy import Llama
from llamapy.default_model import default_model_path

model_path = sys.argv[1] if len(sys.argv) > 1 else default_model_path()
with Llama(model_path=model_path, n_ctx=512, seed=42, verbose=False) as llm:
    for chunk in llm.create_completion("Here is a short poem about the sea:\n", max_tokens=64, stop=["\n\n"],
                                       stream=True):
        print(chunk["choices"][0]["text"], end="", flush=True)
    print()
