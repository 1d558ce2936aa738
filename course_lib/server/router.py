"""The router: one address in front of many replicas of the server.

For every generation request the router tokenizes the prompt (the chat template included, as
the replicas will), asks its policy (``course_lib.server.routing``) which replica should serve it
given the requests each has in flight, and forwards the request there: a streamed answer is
passed through chunk by chunk, a refusal (429 with its Retry-After) is passed back as it is.
``outstanding[i]`` goes up when a request is sent to replica i and down when its answer ends.

``GET /metrics`` shows the router's own counters (requests routed per replica, in flight per
replica); each replica keeps its own ``/metrics`` (prefix-cache hits, latencies, KV blocks).

A policy that routes by the replicas' KV caches (``course_lib.server.balancing.MetricsRouting``,
``course serve --router kv-aware``) gets more: the router scrapes every replica's ``/metrics``
every ``policy.scrape_interval_s`` seconds (and before its first decision, and whenever the
policy asks with ``refresh()``) and hands each text to ``policy.report_metrics(replica, text)``;
each decision is ``policy.choose_request(prompt_token_ids, max_tokens, outstanding)``, with the
request's ``max_tokens``, and the engine view shows the free blocks each replica last reported.

The router serves the same pages as one server: the chat page at ``/`` and the engine view at
``/engine``. Its ``GET /engine/stream`` merges the engine views of every replica (each message
tagged with its replica) with the router's own decisions: every request gets a router id
(``route-N``, passed to the replica as ``X-Request-Id``, so the replica's view shows it beside its
own id), the replica chosen and the requests each replica had in flight at that moment.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import deque
from collections.abc import Sequence

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, Counter, Gauge, disable_created_metrics, generate_latest
from starlette.concurrency import run_in_threadpool

from course_lib.server.app import KEEPALIVE_S, MAX_ENGINE_VIEWERS, add_pages, sse_response
from course_lib.server.protocol import DEFAULT_CHAT_MAX_TOKENS, DEFAULT_COMPLETION_MAX_TOKENS, ApiError, error_body

__all__ = ["build_router_app", "start_router"]

disable_created_metrics()

ROUTE_HISTORY = 200
"""Routing decisions a new engine view receives at once (the most recent ones)."""
VIEW_QUEUE = 256
"""Messages waiting for one slow engine view before the oldest are dropped."""


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


def _requested_max_tokens(path: str, body: dict) -> int:
    """The request's max_tokens as its replica will read it (the server's default when absent or malformed)."""
    names = ("max_completion_tokens", "max_tokens") if path.endswith("chat/completions") else ("max_tokens",)
    for name in names:
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return DEFAULT_CHAT_MAX_TOKENS if path.endswith("chat/completions") else DEFAULT_COMPLETION_MAX_TOKENS


def build_router_app(replica_urls: Sequence[str], policy, tokenizer, *, policy_name: str | None = None) -> FastAPI:
    """A FastAPI app that forwards generation requests to ``replica_urls`` as ``policy`` chooses.

    policy_name: what the pages call the policy (default: its class name).
    """
    replicas = list(replica_urls)
    if not replicas:
        raise ValueError("replica_urls is empty")
    policy_name = policy_name or type(policy).__name__
    app = FastAPI(title="course_lib router", docs_url=None, redoc_url=None)
    add_pages(app)
    route_ids = itertools.count()
    route_log: deque[dict] = deque(maxlen=ROUTE_HISTORY)
    viewers: set[asyncio.Queue] = set()
    registry = CollectorRegistry()
    routed = Counter("course_router_requests", "Requests routed, by replica.", ["replica"], registry=registry)
    in_flight = Gauge("course_router_outstanding", "Requests in flight, by replica.", ["replica"], registry=registry)
    outstanding = [0] * len(replicas)
    choose_lock = asyncio.Lock()
    by_metrics = callable(getattr(policy, "report_metrics", None))
    scraper: dict[str, asyncio.Task] = {}
    scrape_errors: dict[int, str] = {}
    # Requests sent to each replica whose answer has not started yet: the replica may not count them
    # in its metrics yet, so its report waits until they have (a report must include what was sent before it).
    unacknowledged = [0] * len(replicas)
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

    async def each_replica(path: str) -> list[dict | None]:
        async def one(url: str):
            try:
                response = await client().get(f"{url}{path}", timeout=5.0)
                return response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError):
                return None
        return list(await asyncio.gather(*(one(url) for url in replicas)))

    @app.get("/server_info")
    async def server_info():
        infos = await each_replica("/server_info")
        first = next((info for info in infos if info), {}) or {}
        return {**first, "replicas": infos,
                "router": {"policy": policy_name, "replica_urls": replicas, "outstanding": list(outstanding),
                           "routed": list(app.state.routed)}}

    @app.get("/engine/state")
    async def engine_state():
        states = await each_replica("/engine/state")
        alive = [s for s in states if s]
        return {"num_waiting": sum(s["num_waiting"] for s in alive), "num_running": sum(s["num_running"] for s in alive),
                "kv_blocks_used": sum(s["kv_blocks_used"] for s in alive),
                "kv_blocks_total": sum(s["kv_blocks_total"] for s in alive),
                "alive": len(alive) == len(replicas), "replicas": states}

    def tell_viewers(message: dict) -> None:
        data = ("data: " + json.dumps(message, separators=(",", ":")) + "\n\n").encode()
        for queue in viewers:
            _put_dropping_oldest(queue, data)

    @app.get("/engine/stream")
    async def engine_stream():
        if len(viewers) >= MAX_ENGINE_VIEWERS:
            raise ApiError(429, f"{MAX_ENGINE_VIEWERS} engine views are open already; close one",
                           headers={"Retry-After": "5"})
        queue: asyncio.Queue = asyncio.Queue(maxsize=VIEW_QUEUE)
        viewers.add(queue)
        return sse_response(merged_view(queue))

    async def merged_view(queue: asyncio.Queue):
        relays = [asyncio.create_task(relay(index, url, queue)) for index, url in enumerate(replicas)]
        try:
            yield ("data: " + json.dumps({"type": "router", "policy": policy_name, "replica_urls": replicas,
                                          "outstanding": list(outstanding), "routes": list(route_log)},
                                         separators=(",", ":")) + "\n\n").encode()
            while True:
                try:
                    yield await asyncio.wait_for(queue.get(), timeout=KEEPALIVE_S)
                except asyncio.TimeoutError:
                    yield b": keep-alive\n\n"
        finally:
            viewers.discard(queue)
            for task in relays:
                task.cancel()

    async def relay(index: int, url: str, queue: asyncio.Queue) -> None:
        """Pass replica ``index``'s engine view into ``queue``, each message wrapped with its index."""
        prefix = '{"type":"replica","replica":%d,"message":' % index
        while True:
            try:
                async with client().stream("GET", f"{url}/engine/stream",
                                           timeout=httpx.Timeout(None, connect=5.0)) as response:
                    if response.status_code != 200:
                        raise httpx.HTTPError(f"HTTP {response.status_code}")
                    async for line in response.aiter_lines():
                        if line.startswith("data: "):
                            _put_dropping_oldest(queue, f"data: {prefix}{line[6:]}}}\n\n".encode())
            except httpx.HTTPError as error:
                message = {"type": "replica-down", "replica": index, "error": str(error) or type(error).__name__}
                _put_dropping_oldest(queue, ("data: " + json.dumps(message) + "\n\n").encode())
            await asyncio.sleep(2.0)  # the replica closed the stream or is down: try again

    async def scrape(index: int) -> None:
        """Fetch replica ``index``'s metrics, then hand them to the policy unless they are already out of date.

        The fetch runs without the decision lock (a slow replica must not hold up routing); a report
        is dropped when a request was sent to that replica during the fetch, or is still on its way
        there, since the replica's numbers would not count it and the policy would forget it.
        """
        routed_before = app.state.routed[index]
        try:
            response = await client().get(f"{replicas[index]}/metrics", timeout=2.0)
            response.raise_for_status()
        except httpx.HTTPError as error:
            scrape_errors[index] = f"replica {index}'s /metrics did not answer: {error or type(error).__name__}"
            return
        async with choose_lock:
            if app.state.routed[index] != routed_before or unacknowledged[index]:
                return
            try:
                await run_in_threadpool(policy.report_metrics, index, response.text)
            except Exception as error:  # the policy is someone's code: report it where a decision needs it
                scrape_errors[index] = f"reading replica {index}'s /metrics failed: {type(error).__name__}: {error}"
                return
            scrape_errors.pop(index, None)

    async def scrape_all() -> None:
        refresh = getattr(policy, "refresh_requested", None)
        if refresh is not None:
            refresh.clear()
        await asyncio.gather(*(scrape(index) for index in range(len(replicas))))

    async def scrape_forever() -> None:
        interval = getattr(policy, "scrape_interval_s", None)
        refresh = getattr(policy, "refresh_requested", None)
        while True:
            await asyncio.sleep(interval or 0.01)
            if interval or (refresh is not None and refresh.is_set()):
                await scrape_all()

    async def before_decision() -> None:
        """With a metrics policy: scraping runs, every replica has reported, and a refresh the policy asked
        for has happened (or the request fails, saying why). Runs before the decision lock is taken."""
        if "task" not in scraper or scraper["task"].done():
            scraper["task"] = asyncio.create_task(scrape_forever())
        refresh = getattr(policy, "refresh_requested", None)
        if len(getattr(policy, "loads", {})) < len(replicas) or (refresh is not None and refresh.is_set()):
            await scrape_all()
        missing = [index for index in range(len(replicas)) if index not in getattr(policy, "loads", {})]
        if missing:
            raise ApiError(503, scrape_errors.get(missing[0], f"replica {missing[0]} has not reported its load yet"),
                           headers={"Retry-After": "1"})

    async def choose(token_ids: list[int], max_tokens: int) -> int:
        if by_metrics:
            await before_decision()
        async with choose_lock:  # one decision at a time, each seeing the counts the previous left
            try:
                if by_metrics:
                    replica = await run_in_threadpool(policy.choose_request, token_ids, max_tokens, list(outstanding))
                else:
                    replica = await run_in_threadpool(policy.choose, token_ids, list(outstanding))
            except ApiError:
                raise
            except Exception as error:  # the policy is someone's code: report it, keep routing
                raise ApiError(500, f"the routing policy failed: {type(error).__name__}: {error}") from None
            if not isinstance(replica, int) or isinstance(replica, bool) or not 0 <= replica < len(replicas):
                raise ApiError(500, f"the routing policy chose {replica!r}; it must be a replica index in "
                                    f"[0, {len(replicas)})")
            outstanding[replica] += 1
            unacknowledged[replica] += 1
        app.state.routed[replica] += 1
        routed.labels(replica=str(replica)).inc()
        in_flight.labels(replica=str(replica)).set(outstanding[replica])
        return replica

    def release(replica: int) -> None:
        outstanding[replica] -= 1
        in_flight.labels(replica=str(replica)).set(outstanding[replica])

    def routed_event(route_id: str, replica: int, num_prompt_tokens: int) -> dict:
        """Record one decision for the engine view: the replica chosen and everyone's load after it."""
        event = {"type": "route", "id": route_id, "replica": replica, "outstanding": list(outstanding),
                 "prompt_tokens": num_prompt_tokens, "time": round(time.time(), 3), "status": None}
        if by_metrics:  # what the policy knew: the free blocks each replica last reported
            loads = getattr(policy, "loads", {})
            event["kv_free"] = [loads.get(index, {}).get("blocks_free") for index in range(len(replicas))]
        route_log.append(event)
        tell_viewers(event)
        return event

    def finished_event(event: dict, status: int) -> None:
        event["status"] = status
        event["seconds"] = round(time.time() - event["time"], 3)
        tell_viewers({"type": "route-done", "id": event["id"], "replica": event["replica"], "status": status,
                      "seconds": event["seconds"], "outstanding": list(outstanding)})

    async def forward(request: Request, path: str):
        try:
            body = await request.json()
        except ValueError:
            raise ApiError(400, "the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ApiError(400, "the request body must be a JSON object")
        token_ids = _prompt_token_ids(path, body, tokenizer)
        replica = await choose(token_ids, _requested_max_tokens(path, body))
        route_id = f"route-{next(route_ids)}"
        event = routed_event(route_id, replica, len(token_ids))
        upstream = client().build_request("POST", f"{replicas[replica]}{path}", json=body,
                                          headers={"x-request-id": route_id})
        try:
            response = await client().send(upstream, stream=True)
        except httpx.HTTPError as error:
            unacknowledged[replica] -= 1
            release(replica)
            finished_event(event, 502)
            raise ApiError(502, f"replica {replica} did not answer: {error}") from None
        unacknowledged[replica] -= 1  # the replica answered: its metrics count this request from now on
        headers = {k: v for k, v in response.headers.items() if k.lower() in ("retry-after", "content-type")}
        headers["x-course-replica"] = str(replica)
        headers["x-request-id"] = route_id
        if not body.get("stream") or response.status_code != 200:
            try:
                content = await response.aread()
            finally:
                await response.aclose()
                release(replica)
                finished_event(event, response.status_code)
            return Response(content, status_code=response.status_code, headers=headers)

        async def relay():
            try:
                async for piece in response.aiter_raw():
                    yield piece
            finally:  # the stream ended, or our client went away: close upstream (the replica aborts)
                await response.aclose()
                release(replica)
                finished_event(event, response.status_code)

        return StreamingResponse(relay(), status_code=200, headers=headers)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await forward(request, "/v1/completions")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        return await forward(request, "/v1/chat/completions")

    return app


def start_router(replica_urls: Sequence[str], policy, tokenizer, *, port: int | None = None, host: str | None = None,
                 policy_name: str | None = None):
    """Serve a router in a thread of this process; returns the running ``ServerThread``."""
    from course_lib.server.launch import LOOPBACK, ServerThread

    app = build_router_app(replica_urls, policy, tokenizer, policy_name=policy_name)
    return ServerThread(app, host=host or LOOPBACK, port=port).start()


def _put_dropping_oldest(queue: asyncio.Queue, message: bytes) -> None:
    """Queue ``message`` for a viewer; a full queue (a slow viewer) loses its oldest message instead."""
    if queue.full():
        try:
            queue.get_nowait()
        except asyncio.QueueEmpty:
            pass
    queue.put_nowait(message)
