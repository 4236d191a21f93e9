"""Complete a prompt with the default model (or MODEL_PATH given as argv[1])."""
import sys

from llamapy import Llama
from llamapy.default_model import default_model_path

model_path = sys.argv[1] if len(sys.argv) > 1 else default_model_path()
with Llama(model_path=model_path, n_ctx=512, verbose=False) as llm:
    out = llm("The capital of France is", max_tokens=16, temperature=0.0)
    print(out["choices"][0]["text"])
    print(out["usage"])
