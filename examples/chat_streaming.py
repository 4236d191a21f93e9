"""Chat with streaming: the answer is printed as it is generated.

Runs on the default model (Gemma 3 270M, whose GGUF has no chat template, so
the chat format is named) or on the GGUF file given as argv[1].
"""
import sys

from llamapy import Llama
from llamapy.default_model import default_model_path

model_path = sys.argv[1] if len(sys.argv) > 1 else default_model_path()
with Llama(model_path=model_path, n_ctx=1024, chat_format="gemma", seed=42, verbose=False) as llm:
    messages = [
        {"role": "system", "content": "You are a friendly assistant. Answer in one or two sentences."},
        {"role": "user", "content": "Why is the sky blue?"},
    ]
    for chunk in llm.create_chat_completion(messages, max_tokens=96, stream=True):
        delta = chunk["choices"][0]["delta"]
        print(delta.get("content") or "", end="", flush=True)
        if chunk["choices"][0]["finish_reason"]:
            print(f"\n[{chunk['choices'][0]['finish_reason']}, {chunk['usage']['completion_tokens']} tokens]")
