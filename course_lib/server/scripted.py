"""A scripted OpenAI-compatible server: no model, exact timing, and a log of what it saw.

Checks use it to measure a student's client code from the server's side: every request's
arrival time (``perf_counter`` seconds) and body is logged, and every answer streams
``num_tokens`` one-word chunks, the first after ``first_delay_s`` and the rest ``gap_s`` apart,
then a finish event, a usage event and ``[DONE]``. Its clock is the grader's, so a load generator
that reports made-up times cannot fool it.

With ``slots=c`` it is also a queue with a known capacity, for experiments whose lesson is
queueing: at most ``c`` answers stream at once, and a request that finds every slot taken waits
for one, first come first served, before its first token's delay starts. Each answer of n tokens
holds its slot for ``first_delay_s + (n - 1) * gap_s`` seconds, so the server completes at most
``capacity_per_s(n) = c / that`` requests per second; past it, the queue (and every TTFT) grows.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

__all__ = ["ScriptedServer"]


class ScriptedServer:
    """``with ScriptedServer(num_tokens=5, gap_s=0.05) as server:`` then send to ``server.url``
    (or ``server = ScriptedServer(...).start()`` ... ``server.stop()`` across notebook cells)."""

    def __init__(self, *, num_tokens: int = 5, first_delay_s: float = 0.05, gap_s: float = 0.05,
                 chunk_words: int = 1, slots: int | None = None) -> None:
        if slots is not None and (not isinstance(slots, int) or isinstance(slots, bool) or slots < 1):
            raise ValueError(f"slots must be None (no limit) or an integer >= 1, got {slots!r}")
        self.num_tokens = num_tokens
        self.first_delay_s = first_delay_s
        self.gap_s = gap_s
        self.chunk_words = chunk_words
        self.slots = slots
        self.arrivals: list[float] = []
        self.bodies: list[dict] = []
        self.sent: list[list[float]] = []  # per request: when each text event left
        self.started: list[float | None] = []  # per request: when it got a slot (its service began)
        self._lock = threading.Lock()
        self._thread = None
        self._free_slots: asyncio.Semaphore | None = None  # made on the server's own event loop

    def service_s(self, num_tokens: int | None = None) -> float:
        """Seconds one answer of ``num_tokens`` tokens (default: the most it sends) holds its slot."""
        n = min(self.num_tokens if num_tokens is None else num_tokens, self.num_tokens)
        return self.first_delay_s + (n - 1) * self.gap_s

    def capacity_per_s(self, num_tokens: int | None = None) -> float:
        """Requests per second the server completes when it is never idle (inf without a slot limit)."""
        return float("inf") if self.slots is None else self.slots / self.service_s(num_tokens)

    def app(self) -> FastAPI:
        app = FastAPI(docs_url=None, redoc_url=None)

        @app.get("/health")
        async def health():
            return {"status": "ok"}

        @app.post("/v1/completions")
        async def completions(request: Request):
            arrival = time.perf_counter()
            body = await request.json()
            with self._lock:
                index = len(self.arrivals)
                self.arrivals.append(arrival)
                self.bodies.append(body)
                self.sent.append([])
                self.started.append(None if self.slots else arrival)
            num_tokens = min(int(body.get("max_tokens", self.num_tokens)), self.num_tokens)
            if not body.get("stream"):
                await asyncio.sleep(self.first_delay_s + self.gap_s * (num_tokens - 1))
                return JSONResponse({"object": "text_completion", "choices": [
                    {"index": 0, "text": " word" * num_tokens, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": num_tokens, "total_tokens": num_tokens + 1}})
            return StreamingResponse(self._events(index, num_tokens), media_type="text/event-stream")

        return app

    async def _events(self, index: int, num_tokens: int):
        if self.slots is None:
            async for event in self._answer(index, num_tokens):
                yield event
            return
        if self._free_slots is None:
            self._free_slots = asyncio.Semaphore(self.slots)
        async with self._free_slots:  # first come, first served
            self.started[index] = time.perf_counter()
            async for event in self._answer(index, num_tokens):
                yield event

    async def _answer(self, index: int, num_tokens: int):
        def event(data) -> bytes:
            return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()

        await asyncio.sleep(self.first_delay_s)
        for token in range(num_tokens):
            if token:
                await asyncio.sleep(self.gap_s)
            self.sent[index].append(time.perf_counter())
            yield event({"object": "text_completion", "choices": [{"index": 0, "text": f" w{token}", "finish_reason": None}]})
        yield event({"object": "text_completion", "choices": [{"index": 0, "text": "", "finish_reason": "length"}]})
        yield event({"object": "text_completion", "choices": [],
                     "usage": {"prompt_tokens": 1, "completion_tokens": num_tokens, "total_tokens": num_tokens + 1}})
        yield event("[DONE]")

    def start(self) -> ScriptedServer:
        """Serve on 127.0.0.1 (a free port) from a thread of this process; ``url`` says where."""
        from course_lib.server.launch import ServerThread

        if self._thread is not None:
            raise RuntimeError("this scripted server is already running")
        self._thread = ServerThread(self.app()).start()
        self.url = self._thread.url
        return self

    def stop(self) -> None:
        """Stop serving (nothing happens if it is not running)."""
        if self._thread is not None:
            self._thread.stop()
            self._thread = None

    def __enter__(self) -> ScriptedServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
