"""The router: one address in front of many replicas of the server.

For every generation request the router tokenizes the prompt (the chat template included, as
the replicas will), asks its policy (``course_lib.server.routing``) which replica should serve it
given the requests each has in flight, and forwards the request there: a streamed answer is
passed through chunk by chunk, a refusal (429 with its Retry-After) is passed back as it is.
``outstanding[i]`` goes up when a request is sent to replica i and down when its answer ends.

``GET /metrics`` shows the router's own counters (requests routed per replica, in flight per
replica); each replica keeps its own ``/metrics`` (prefix-cache hits, latencies).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, generate_latest
from starlette.concurrency import run_in_threadpool

from course_lib.server.protocol import ApiError, error_body

__all__ = ["build_router_app", "start_router"]

disable_created_metrics()


def _prompt_token_ids(path: str, body: dict, tokenizer) -> list[int]:
    if path.endswith("chat/completions"):
        messages = body.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise ApiError(400, "'messages' must be a list of {'role', 'content'} objects", param="messages")
        return tokenizer.encode(tokenizer.apply_chat_template(
            [{"role": m.get("role"), "content": m.get("content")} for m in messages], add_generation_prompt=True))
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tokenizer.encode(prompt)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return list(prompt)
    raise ApiError(400, "'prompt' must be a string or a list of token ids", param="prompt")


def build_router_app(replica_urls: Sequence[str], policy, tokenizer) -> FastAPI:
    """A FastAPI app that forwards generation requests to ``replica_urls`` as ``policy`` chooses."""
    replicas = list(replica_urls)
    if not replicas:
        raise ValueError("replica_urls is empty")
    app = FastAPI(title="course_lib router", docs_url=None, redoc_url=None)
    registry = CollectorRegistry()
    routed = Counter("course_router_requests", "Requests routed, by replica.", ["replica"], registry=registry)
    in_flight = Gauge("course_router_outstanding", "Requests in flight, by replica.", ["replica"], registry=registry)
    outstanding = [0] * len(replicas)
    choose_lock = asyncio.Lock()
    app.state.outstanding = outstanding
    app.state.routed = [0] * len(replicas)
    client_holder: dict[str, httpx.AsyncClient] = {}

    def client() -> httpx.AsyncClient:
        if "client" not in client_holder:
            limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
            client_holder["client"] = httpx.AsyncClient(timeout=httpx.Timeout(300.0), limits=limits)
        return client_holder["client"]

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, error: ApiError):
        return JSONResponse(error_body(error), status_code=error.status, headers=error.headers)

    @app.get("/health")
    async def health():
        answers = await asyncio.gather(*(client().get(f"{url}/health") for url in replicas), return_exceptions=True)
        healthy = [not isinstance(a, BaseException) and a.status_code == 200 for a in answers]
        return JSONResponse({"status": "ok" if all(healthy) else "degraded", "replicas": healthy},
                            status_code=200 if all(healthy) else 503)

    @app.get("/v1/models")
    async def models():
        response = await client().get(f"{replicas[0]}/v1/models")
        return Response(response.content, status_code=response.status_code, media_type="application/json")

    @app.get("/metrics")
    async def metrics():
        return Response(generate_latest(registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def choose(token_ids: list[int]) -> int:
        async with choose_lock:  # one decision at a time, each seeing the counts the previous left
            try:
                replica = await run_in_threadpool(policy.choose, token_ids, list(outstanding))
            except Exception as error:  # the policy is someone's code: report it, keep routing
                raise ApiError(500, f"the routing policy failed: {type(error).__name__}: {error}") from None
            if not isinstance(replica, int) or isinstance(replica, bool) or not 0 <= replica < len(replicas):
                raise ApiError(500, f"the routing policy chose {replica!r}; it must be a replica index in "
                                    f"[0, {len(replicas)})")
            outstanding[replica] += 1
        app.state.routed[replica] += 1
        routed.labels(replica=str(replica)).inc()
        in_flight.labels(replica=str(replica)).set(outstanding[replica])
        return replica

    def release(replica: int) -> None:
        outstanding[replica] -= 1
        in_flight.labels(replica=str(replica)).set(outstanding[replica])

    async def forward(request: Request, path: str):
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        token_ids = _prompt_token_ids(path, body, tokenizer)
        replica = await choose(token_ids)
        upstream = client().build_request("POST", f"{replicas[replica]}{path}", json=body)
        try:
            response = await client().send(upstream, stream=True)
        except httpx.HTTPError as error:
            release(replica)
            raise ApiError(502, f"replica {replica} did not answer: {error}") from None
        headers = {k: v for k, v in response.headers.items() if k.lower() in ("retry-after", "content-type")}
        headers["x-course-replica"] = str(replica)
        if not body.get("stream") or response.status_code != 200:
            try:
                content = await response.aread()
            finally:
                await response.aclose()
                release(replica)
            return Response(content, status_code=response.status_code, headers=headers)

        async def relay():
            try:
                async for piece in response.aiter_raw():
                    yield piece
            finally:  # the stream ended, or our client went away: close upstream (the replica aborts)
                await response.aclose()
                release(replica)

        return StreamingResponse(relay(), status_code=200, headers=headers)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await forward(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await forward(request, "/v1/chat/completions")

    return app


def start_router(replica_urls: Sequence[str], policy, tokenizer, *, port: int | None = None, host: str | None = None):
    """Serve a router in a thread of this process; returns the running ``ServerThread``."""
    from course_lib.server.launch import LOOPBACK, ServerThread

    app = build_router_app(replica_urls, policy, tokenizer)
    return ServerThread(app, host=host or LOOPBACK, port=port).start()
