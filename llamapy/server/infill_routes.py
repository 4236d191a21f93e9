"""llama-server's fill-in-the-middle route, ``POST /infill``: code editors
send the text before and after the cursor (``input_prefix``,
``input_suffix``), optionally the start of the middle (``prompt``) and
other files of the repository (``input_extra``: ``[{"filename", "text"}]``);
the reply is llama-server's native completion object (``content``,
``stop``, ``stop_type``, ``tokens_predicted``, ``tokens_evaluated``, ...),
streamed as server-sent events of ``{"content", "stop"}``.

The prompt layout is the library's (llamapy/_infill.py); the generation is
``create_completion`` on a slot, as every other route. A model without FIM
tokens is a 400. Nothing is cut to fit: a request that does not fit the
context is a 400 naming the sizes (llama-server shortens the prefix and the
extra files instead).
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional

from fastapi import APIRouter, Request
from sse_starlette.sse import EventSourceResponse

from . import work
from .errors import bad_request, error_body, public_error
from .openai_routes import Sampling, _state, check_stop, sampling_params
from .runner import Cancelled

router = APIRouter()


class InfillBody(Sampling):
    input_prefix: str
    input_suffix: str
    input_extra: Optional[List[Any]] = None
    prompt: str = ""
    n_predict: Optional[int] = None  # llama-server's name for max_tokens (wins when both are given)


def _check_extra(extra: Optional[List[Any]]) -> List[Dict[str, str]]:
    out = []
    for i, chunk in enumerate(extra or []):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
            raise bad_request(f"input_extra[{i}] must be an object with a \"text\" string")
        if "filename" in chunk and not isinstance(chunk["filename"], str):
            raise bad_request(f"input_extra[{i}].filename must be a string")
        out.append({k: chunk[k] for k in ("filename", "text") if k in chunk})
    return out


def _stop_type(choice: Dict[str, Any]) -> str:
    # llama-server's "limit" (n_predict or the context) or "eos" (an end-of-generation token; a
    # stop string, which llama-server calls "word", is not told apart by the library's finish_reason)
    if choice.get("finish_reason") == "length":
        return "limit"
    return "eos"


def _native(result: Dict[str, Any], state: Any) -> Dict[str, Any]:
    choice = result["choices"][0]
    usage = result.get("usage") or {}
    return {"index": 0, "content": choice["text"], "stop": True, "model": state.model_name,
            "stop_type": _stop_type(choice), "tokens_predicted": usage.get("completion_tokens", 0),
            "tokens_evaluated": usage.get("prompt_tokens", 0),
            "tokens_cached": (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0),
            "truncated": False, "finish_reason": choice.get("finish_reason")}


@router.post("/infill")
async def infill(body: InfillBody, request: Request) -> Any:
    state = _state(request)
    state.require_ready()
    state.require_generator()
    if body.n_predict is not None:
        max_tokens = state.max_tokens(body.n_predict, "n_predict")
    else:
        max_tokens = state.max_tokens(body.max_tokens)
    check_stop(body.stop)
    parts = {"input_prefix": body.input_prefix, "input_suffix": body.input_suffix, "prompt": body.prompt,
             "input_extra": _check_extra(body.input_extra)}
    params = dict(max_tokens=max_tokens, model=state.model_name, **sampling_params(body))
    job, _ = await state.start_job(state.cap_generation(work.infill_work(params, parts), params))
    if not body.stream:
        return _native(await state.result(job, request), state)

    async def events() -> Any:
        try:
            async for chunk in state.stream(job):
                choice = (chunk.get("choices") or [{}])[0]
                if choice.get("finish_reason") is None and "usage" not in chunk:
                    if choice.get("text"):
                        yield json.dumps({"index": 0, "content": choice["text"], "stop": False})
                    continue
                if "usage" in chunk or choice.get("finish_reason"):
                    last = {"choices": [{"text": "", "finish_reason": choice.get("finish_reason")}],
                            "usage": chunk.get("usage")}
                    yield json.dumps(_native(last, state))
        except Exception as e:  # mid-stream: an error event (never a cut connection)
            err = state.cancel_error(job, e) if isinstance(e, Cancelled) else e
            status, message, code = public_error(err)
            yield json.dumps(error_body(status, message, code))

    return EventSourceResponse(state.until_done(job, events()), sep="\n")
