"""OpenAI-shaped request and response types (TypedDicts), named as
llama-cpp-python names them so type annotations written for
``llama_cpp.llama_types`` keep working.

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

_IMPORTED = set(globals())  # everything above is imports; __all__ (at the end) is what is defined below

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


# --- chat completions: requests ----------------------------------------------
class ChatCompletionRequestMessageContentPartText(TypedDict):
    type: Literal["text"]
    text: str


class ChatCompletionRequestMessageContentPartImageImageUrl(TypedDict):
    url: str
    detail: NotRequired[Literal["auto", "low", "high"]]


class ChatCompletionRequestMessageContentPartImage(TypedDict):
    type: Literal["image_url"]
    image_url: Union[str, ChatCompletionRequestMessageContentPartImageImageUrl]


ChatCompletionRequestMessageContentPart = Union[
    ChatCompletionRequestMessageContentPartText, ChatCompletionRequestMessageContentPartImage
]
MessageContent = Union[str, List[ChatCompletionRequestMessageContentPart], None]


class ChatCompletionMessageToolCallFunction(TypedDict):
    name: str
    arguments: str  # a JSON text


class ChatCompletionMessageToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: ChatCompletionMessageToolCallFunction


ChatCompletionMessageToolCalls = List[ChatCompletionMessageToolCall]


class ChatCompletionRequestAssistantMessageFunctionCall(TypedDict):
    name: str
    arguments: str


class ChatCompletionRequestSystemMessage(TypedDict):
    role: Literal["system"]
    content: MessageContent


class ChatCompletionRequestUserMessage(TypedDict):
    role: Literal["user"]
    content: MessageContent


class ChatCompletionRequestAssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: NotRequired[Optional[str]]
    tool_calls: NotRequired[ChatCompletionMessageToolCalls]
    function_call: NotRequired[ChatCompletionRequestAssistantMessageFunctionCall]  # deprecated by OpenAI


class ChatCompletionRequestToolMessage(TypedDict):
    role: Literal["tool"]
    content: Optional[str]
    tool_call_id: str


class ChatCompletionRequestFunctionMessage(TypedDict):
    role: Literal["function"]
    content: Optional[str]
    name: str


ChatCompletionRequestMessage = Union[
    ChatCompletionRequestSystemMessage, ChatCompletionRequestUserMessage, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestToolMessage, ChatCompletionRequestFunctionMessage,
]

ChatCompletionFunctionParameters = Dict[str, JsonType]  # a JSON schema


class ChatCompletionFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: ChatCompletionFunctionParameters


class ChatCompletionToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: ChatCompletionFunctionParameters


class ChatCompletionTool(TypedDict):
    type: Literal["function"]
    function: ChatCompletionToolFunction


class ChatCompletionNamedToolChoiceFunction(TypedDict):
    name: str


class ChatCompletionNamedToolChoice(TypedDict):
    type: Literal["function"]
    function: ChatCompletionNamedToolChoiceFunction


ChatCompletionToolChoiceOption = Union[Literal["none", "auto", "required"], ChatCompletionNamedToolChoice]


class ChatCompletionRequestFunctionCallOption(TypedDict):
    name: str


ChatCompletionRequestFunctionCall = Union[Literal["none", "auto"], ChatCompletionRequestFunctionCallOption]


class ChatCompletionFunctionCallOption(TypedDict):
    name: str


class ChatCompletionRequestResponseFormat(TypedDict):
    type: Literal["text", "json_object", "json_schema"]
    schema: NotRequired[JsonType]  # llama-cpp-python's spelling for json_object
    json_schema: NotRequired[Dict[str, Any]]  # OpenAI's: {"name": ..., "schema": ..., "strict": ...}


# --- chat completions: responses ----------------------------------------------
class ChatCompletionResponseFunctionCall(TypedDict):
    name: str
    arguments: str


class ChatCompletionResponseMessage(TypedDict):
    role: Literal["assistant"]
    content: Optional[str]
    tool_calls: NotRequired[ChatCompletionMessageToolCalls]
    function_call: NotRequired[ChatCompletionResponseFunctionCall]


class ChatCompletionTopLogprobToken(TypedDict):
    token: str
    logprob: float
    bytes: Optional[List[int]]


class ChatCompletionLogprobToken(ChatCompletionTopLogprobToken):
    top_logprobs: List[ChatCompletionTopLogprobToken]


class ChatCompletionLogprobs(TypedDict):
    content: Optional[List[ChatCompletionLogprobToken]]
    refusal: Optional[List[ChatCompletionLogprobToken]]


class ChatCompletionResponseChoice(TypedDict):
    index: int
    message: ChatCompletionResponseMessage
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[Literal["stop", "length", "tool_calls", "function_call"]]


class CreateChatCompletionResponse(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: List[ChatCompletionResponseChoice]
    usage: CompletionUsage


class ChatCompletionMessageToolCallChunkFunction(TypedDict):
    name: NotRequired[str]
    arguments: str


class ChatCompletionMessageToolCallChunk(TypedDict):
    index: int
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: ChatCompletionMessageToolCallChunkFunction


class ChatCompletionStreamResponseDeltaEmpty(TypedDict):
    pass


class ChatCompletionStreamResponseDeltaFunctionCall(TypedDict):  # deprecated by OpenAI (tool calls replace it)
    name: str
    arguments: str


class ChatCompletionStreamResponseDelta(TypedDict):
    role: NotRequired[Literal["assistant"]]
    content: NotRequired[Optional[str]]
    function_call: NotRequired[Optional[ChatCompletionStreamResponseDeltaFunctionCall]]
    tool_calls: NotRequired[List[ChatCompletionMessageToolCallChunk]]


class ChatCompletionStreamResponseChoice(TypedDict):
    index: int
    delta: Union[ChatCompletionStreamResponseDelta, ChatCompletionStreamResponseDeltaEmpty]
    logprobs: Optional[ChatCompletionLogprobs]
    finish_reason: Optional[Literal["stop", "length", "tool_calls", "function_call"]]


class CreateChatCompletionStreamResponse(TypedDict):
    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    choices: List[ChatCompletionStreamResponseChoice]
    usage: NotRequired[CompletionUsage]  # on the last chunk


ChatCompletion = CreateChatCompletionResponse
ChatCompletionChunk = CreateChatCompletionStreamResponse
ChatCompletionStreamResponse = CreateChatCompletionStreamResponse
ChatCompletionMessage = ChatCompletionResponseMessage
ChatCompletionChoice = ChatCompletionResponseChoice
ChatCompletionChunkDelta = ChatCompletionStreamResponseDelta
ChatCompletionChunkDeltaEmpty = ChatCompletionStreamResponseDeltaEmpty
ChatCompletionChunkChoice = ChatCompletionStreamResponseChoice
ChatCompletionFunctions = ChatCompletionFunction
ChatCompletionResponseFunction = ChatCompletionFunction
ChatCompletionFunctionCall = ChatCompletionResponseFunctionCall


__all__ = sorted(name for name in globals() if name not in _IMPORTED and not name.startswith("_"))
