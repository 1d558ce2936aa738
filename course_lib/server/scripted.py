"""A scripted OpenAI-compatible server: no model, exact timing, and a log of what it saw.

Checks use it to measure a student's client code from the server's side: every request's
arrival time (``perf_counter`` seconds) and body is logged, and every answer streams
``num_tokens`` one-word chunks, the first after ``first_delay_s`` and the rest ``gap_s`` apart,
then a finish event, a usage event and ``[DONE]``. Its clock is the grader's, so a load generator
that reports made-up times cannot fool it.
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
    """``with ScriptedServer(num_tokens=5, gap_s=0.05) as server:`` then send to ``server.url``."""

    def __init__(self, *, num_tokens: int = 5, first_delay_s: float = 0.05, gap_s: float = 0.05,
                 chunk_words: int = 1) -> None:
        self.num_tokens = num_tokens
        self.first_delay_s = first_delay_s
        self.gap_s = gap_s
        self.chunk_words = chunk_words
        self.arrivals: list[float] = []
        self.bodies: list[dict] = []
        self.sent: list[list[float]] = []  # per request: when each text event left
        self._lock = threading.Lock()
        self._thread = None

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
            num_tokens = min(int(body.get("max_tokens", self.num_tokens)), self.num_tokens)
            if not body.get("stream"):
                await asyncio.sleep(self.first_delay_s + self.gap_s * (num_tokens - 1))
                return JSONResponse({"object": "text_completion", "choices": [
                    {"index": 0, "text": " word" * num_tokens, "finish_reason": "length"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": num_tokens, "total_tokens": num_tokens + 1}})
            return StreamingResponse(self._events(index, num_tokens), media_type="text/event-stream")

        return app

    async def _events(self, index: int, num_tokens: int):
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

    def __enter__(self) -> ScriptedServer:
        from course_lib.server.launch import ServerThread

        self._thread = ServerThread(self.app()).start()
        self.url = self._thread.url
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._thread.stop()
