"""Tool calling: the model is made to call ``get_weather`` (``tool_choice``
names it, so the arguments follow its parameter schema), the result goes
back into the chat, and the model answers with it."""
import json
import sys

from llamapy import Llama
from llamapy.default_model import default_model_path


def get_weather(city: str) -> str:
    return f"22 C and sunny in {city}"  # stands in for a real weather service


TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 40}},
                       "required": ["city"]},
    },
}]

model_path = sys.argv[1] if len(sys.argv) > 1 else default_model_path()
with Llama(model_path=model_path, n_ctx=1024, chat_format="gemma", verbose=False) as llm:
    messages = [{"role": "user", "content": "What is the weather like in Paris?"}]
    reply = llm.create_chat_completion(messages, tools=TOOLS, temperature=0.0, max_tokens=64,
                                       tool_choice={"type": "function", "function": {"name": "get_weather"}})
    message = reply["choices"][0]["message"]
    messages.append(message)
    for call in message["tool_calls"]:
        arguments = json.loads(call["function"]["arguments"])
        result = get_weather(**arguments)
        print(f"{call['function']['name']}({arguments}) -> {result}")
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    answer = llm.create_chat_completion(messages, tools=TOOLS, tool_choice="none", temperature=0.0, max_tokens=64)
    print(answer["choices"][0]["message"]["content"])
