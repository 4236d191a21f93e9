"""OpenAI-shaped response types (TypedDicts), named as llama-cpp-python names
them so type annotations written for ``llama_cpp.llama_types`` keep working.

They describe plain dicts; nothing here is enforced at run time.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Union

if sys.version_info >= (3, 11):
    from typing import Literal, NotRequired, TypedDict
else:  # pragma: no cover - older Pythons: optional keys are simply not marked
    from typing import Literal, TypedDict

    NotRequired = Optional  # type: ignore[assignment]

JsonType = Union[None, int, float, str, bool, List[Any], Dict[str, Any]]


# --- embeddings -------------------------------------------------------------
class EmbeddingUsage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class Embedding(TypedDict):
    index: int
    object: str
    embedding: Union[List[float], List[List[float]]]


class CreateEmbeddingResponse(TypedDict):
    object: Literal["list"]
    model: str
    data: List[Embedding]
    usage: EmbeddingUsage


# --- completions ------------------------------------------------------------
class CompletionLogprobs(TypedDict):
    text_offset: List[int]
    token_logprobs: List[Optional[float]]
    tokens: List[str]
    top_logprobs: List[Optional[Dict[str, float]]]


class CompletionChoice(TypedDict):
    text: str
    index: int
    logprobs: Optional[CompletionLogprobs]
    finish_reason: Optional[Literal["stop", "length"]]


class CompletionUsage(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CreateCompletionResponse(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: NotRequired[CompletionUsage]


CreateCompletionStreamResponse = CreateCompletionResponse
CompletionChunk = CreateCompletionResponse
Completion = CreateCompletionResponse
EmbeddingData = Embedding
