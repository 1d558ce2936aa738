"""The engine loop: ``LLMEngine.step()`` in a thread of its own, fed by the web server's requests.

``LLMEngine`` is not thread-safe and its ``step()`` blocks for a whole forward pass, so it cannot
run on the web server's event loop (every other client would wait for each step). Instead one
thread owns the engine and everything else talks to it through a queue of commands:

- ``submit(prompt_token_ids, params, on_output)`` queues a request; ``on_output(StepOutput)`` is
  called *from the engine thread* with every new token and once more when the request ends
  (``finished=True``). The server's callback hands each output to its event loop with
  ``loop.call_soon_threadsafe``.
- ``abort(request_id)`` cancels a request (a client that disconnected); the engine frees its blocks.
- ``state()`` is a snapshot, safe to read from any thread: queue lengths, KV blocks in use, the
  blocks promised to admitted requests, counters. Admission control decides on it.
- ``monitor`` (``course_lib.server.engine_view.EngineMonitor``) gets every step's events
  (preemptions, finished requests) and, while a browser watches ``/engine``, a frame of the
  engine's state; ``snapshot()`` asks the engine thread for one frame at any time.

The thread sleeps on the command queue while the engine is idle, so an idle server costs nothing.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from course_lib.engine import LLMEngine, StepOutput
from course_lib.sampling import SamplingParams
from course_lib.server.engine_view import EngineMonitor, describe_engine, snapshot

__all__ = ["EngineLoop", "LoopOutput", "LoopState", "RequestTiming"]

OutputCallback = Callable[[StepOutput], None]


@dataclass
class RequestTiming:
    """Server-side timestamps of one request (``time.perf_counter()`` seconds)."""

    arrival_time: float
    num_prompt_tokens: int
    max_tokens: int
    first_token_time: float | None = None
    finish_time: float | None = None
    num_output_tokens: int = 0
    running: bool = False
    tag: str | None = None  # the client's label for the request (the router's request id)
    num_cached_tokens: int | None = None  # prompt tokens found in the prefix cache, once scheduled


@dataclass(frozen=True)
class LoopOutput(StepOutput):
    """The last output of a request, with what the loop knows beyond the engine's ``StepOutput``.

    num_cached_tokens: prompt tokens whose KV came from the prefix cache when the request was
    first scheduled (the ``usage.prompt_tokens_details.cached_tokens`` of the answer).
    """

    num_cached_tokens: int | None = None


@dataclass(frozen=True)
class LoopState:
    """What the server knows right now (a snapshot; plain numbers).

    num_waiting: admitted requests not yet running (in the command queue or the scheduler's queue).
    num_running: requests holding KV blocks. kv_blocks_total / kv_blocks_used: the pool.
    waiting_blocks / running_blocks: blocks the waiting / running requests may need at their
    longest (prompt + max_tokens), the promise admission control keeps.
    """

    num_waiting: int
    num_running: int
    kv_blocks_total: int
    kv_blocks_used: int
    waiting_blocks: int
    running_blocks: int
    block_size: int
    max_model_len: int
    num_preemptions: int
    num_prompt_tokens: int
    num_prefix_cached_tokens: int

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


@dataclass
class _Submit:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    on_output: OutputCallback
    accepted: Future


@dataclass
class _Abort:
    request_id: str


@dataclass
class _Reset:
    done: Future


@dataclass
class _Snapshot:
    done: Future


@dataclass
class _Stop:
    pass


@dataclass
class _Counters:
    num_prompt_tokens: int = 0
    num_prefix_cached_tokens: int = 0
    num_preemptions: int = 0


class EngineLoop:
    """Owns an ``LLMEngine`` and runs it in a background thread (see the module docstring).

    engine_factory: ``() -> LLMEngine``; called once at start and again by ``reset()`` (a fresh
    engine, so a fresh prefix cache and pool, around the same model).
    on_finish: optional ``f(RequestTiming, finish_reason)`` called in the engine thread when a
    request ends (the server's Prometheus histograms). on_step: optional ``f(LoopState)`` after
    every step. monitor: the ``EngineMonitor`` the engine view subscribes to (a new one if None).
    """

    def __init__(self, engine_factory: Callable[[], LLMEngine], *, on_finish: Callable[[RequestTiming, str], None] | None = None,
                 on_step: Callable[[LoopState], None] | None = None, monitor: EngineMonitor | None = None) -> None:
        self._engine_factory = engine_factory
        self.engine = engine_factory()
        self.monitor = monitor or EngineMonitor()
        self._on_finish = on_finish
        self._on_step = on_step
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._callbacks: dict[str, OutputCallback] = {}
        self._timings: dict[str, RequestTiming] = {}
        self._lock = threading.Lock()  # guards _timings, which state() reads from other threads
        self._ids = itertools.count()
        self._counters = _Counters()
        self._thread: threading.Thread | None = None
        self._failure: BaseException | None = None

    # ----- any thread ------------------------------------------------------------------------

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def start(self) -> EngineLoop:
        if self._thread is not None:
            raise RuntimeError("the engine loop is already running")
        self._thread = threading.Thread(target=self._run, name="engine-loop", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Abort everything in flight and end the thread."""
        if self._thread is None:
            return
        self._commands.put(_Stop())
        self._thread.join(timeout)
        self._thread = None

    @property
    def is_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def submit(self, prompt_token_ids: list[int], params: SamplingParams, on_output: OutputCallback,
               arrival_time: float | None = None, tag: str | None = None) -> Future:
        """Queue a request; returns a Future that resolves to its id once the engine took it.

        The Future raises ValueError when the engine refuses the request (it could never fit:
        longer than the context, or more KV blocks than the pool has). tag: a label the engine
        view shows beside the request's id (the router's id for it).
        """
        if not self.is_alive:
            raise RuntimeError("the engine loop is not running" + (f" (it failed: {self._failure!r})" if self._failure else ""))
        request_id = f"req-{next(self._ids)}"
        timing = RequestTiming(arrival_time or time.perf_counter(), len(prompt_token_ids), params.max_tokens, tag=tag)
        accepted: Future = Future()
        with self._lock:
            self._timings[request_id] = timing
        self._commands.put(_Submit(request_id, list(prompt_token_ids), params, on_output, accepted))
        return accepted

    def abort(self, request_id: str) -> None:
        """Cancel a request (no-op if it already finished); its blocks are freed in the engine thread."""
        self._commands.put(_Abort(request_id))

    def reset(self, timeout: float = 30.0) -> None:
        """Replace the engine by a fresh one (empty prefix cache, zeroed stats); needs an idle server."""
        done: Future = Future()
        self._commands.put(_Reset(done))
        done.result(timeout)

    def snapshot(self) -> Future:
        """A Future of ``{"frame", "history"}``: a frame of the engine now (``engine_view.snapshot``),
        built in the engine thread between two steps, and the monitor's last minute of history."""
        done: Future = Future()
        if not self.is_alive:
            done.set_exception(RuntimeError("the engine loop is not running"))
            return done
        self._commands.put(_Snapshot(done))
        return done

    def describe(self) -> dict:
        """The engine's configuration (block size, pool, budget, speculative decoding, device, ...)."""
        return describe_engine(self.engine)

    def state(self) -> LoopState:
        """A consistent snapshot of queues, blocks and counters (see ``LoopState``)."""
        allocator = self.engine.allocator
        with self._lock:
            waiting = [t for t in self._timings.values() if not t.running]
            running = [t for t in self._timings.values() if t.running]
            return LoopState(
                num_waiting=len(waiting),
                num_running=len(running),
                kv_blocks_total=allocator.num_blocks,
                kv_blocks_used=allocator.num_blocks - allocator.num_free_blocks,
                waiting_blocks=sum(self._blocks_for(t) for t in waiting),
                running_blocks=sum(self._blocks_for(t) for t in running),
                block_size=allocator.block_size,
                max_model_len=self.engine.max_model_len,
                num_preemptions=self._counters.num_preemptions,
                num_prompt_tokens=self._counters.num_prompt_tokens,
                num_prefix_cached_tokens=self._counters.num_prefix_cached_tokens,
            )

    def _blocks_for(self, timing: RequestTiming) -> int:
        longest = min(timing.num_prompt_tokens + timing.max_tokens, self.engine.max_model_len)
        return -(-longest // self.engine.allocator.block_size)

    # ----- the engine thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                # Idle: block until something arrives. Busy: take whatever is there and step.
                block = not self.engine.has_unfinished()
                if not self._drain_commands(block):
                    break
                if self.engine.has_unfinished():
                    self._step()
        except BaseException as error:  # noqa: BLE001 - reported to every waiting client below
            self._failure = error
            raise
        finally:
            self._abort_all()

    def _drain_commands(self, block: bool) -> bool:
        """Apply queued commands; False once asked to stop."""
        while True:
            try:
                command = self._commands.get(block=block, timeout=0.5 if block else None)
            except queue.Empty:
                if block and not self.engine.has_unfinished():
                    continue
                return True
            block = False
            if isinstance(command, _Stop):
                return False
            if isinstance(command, _Submit):
                self._add(command)
            elif isinstance(command, _Abort):
                if command.request_id in self._callbacks:
                    self.engine.abort(command.request_id)
            elif isinstance(command, _Reset):
                self._reset(command)
            elif isinstance(command, _Snapshot):
                self._snapshot(command)

    def _add(self, command: _Submit) -> None:
        try:
            self.engine.add_request(command.prompt_token_ids, command.params, request_id=command.request_id)
        except (ValueError, TypeError) as error:
            with self._lock:
                self._timings.pop(command.request_id, None)
            command.accepted.set_exception(error)
            return
        self._callbacks[command.request_id] = command.on_output
        self._counters.num_prompt_tokens += len(command.prompt_token_ids)
        command.accepted.set_result(command.request_id)

    def _reset(self, command: _Reset) -> None:
        if self._callbacks:
            command.done.set_exception(RuntimeError(f"cannot reset while {len(self._callbacks)} requests are in flight"))
            return
        self.engine = self._engine_factory()
        self._counters = _Counters()
        command.done.set_result(None)

    def _snapshot(self, command: _Snapshot) -> None:
        with self._lock:
            tags = {request_id: timing.tag for request_id, timing in self._timings.items() if timing.tag}
        try:
            frame = snapshot(self.engine, tags=tags, ran=False)
        except Exception as error:  # noqa: BLE001 - a frame is for viewing: never let it stop the engine
            command.done.set_exception(error)
            return
        command.done.set_result({"frame": frame, "history": self.monitor.history()})

    def _step(self) -> None:
        stats = self.engine.stats
        before = (stats.num_preemptions, stats.num_prefix_cached_tokens, stats.num_steps)
        start = time.perf_counter()
        outputs = self.engine.step()
        now = time.perf_counter()
        stats = self.engine.stats
        self._counters.num_preemptions += stats.num_preemptions - before[0]
        self._counters.num_prefix_cached_tokens += stats.num_prefix_cached_tokens - before[1]
        ran = stats.num_steps != before[2]
        plan = getattr(self.engine, "last_plan", None) if ran else None
        running_ids = {request.request_id for request in getattr(self.engine.scheduler, "running", [])}
        with self._lock:
            for request_id, timing in self._timings.items():
                timing.running = request_id in running_ids or timing.first_token_time is not None
            if plan is not None:
                for chunk in plan.chunks:  # the step that first scheduled a request knows its prefix-cache hits
                    timing = self._timings.get(chunk.request.request_id)
                    if timing is not None and timing.num_cached_tokens is None:
                        timing.num_cached_tokens = chunk.request.num_cached_tokens
        events = self._preemption_events(plan)
        for output in outputs:
            finished = self._deliver(output, now)
            if finished is not None:
                events.append(finished)
        self._publish(events, start, now, ran)
        if self._on_step is not None:
            self._on_step(self.state())

    def _preemption_events(self, plan) -> list[dict]:
        if plan is None or not plan.preempted:
            return []
        wall = round(time.time(), 3)
        with self._lock:
            tags = {r.request_id: getattr(self._timings.get(r.request_id), "tag", None) for r in plan.preempted}
        return [{"kind": "preempt", "time": wall, "step": self.engine.stats.num_steps, "id": str(r.request_id),
                 "tag": tags[r.request_id], "tokens": r.num_tokens} for r in plan.preempted]

    def _publish(self, events: list[dict], start: float, now: float, ran: bool) -> None:
        """Hand the step's events, and a frame when a viewer wants one, to the engine view."""
        monitor = self.monitor
        frame = None
        if monitor.wants_frame(now, going_idle=not self.engine.has_unfinished()):
            with self._lock:
                tags = {request_id: timing.tag for request_id, timing in self._timings.items() if timing.tag}
            try:
                frame = monitor.timed_snapshot(lambda: snapshot(self.engine, tags=tags, step_s=now - start, ran=ran))
            except Exception:  # noqa: BLE001 - a student's scheduler may lack what a frame reads: skip the frame
                frame = None
        scheduler, allocator = self.engine.scheduler, self.engine.allocator
        monitor.publish(events, frame, now=now, num_waiting=len(getattr(scheduler, "waiting", ())),
                        num_running=len(getattr(scheduler, "running", ())),
                        kv_blocks_used=allocator.num_blocks - allocator.num_free_blocks)

    def _deliver(self, output: StepOutput, now: float) -> dict | None:
        """Hand one output to its client; returns the engine view's "finish" event when it ended."""
        callback = self._callbacks.get(output.request_id)
        with self._lock:
            timing = self._timings.get(output.request_id)
            if timing is not None and output.new_token_ids:
                if timing.first_token_time is None:
                    timing.first_token_time = now
                timing.num_output_tokens += len(output.new_token_ids)
            if output.finished:
                self._timings.pop(output.request_id, None)
        event = None
        if output.finished:
            self._callbacks.pop(output.request_id, None)
            if timing is not None:
                timing.finish_time = now
                if self._on_finish is not None:
                    self._on_finish(timing, output.finish_reason or "abort")
                event = _finish_event(output, timing)
                output = LoopOutput(**output.__dict__, num_cached_tokens=timing.num_cached_tokens)
        if callback is not None:
            callback(output)
        return event

    def _abort_all(self) -> None:
        """The loop is ending: tell every client its request is over."""
        for request_id, callback in list(self._callbacks.items()):
            callback(StepOutput(request_id, [], "", True, "abort"))
        self._callbacks.clear()
        with self._lock:
            self._timings.clear()


def _finish_event(output: StepOutput, timing: RequestTiming) -> dict:
    """The engine view's record of a finished request: its server-side TTFT, TPOT and end-to-end time."""
    ttft = tpot = None
    if timing.first_token_time is not None:
        ttft = round(timing.first_token_time - timing.arrival_time, 4)
        if timing.num_output_tokens >= 2:
            tpot = round((timing.finish_time - timing.first_token_time) / (timing.num_output_tokens - 1), 5)
    return {"kind": "finish", "time": round(time.time(), 3), "id": str(output.request_id), "tag": timing.tag,
            "reason": output.finish_reason or "abort", "ttft": ttft, "tpot": tpot,
            "e2e": round(timing.finish_time - timing.arrival_time, 4), "tokens": timing.num_output_tokens,
            "prompt": timing.num_prompt_tokens, "cached": timing.num_cached_tokens}
