"""The OpenAI-compatible wire format: requests in, JSON bodies and server-sent events out.

Two endpoints generate text:

- ``POST /v1/completions``: ``{"model", "prompt": str | [token ids], "max_tokens", ...}``; each
  choice carries ``text``.
- ``POST /v1/chat/completions``: ``{"model", "messages": [{"role", "content"}], ...}``; the
  messages are rendered with the model's chat template; each choice carries a ``message`` (or,
  streamed, a ``delta``).

With ``"stream": true`` the answer is a stream of server-sent events (SSE): lines
``data: {json}`` separated by blank lines, one event per new piece of text, then a final event
with ``finish_reason``, optionally one with ``usage`` (``"stream_options": {"include_usage": true}``),
and ``data: [DONE]``. ``usage.prompt_tokens_details.cached_tokens`` (OpenAI's field) says how many
prompt tokens the prefix cache held. A streamed chat answer opens with an event that carries only the role.

Sampling fields: ``temperature``, ``top_p``, ``max_tokens`` (chat also ``max_completion_tokens``),
``stop``, ``seed``, ``n`` (only 1), and the extensions ``top_k``, ``min_p``, ``ignore_eos``
(vLLM's names). Errors use OpenAI's body, ``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from course_lib.sampling import SamplingParams

__all__ = [
    "ApiError",
    "GenerationRequest",
    "chat_chunk",
    "completion_body",
    "completion_chunk",
    "error_body",
    "parse_chat_request",
    "parse_completion_request",
    "sse_event",
    "usage",
]

DEFAULT_CHAT_MAX_TOKENS = 256
DEFAULT_COMPLETION_MAX_TOKENS = 16


class ApiError(Exception):
    """An error answered to the client: HTTP status, message, the offending field, extra headers."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers or {}

    @property
    def kind(self) -> str:
        return {400: "invalid_request_error", 404: "not_found_error", 429: "rate_limit_error"}.get(
            self.status, "server_error")


def error_body(error: ApiError) -> dict:
    return {"error": {"message": error.message, "type": error.kind, "param": error.param, "code": error.code}}


@dataclass
class GenerationRequest:
    """One parsed request: the prompt's tokens, how to sample, and how to answer."""

    kind: str  # "completion" or "chat"
    model: str
    prompt_token_ids: list[int]
    params: SamplingParams
    stream: bool
    include_usage: bool
    response_id: str
    created: int


def _field(body: dict, name: str, types: tuple[type, ...], default: Any) -> Any:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) and bool not in types:
        raise ApiError(400, f"'{name}' must be {' or '.join(t.__name__ for t in types)}, got {value!r}", param=name)
    if not isinstance(value, types):
        raise ApiError(400, f"'{name}' must be {' or '.join(t.__name__ for t in types)}, got {value!r}", param=name)
    return value


def _sampling_params(body: dict, max_tokens: int) -> SamplingParams:
    if _field(body, "n", (int,), 1) != 1:
        raise ApiError(400, "this server generates one choice per request: 'n' must be 1", param="n")
    stop = _field(body, "stop", (str, list), ())
    if isinstance(stop, list) and not all(isinstance(s, str) and s for s in stop):
        raise ApiError(400, "'stop' must be a string or a list of non-empty strings", param="stop")
    try:
        return SamplingParams(
            temperature=float(_field(body, "temperature", (int, float), 1.0)),
            top_p=float(_field(body, "top_p", (int, float), 1.0)),
            top_k=_field(body, "top_k", (int,), 0),
            min_p=float(_field(body, "min_p", (int, float), 0.0)),
            max_tokens=max_tokens,
            seed=_field(body, "seed", (int,), None),
            stop=stop,
            ignore_eos=_field(body, "ignore_eos", (bool,), False),
        )
    except (TypeError, ValueError) as error:
        raise ApiError(400, str(error)) from None


def _max_tokens(body: dict, names: tuple[str, ...], default: int) -> int:
    for name in names:
        if body.get(name) is not None:
            value = _field(body, name, (int,), default)
            if value < 1:
                raise ApiError(400, f"'{name}' must be >= 1, got {value}", param=name)
            return value
    return default


def _common(body: Any, served_model: str) -> tuple[str, bool, bool]:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    model = body.get("model", served_model)
    if model != served_model:
        raise ApiError(404, f"The model '{model}' does not exist; this server serves '{served_model}'",
                       param="model", code="model_not_found")
    stream = _field(body, "stream", (bool,), False)
    options = _field(body, "stream_options", (dict,), {})
    return model, stream, bool(options.get("include_usage", False))


def parse_completion_request(body: Any, served_model: str, tokenizer) -> GenerationRequest:
    """``POST /v1/completions`` body -> GenerationRequest; raises ApiError(400/404) for bad input."""
    model, stream, include_usage = _common(body, served_model)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        if not prompt:
            raise ApiError(400, "'prompt' is empty", param="prompt")
        token_ids = tokenizer.encode(prompt)
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        token_ids = list(prompt)
    else:
        raise ApiError(400, "'prompt' must be a non-empty string or a list of token ids (one prompt per request)",
                       param="prompt")
    params = _sampling_params(body, _max_tokens(body, ("max_tokens",), DEFAULT_COMPLETION_MAX_TOKENS))
    return GenerationRequest("completion", model, token_ids, params, stream, include_usage,
                             f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time()))


def parse_chat_request(body: Any, served_model: str, tokenizer) -> GenerationRequest:
    """``POST /v1/chat/completions`` body -> GenerationRequest (messages rendered with the chat template)."""
    model, stream, include_usage = _common(body, served_model)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list of {'role', 'content'} objects", param="messages")
    for index, message in enumerate(messages):
        if (not isinstance(message, dict) or message.get("role") not in ("system", "user", "assistant")
                or not isinstance(message.get("content"), str)):
            raise ApiError(400, f"messages[{index}] must be {{'role': 'system'|'user'|'assistant', 'content': str}}",
                           param="messages")
    prompt = tokenizer.apply_chat_template([{"role": m["role"], "content": m["content"]} for m in messages],
                                           add_generation_prompt=True)
    params = _sampling_params(body, _max_tokens(body, ("max_completion_tokens", "max_tokens"), DEFAULT_CHAT_MAX_TOKENS))
    return GenerationRequest("chat", model, tokenizer.encode(prompt), params, stream, include_usage,
                             f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time()))


def usage(num_prompt_tokens: int, num_completion_tokens: int, num_cached_tokens: int | None = None) -> dict:
    """OpenAI's usage object; with ``num_cached_tokens``, ``prompt_tokens_details.cached_tokens`` too."""
    counts = {"prompt_tokens": num_prompt_tokens, "completion_tokens": num_completion_tokens,
              "total_tokens": num_prompt_tokens + num_completion_tokens}
    if num_cached_tokens is not None:
        counts["prompt_tokens_details"] = {"cached_tokens": min(num_cached_tokens, num_prompt_tokens)}
    return counts


def _finish_reason(reason: str | None) -> str | None:
    # OpenAI knows "stop" and "length"; an aborted request never reaches a client that is still there.
    return None if reason is None else ("length" if reason == "length" else "stop")


def completion_body(request: GenerationRequest, text: str, finish_reason: str, num_completion_tokens: int,
                    num_cached_tokens: int | None = None) -> dict:
    """The whole (non-streamed) answer."""
    base = {"id": request.response_id, "created": request.created, "model": request.model}
    use = usage(len(request.prompt_token_ids), num_completion_tokens, num_cached_tokens)
    if request.kind == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text},
                  "finish_reason": _finish_reason(finish_reason), "logprobs": None}
        return {**base, "object": "chat.completion", "choices": [choice], "usage": use}
    choice = {"index": 0, "text": text, "finish_reason": _finish_reason(finish_reason), "logprobs": None}
    return {**base, "object": "text_completion", "choices": [choice], "usage": use}


def completion_chunk(request: GenerationRequest, text: str, finish_reason: str | None) -> dict:
    """One streamed event of ``/v1/completions``."""
    choice = {"index": 0, "text": text, "finish_reason": _finish_reason(finish_reason), "logprobs": None}
    return {"id": request.response_id, "object": "text_completion", "created": request.created,
            "model": request.model, "choices": [choice]}


def chat_chunk(request: GenerationRequest, delta: dict, finish_reason: str | None) -> dict:
    """One streamed event of ``/v1/chat/completions`` (``delta``: {"role"} first, then {"content"})."""
    choice = {"index": 0, "delta": delta, "finish_reason": _finish_reason(finish_reason), "logprobs": None}
    return {"id": request.response_id, "object": "chat.completion.chunk", "created": request.created,
            "model": request.model, "choices": [choice]}


def usage_chunk(request: GenerationRequest, num_completion_tokens: int, num_cached_tokens: int | None = None) -> dict:
    """The last event when the client asked for ``stream_options.include_usage``: no choices, the usage."""
    kind = "chat.completion.chunk" if request.kind == "chat" else "text_completion"
    return {"id": request.response_id, "object": kind, "created": request.created, "model": request.model,
            "choices": [], "usage": usage(len(request.prompt_token_ids), num_completion_tokens, num_cached_tokens)}


def sse_event(data: dict | str) -> bytes:
    """One server-sent event: ``data: <json>`` and the blank line that ends it."""
    import json

    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {payload}\n\n".encode()
