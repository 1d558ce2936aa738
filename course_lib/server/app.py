"""The HTTP server: an OpenAI-compatible FastAPI app in front of an engine loop.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed with server-sent
events or not), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text format),
``POST /reset_prefix_cache`` (a fresh engine when idle, for experiments that need a cold cache).

One request's way through:

1. parse and validate the body (``course_lib.server.protocol``): 400 for bad fields, 404 for
   another model's name;
2. admission (``course_lib.server.admission``): the policy sees the request's size and the loop's
   state and answers 200, 400 or 429 + ``Retry-After``. Decisions are serialized by a lock, so
   two requests arriving together cannot both take the last place. Even with no policy the server
   refuses (429) past ``max_pending`` requests in flight: its queue is never unbounded;
3. submit to the engine loop, which calls back from its thread with every new token; the
   callback moves each output onto this request's ``asyncio.Queue`` on the server's event loop;
4. answer: stream each new piece of text as an SSE event, or collect it into one JSON body.

A client that goes away (closes the stream, or disconnects while waiting for a non-streamed
answer) gets its request aborted: the engine frees its KV blocks at the next step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool

from course_lib.server import protocol
from course_lib.server.admission import AdmissionLimits, AdmissionPolicy, validate_decision
from course_lib.server.metrics import ServerMetrics
from course_lib.server.protocol import ApiError, GenerationRequest

__all__ = ["DEFAULT_MAX_PENDING", "build_app"]

DEFAULT_MAX_PENDING = 256
"""Requests in flight (waiting + running) past which even a server without admission says 429."""


def build_app(backend, *, model_name: str, admission: AdmissionPolicy | None = None,
              limits: AdmissionLimits | None = None, max_pending: int = DEFAULT_MAX_PENDING,
              metrics: ServerMetrics | None = None) -> FastAPI:
    """The FastAPI app serving ``backend`` (an ``EngineLoop`` or anything with its methods).

    admission: ``policy(request, state, limits) -> decision`` (see ``course_lib.server.admission``),
    or None to admit everything up to ``max_pending``. limits: what the policy enforces.
    metrics: the ``ServerMetrics`` whose registry ``/metrics`` exposes (the backend's
    ``on_finish`` should feed it); a new one is made when None.
    """
    limits = limits or AdmissionLimits()
    metrics = metrics or ServerMetrics(backend.state)
    app = FastAPI(title="course_lib server", docs_url=None, redoc_url=None)
    app.state.backend = backend
    app.state.metrics = metrics
    app.state.limits = limits  # read per request, so a launcher may set them once the pool size is known
    door = asyncio.Lock()  # created lazily on the server's loop at first use (Python >= 3.10)

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, error: ApiError):
        if error.status in (400, 429):
            metrics.observe_rejected(error.status)
        return JSONResponse(protocol.error_body(error), status_code=error.status, headers=error.headers)

    @app.get("/health")
    async def health():
        if not getattr(backend, "is_alive", True):
            return JSONResponse({"status": "engine loop stopped"}, status_code=503)
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "course"}]}

    @app.get("/metrics")
    async def prometheus_metrics():
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache():
        try:
            await run_in_threadpool(backend.reset)
        except RuntimeError as error:
            return JSONResponse({"error": {"message": str(error), "type": "conflict"}}, status_code=409)
        return {"status": "ok"}

    async def read_json(request: Request):
        try:
            return await request.json()
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None

    @app.post("/v1/completions")
    async def completions(request: Request):
        arrival = time.perf_counter()
        parsed = protocol.parse_completion_request(await read_json(request), model_name, backend.tokenizer)
        return await generate(request, parsed, arrival)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        arrival = time.perf_counter()
        parsed = protocol.parse_chat_request(await read_json(request), model_name, backend.tokenizer)
        return await generate(request, parsed, arrival)

    async def admit_and_submit(parsed: GenerationRequest, arrival: float, on_output: Callable) -> str:
        limits = app.state.limits
        async with door:
            state = backend.state()
            if state.num_waiting + state.num_running >= max_pending:
                raise ApiError(429, f"the server has {max_pending} requests in flight; retry later",
                               headers={"Retry-After": str(limits.retry_after_s)})
            if admission is not None:
                ask = {"num_prompt_tokens": len(parsed.prompt_token_ids), "max_tokens": parsed.params.max_tokens}
                try:
                    decision = await run_in_threadpool(admission, ask, state.as_dict(), limits.as_dict())
                    status, message, retry_after = validate_decision(decision)
                except Exception as error:  # the policy is someone's code: report it, keep serving
                    raise ApiError(500, f"the admission policy failed: {type(error).__name__}: {error}") from None
                if status == 400:
                    raise ApiError(400, message, code="request_too_large")
                if status == 429:
                    raise ApiError(429, message, headers={"Retry-After": str(retry_after)})
            accepted = backend.submit(parsed.prompt_token_ids, parsed.params, on_output, arrival_time=arrival)
        try:
            return await asyncio.wrap_future(accepted)
        except (ValueError, TypeError) as error:  # the engine says it can never run
            raise ApiError(400, str(error), code="request_too_large") from None

    async def generate(request: Request, parsed: GenerationRequest, arrival: float):
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue = asyncio.Queue()

        def on_output(output) -> None:  # called in the engine thread
            loop.call_soon_threadsafe(outputs.put_nowait, output)

        request_id = await admit_and_submit(parsed, arrival, on_output)
        if parsed.stream:
            return StreamingResponse(stream_events(parsed, request_id, outputs), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache"})
        return await collect(request, parsed, request_id, outputs)

    async def collect(request: Request, parsed: GenerationRequest, request_id: str, outputs: asyncio.Queue):
        pieces, num_tokens = [], 0
        try:
            while True:
                try:
                    output = await asyncio.wait_for(outputs.get(), timeout=0.25)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        backend.abort(request_id)
                        return Response(status_code=499)
                    continue
                pieces.append(output.new_text)
                num_tokens += len(output.new_token_ids)
                if output.finished:
                    body = protocol.completion_body(parsed, "".join(pieces), output.finish_reason, num_tokens)
                    return JSONResponse(body)
        except asyncio.CancelledError:
            backend.abort(request_id)
            raise

    async def stream_events(parsed: GenerationRequest, request_id: str, outputs: asyncio.Queue):
        finished, num_tokens = False, 0
        try:
            if parsed.kind == "chat":
                yield protocol.sse_event(protocol.chat_chunk(parsed, {"role": "assistant", "content": ""}, None))
            while not finished:
                output = await outputs.get()
                num_tokens += len(output.new_token_ids)
                finished = output.finished
                if output.new_text:
                    yield protocol.sse_event(_text_chunk(parsed, output.new_text))
            yield protocol.sse_event(_final_chunk(parsed, output.finish_reason))
            if parsed.include_usage:
                yield protocol.sse_event(protocol.usage_chunk(parsed, num_tokens))
            yield protocol.sse_event("[DONE]")
        finally:
            if not finished:  # the client went away mid-stream: free the request's blocks
                backend.abort(request_id)

    return app


def _text_chunk(parsed: GenerationRequest, text: str) -> dict:
    if parsed.kind == "chat":
        return protocol.chat_chunk(parsed, {"content": text}, None)
    return protocol.completion_chunk(parsed, text, None)


def _final_chunk(parsed: GenerationRequest, finish_reason: str | None) -> dict:
    if parsed.kind == "chat":
        return protocol.chat_chunk(parsed, {}, finish_reason)
    return protocol.completion_chunk(parsed, "", finish_reason)
