"""The HTTP server: an OpenAI-compatible FastAPI app in front of an engine loop.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions`` (streamed with server-sent
events or not), ``GET /v1/models``, ``GET /health``, ``GET /metrics`` (Prometheus text format),
``POST /reset_prefix_cache`` (a fresh engine when idle, for experiments that need a cold cache).

For people: ``GET /`` is a chat page (streamed answers, every sampling control, TTFT/TPOT per
answer) and ``GET /engine`` a live view of the engine (queues, the KV block pool, preemptions),
both static files from ``course_lib/server/static`` that call this API and nothing else.
``GET /server_info`` describes what runs (model, engine configuration, admission limits),
``GET /engine/state`` the queue lengths now, and ``GET /engine/stream`` is the engine view's
server-sent events (``course_lib.server.engine_view``).

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
import re
import time
from collections.abc import Callable
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from course_lib.server import protocol
from course_lib.server.admission import AdmissionLimits, AdmissionPolicy, validate_decision
from course_lib.server.metrics import ServerMetrics
from course_lib.server.protocol import ApiError, GenerationRequest

__all__ = ["DEFAULT_MAX_PENDING", "MAX_ENGINE_VIEWERS", "STATIC_DIR", "add_pages", "build_app", "sse_response"]

DEFAULT_MAX_PENDING = 256
"""Requests in flight (waiting + running) past which even a server without admission says 429."""

MAX_ENGINE_VIEWERS = 8
"""Engine views open at once (``GET /engine/stream``); one more gets 429."""

KEEPALIVE_S = 15.0
"""An idle event stream sends a comment this often, so proxies and browsers keep it open."""

STATIC_DIR = Path(__file__).resolve().parent / "static"
"""The chat page and the engine view: HTML, CSS and JavaScript, no build step, nothing from elsewhere."""

# The pages may load and call only this server: no CDN, no font service, no analytics.
_PAGE_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                               "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
}
_TAG = re.compile(r"[A-Za-z0-9_.:-]{1,64}")


def add_pages(app: FastAPI) -> None:
    """Serve the chat page at ``/`` and the engine view at ``/engine`` (static files; see ``STATIC_DIR``)."""

    @app.get("/", include_in_schema=False)
    async def chat_page():
        return FileResponse(STATIC_DIR / "index.html", headers=_PAGE_HEADERS)

    @app.get("/engine", include_in_schema=False)
    async def engine_page():
        return FileResponse(STATIC_DIR / "engine.html", headers=_PAGE_HEADERS)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")


def sse_response(events) -> StreamingResponse:
    """A server-sent-events response over the async iterator ``events`` (bytes)."""
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def build_app(backend, *, model_name: str, admission: AdmissionPolicy | None = None,
              limits: AdmissionLimits | None = None, max_pending: int = DEFAULT_MAX_PENDING,
              metrics: ServerMetrics | None = None, server_info: dict | None = None) -> FastAPI:
    """The FastAPI app serving ``backend`` (an ``EngineLoop`` or anything with its methods).

    admission: ``policy(request, state, limits) -> decision`` (see ``course_lib.server.admission``),
    or None to admit everything up to ``max_pending``. limits: what the policy enforces.
    metrics: the ``ServerMetrics`` whose registry ``/metrics`` exposes (the backend's
    ``on_finish`` should feed it); a new one is made when None. server_info: more facts for
    ``GET /server_info`` (say ``{"quantization": "int8"}``).
    """
    limits = limits or AdmissionLimits()
    metrics = metrics or ServerMetrics(backend.state)
    app = FastAPI(title="course_lib server", docs_url=None, redoc_url=None)
    app.state.backend = backend
    app.state.metrics = metrics
    app.state.limits = limits  # read per request, so a launcher may set them once the pool size is known
    app.state.server_info = dict(server_info or {})
    door = asyncio.Lock()  # created lazily on the server's loop at first use (Python >= 3.10)
    add_pages(app)

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

    @app.get("/server_info")
    async def info():
        describe = getattr(backend, "describe", None)
        return {
            "model": model_name,
            "engine": describe() if describe is not None else None,
            "quantization": None,
            "admission": {"enabled": admission is not None, **(app.state.limits.as_dict() if admission else {})},
            "max_pending": max_pending,
            "engine_view": getattr(backend, "monitor", None) is not None,
            "replicas": None,
            **app.state.server_info,
        }

    @app.get("/engine/state")
    async def engine_state():
        return {**backend.state().as_dict(), "alive": getattr(backend, "is_alive", True)}

    @app.get("/engine/stream")
    async def engine_stream():
        monitor = getattr(backend, "monitor", None)
        if monitor is None:
            raise ApiError(404, "this server's backend has no engine view")
        if monitor.num_viewers >= MAX_ENGINE_VIEWERS:
            raise ApiError(429, f"{MAX_ENGINE_VIEWERS} engine views are open already; close one",
                           headers={"Retry-After": "5"})
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()
        subscription = monitor.subscribe(lambda: loop.call_soon_threadsafe(wake.set))
        try:
            first = await asyncio.wait_for(asyncio.wrap_future(backend.snapshot()), timeout=30)
        except BaseException as error:
            monitor.unsubscribe(subscription)
            if isinstance(error, Exception):
                raise ApiError(503, f"the engine loop gave no snapshot: {error!r}") from None
            raise
        return sse_response(view_events(monitor, subscription, wake, first))

    async def view_events(monitor, subscription, wake: asyncio.Event, first: dict):
        try:
            yield protocol.sse_event({"type": "hello", **first})
            while True:
                try:
                    await asyncio.wait_for(wake.wait(), timeout=KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield b": keep-alive\n\n"
                    continue
                wake.clear()
                frame, events, skipped = subscription.take()
                if frame is not None or events:
                    yield protocol.sse_event({"type": "step", "frame": frame, "events": events, "skipped": skipped,
                                              "lost_events": subscription.lost_events})
        finally:
            monitor.unsubscribe(subscription)

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

    def tag_of(request: Request) -> dict:
        """``{"tag": X-Request-Id}`` for a backend with an engine view (the router sets it), else {}."""
        tag = request.headers.get("x-request-id")
        if tag and _TAG.fullmatch(tag) and getattr(backend, "monitor", None) is not None:
            return {"tag": tag}
        return {}

    async def admit_and_submit(parsed: GenerationRequest, arrival: float, on_output: Callable,
                               extra: dict) -> str:
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
            accepted = backend.submit(parsed.prompt_token_ids, parsed.params, on_output, arrival_time=arrival, **extra)
        try:
            return await asyncio.wrap_future(accepted)
        except (ValueError, TypeError) as error:  # the engine says it can never run
            raise ApiError(400, str(error), code="request_too_large") from None

    async def generate(request: Request, parsed: GenerationRequest, arrival: float):
        loop = asyncio.get_running_loop()
        outputs: asyncio.Queue = asyncio.Queue()

        def on_output(output) -> None:  # called in the engine thread
            loop.call_soon_threadsafe(outputs.put_nowait, output)

        request_id = await admit_and_submit(parsed, arrival, on_output, tag_of(request))
        if parsed.stream:
            return sse_response(stream_events(parsed, request_id, outputs))
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
                    body = protocol.completion_body(parsed, "".join(pieces), output.finish_reason, num_tokens,
                                                    getattr(output, "num_cached_tokens", None))
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
                yield protocol.sse_event(protocol.usage_chunk(parsed, num_tokens,
                                                              getattr(output, "num_cached_tokens", None)))
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
