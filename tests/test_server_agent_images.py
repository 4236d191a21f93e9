"""Images through the agent APIs' official SDKs with --mmproj (issue 35): an Anthropic image
block (base64) and an OpenAI Responses input_image (a data URI) reach the tiny Gemma 3 VLM of
tests/data/vlm as the chat API's image part does: the same greedy answer and prompt size as
Llama.create_chat_completion with that image in-process; a server without a projector refuses
an image with a 400 naming --mmproj."""
from __future__ import annotations

import base64
from pathlib import Path

import pytest
from conftest import needs

needs("fastapi")
needs("uvicorn")
needs("httpx")
anthropic = needs("anthropic")
openai = needs("openai")

from server_helpers import LiveServer  # noqa: E402

VLM = Path(__file__).parent / "data" / "vlm"
TEXT, PROJ = str(VLM / "gemma3" / "gemma3-text-f16.gguf"), str(VLM / "gemma3" / "gemma3-mmproj-f16.gguf")
IMG = VLM / "images" / "square_64x64.webp"
B64 = base64.b64encode(IMG.read_bytes()).decode()
N = 6


@pytest.fixture(scope="module")
def reference():
    from llamapy import Llama

    llm = Llama(TEXT, mmproj=PROJ, n_ctx=256, n_threads=1, verbose=False)
    msgs = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": f"data:image/webp;base64,{B64}"}},
                                         {"type": "text", "text": "describe"}]}]
    r = llm.create_chat_completion(msgs, max_tokens=N, temperature=0.0)
    llm.close()
    return r["choices"][0]["message"]["content"], r["usage"]["prompt_tokens"]


@pytest.fixture(scope="module")
def server():
    s = LiveServer(["-m", TEXT, "--mmproj", PROJ, "-c", "256", "-t", "1"]).start()
    yield s
    s.stop()


def test_anthropic_image_block(server, reference):
    sdk = anthropic.Anthropic(base_url=server.url, api_key="x", max_retries=0)
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": B64}},
               {"type": "text", "text": "describe"}]
    m = sdk.messages.create(model="local", max_tokens=N, extra_body={"temperature": 0.0},
                            messages=[{"role": "user", "content": content}])
    assert "".join(b.text for b in m.content if b.type == "text") == reference[0]
    assert m.usage.input_tokens == reference[1]
    with sdk.messages.stream(model="local", max_tokens=N, extra_body={"temperature": 0.0},
                             messages=[{"role": "user", "content": content}]) as st:
        assert "".join(st.text_stream) == reference[0]


def test_responses_input_image(server, reference):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="x", max_retries=0)
    item = {"role": "user", "content": [
        {"type": "input_image", "image_url": f"data:image/webp;base64,{B64}"},
        {"type": "input_text", "text": "describe"}]}
    r = client.responses.create(model="local", input=[item], max_output_tokens=N, temperature=0.0)
    assert r.output_text == reference[0]
    assert r.usage.input_tokens == reference[1]


@pytest.mark.model
def test_image_without_projector_is_refused(gemma_path):
    s = LiveServer(["-m", gemma_path, "-c", "256", "-t", "1"]).start()
    try:
        sdk = anthropic.Anthropic(base_url=s.url, api_key="x", max_retries=0)
        with pytest.raises(anthropic.BadRequestError, match="--mmproj"):
            sdk.messages.create(model="local", max_tokens=N, messages=[{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": B64}}]}])
        client = openai.OpenAI(base_url=s.url + "/v1", api_key="x", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="--mmproj"):
            client.responses.create(model="local", max_output_tokens=N, input=[{"role": "user", "content": [
                {"type": "input_image", "image_url": f"data:image/webp;base64,{B64}"}]}])
    finally:
        s.stop()
