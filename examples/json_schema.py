"""Structured output: the answer is JSON that follows a schema
(``response_format``), whatever the model would have said otherwise."""
import json
import sys

from llamapy import Llama
from llamapy.default_model import default_model_path

SCHEMA = {
    "type": "object",
    "properties": {
        "country": {"type": "string", "maxLength": 40},
        "capital": {"type": "string", "maxLength": 40},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 2000},
    },
    "required": ["country", "capital", "population_millions"],
}

model_path = sys.argv[1] if len(sys.argv) > 1 else default_model_path()
with Llama(model_path=model_path, n_ctx=1024, chat_format="gemma", verbose=False) as llm:
    reply = llm.create_chat_completion(
        [{"role": "system", "content": "Answer with a JSON object."},
         {"role": "user", "content": "Tell me about France: its capital and its population in millions."}],
        response_format={"type": "json_object", "schema": SCHEMA},
        temperature=0.0, max_tokens=128,
    )
    data = json.loads(reply["choices"][0]["message"]["content"])
    print(json.dumps(data, indent=2, ensure_ascii=False))
