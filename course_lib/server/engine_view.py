"""The live engine view: what the engine did at each step, for browsers that watch it (``/engine``).

After every step the engine loop hands this module two things:

- **events** that must not be missed: a request preempted (its KV freed, to be recomputed), a
  request finished (with its TTFT and TPOT). Each viewer gets every event, in order, from a
  bounded queue of its own;
- a **frame**: a snapshot of the engine right after the step, as plain data (``snapshot``): the
  running and waiting requests with their progress (which chunk of which request ran: a prefill
  chunk, a decode), the tokens scheduled against the budget, and the KV block pool, block by block
  (free, held by which request, registered in the prefix cache, shared with a reference count).
  A newer frame replaces an older one, so a viewer that reads slowly gets the latest state and
  skips the rest (``Subscription.frames`` keeps the last few; older ones are dropped).

Nothing here can slow the engine down beyond building the frame: publishing never blocks (bounded
deques drop the oldest entry), a frame is built only while someone watches, and at most
``max_frames_per_s`` times a second (a frame every step when steps are slower than that, as on a
CPU; the last step before the engine goes idle always gets one). ``benchmarks/engine_view.py``
measures the cost.

The monitor also keeps the last minute (``history_s``) of finished requests, preemptions and queue
lengths, so a viewer that connects mid-run draws its charts at once.

Frames read the course's ``Scheduler`` (``running``, ``waiting``, ``config``) and
``BlockAllocator`` (``block_table``, ``ref_counts``, its prefix-cache map) when they have them; a
part a student's scheduler or allocator does not expose is ``None`` in the frame, and the view
says so.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = ["EngineMonitor", "Subscription", "snapshot"]

MAX_LISTED_WAITING = 48
"""Waiting requests listed one by one in a frame; the rest are only counted (``num_waiting``)."""


class Subscription:
    """One viewer's queues. The engine thread appends; the viewer's coroutine pops.

    frames: the latest frames (at most ``max_frames``; appending past that drops the oldest).
    events: events not yet sent (at most ``max_events``; ``lost_events`` counts the dropped ones).
    notify: called from the engine thread when something new arrived and the viewer has not been
    told yet (the server's callback wakes the viewer's coroutine with ``call_soon_threadsafe``).
    """

    def __init__(self, notify: Callable[[], None], max_frames: int, max_events: int) -> None:
        self.frames: deque[dict] = deque(maxlen=max_frames)
        self.events: deque[dict] = deque(maxlen=max_events)
        self.notify = notify
        self.published_frames = 0
        self.lost_events = 0
        self._pending = False

    def take(self) -> tuple[dict | None, list[dict], int]:
        """(latest frame or None, events in order, frames skipped since the last take). Viewer side."""
        self._pending = False
        frames = []
        while self.frames:
            frames.append(self.frames.popleft())
        events = []
        while self.events:
            events.append(self.events.popleft())
        return (frames[-1] if frames else None), events, max(len(frames) - 1, 0)

    def _deliver(self, frame: dict | None, events: Sequence[dict]) -> None:
        if frame is not None:
            self.frames.append(frame)
            self.published_frames += 1
        for event in events:
            if len(self.events) == self.events.maxlen:
                self.lost_events += 1
            self.events.append(event)
        if not self._pending:
            self._pending = True
            self.notify()


class EngineMonitor:
    """Viewers of one engine: subscribe from any thread; publish from the engine thread only.

    max_frames: frames kept per viewer (older ones are dropped: a slow viewer skips frames).
    max_events: events kept per viewer before the oldest are dropped (and counted).
    max_frames_per_s: the most frames built per second (the engine steps faster on a GPU than any
    screen needs). history_s: how far back the charts' history reaches. sample_interval_s: how
    often the queue lengths are sampled for that history.
    """

    def __init__(self, *, max_frames: int = 4, max_events: int = 512, max_frames_per_s: float = 30.0,
                 history_s: float = 60.0, sample_interval_s: float = 0.25) -> None:
        for name, value in (("max_frames", max_frames), ("max_events", max_events)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        for name, value in (("max_frames_per_s", max_frames_per_s), ("history_s", history_s),
                            ("sample_interval_s", sample_interval_s)):
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        self.max_frames = max_frames
        self.max_events = max_events
        self.min_frame_interval_s = 1.0 / max_frames_per_s
        self.history_s = float(history_s)
        self.sample_interval_s = float(sample_interval_s)
        self._subscribers: tuple[Subscription, ...] = ()  # replaced, never mutated: the engine thread reads it freely
        self._lock = threading.Lock()
        self._last_frame_time = float("-inf")
        self._last_sample_time = float("-inf")
        self._finishes: deque[dict] = deque()
        self._preemptions: deque[dict] = deque()
        self._queue_samples: deque[list] = deque()
        self.frames_built = 0
        self.seconds_building = 0.0

    # ----- any thread ------------------------------------------------------------------------

    def subscribe(self, notify: Callable[[], None]) -> Subscription:
        subscription = Subscription(notify, self.max_frames, self.max_events)
        with self._lock:
            self._subscribers = (*self._subscribers, subscription)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscribers = tuple(s for s in self._subscribers if s is not subscription)

    @property
    def num_viewers(self) -> int:
        return len(self._subscribers)

    # ----- the engine thread -----------------------------------------------------------------

    def wants_frame(self, now: float, going_idle: bool) -> bool:
        """Whether to build a frame after this step: someone watches, and it is time (or the last step)."""
        return bool(self._subscribers) and (going_idle or now - self._last_frame_time >= self.min_frame_interval_s)

    def publish(self, events: Sequence[dict], frame: dict | None, *, now: float, num_waiting: int,
                num_running: int, kv_blocks_used: int) -> None:
        """Record this step's events (and frame, if one was built) and hand them to every viewer."""
        wall = time.time()
        for event in events:
            (self._finishes if event["kind"] == "finish" else self._preemptions).append(event)
        if now - self._last_sample_time >= self.sample_interval_s or frame is not None:
            self._last_sample_time = now
            self._queue_samples.append([round(wall, 3), num_waiting, num_running, kv_blocks_used])
        self._forget_before(wall - self.history_s)
        if frame is not None:
            self._last_frame_time = now
        if frame is None and not events:
            return
        for subscription in self._subscribers:
            subscription._deliver(frame, events)

    def timed_snapshot(self, build: Callable[[], dict]) -> dict:
        """``build()``, counting the engine-thread time it took (``seconds_building``)."""
        start = time.perf_counter()
        frame = build()
        self.seconds_building += time.perf_counter() - start
        self.frames_built += 1
        return frame

    def history(self) -> dict:
        """The last ``history_s`` seconds: finished requests, preemptions, queue samples [t, waiting, running, kv]."""
        self._forget_before(time.time() - self.history_s)
        return {"finishes": list(self._finishes), "preemptions": list(self._preemptions),
                "queue": list(self._queue_samples), "seconds": self.history_s}

    def _forget_before(self, oldest: float) -> None:
        for entries, time_of in ((self._finishes, _event_time), (self._preemptions, _event_time),
                                 (self._queue_samples, _sample_time)):
            while entries and time_of(entries[0]) < oldest:
                entries.popleft()


def _event_time(event: dict) -> float:
    return event["time"]


def _sample_time(sample: list) -> float:
    return sample[0]


# --------------------------------------------------------------------------------------------
# Frames
# --------------------------------------------------------------------------------------------


def snapshot(engine, *, tags: dict | None = None, step_s: float | None = None, ran: bool = True) -> dict:
    """The engine right now as plain data (JSON-ready). Call it in the engine's own thread.

    tags: request id -> a label the client sent (the router's request id), shown beside the id.
    step_s: how long the last ``step()`` took. ran: whether that step ran the model (False when
    it only reported aborts), so ``engine.last_plan`` belongs to it.

    Returns ``{"step", "time", "step_ms", "scheduled_tokens", "budget", "max_num_seqs",
    "running": [request...] | None, "waiting": [request...] | None, "num_waiting", "pool", "totals"}``;
    a request is ``{"id", "tag", "state", "prompt", "computed", "output", "max_tokens", "cached",
    "preemptions", "blocks", "chunk": [start, num_tokens, num_drafts] | None}`` and ``state`` is
    "prefill", "decode", "recompute" (a preempted request catching up past its prompt), "stalled"
    (running, given no tokens this step), "waiting" or "preempted"; ``cached`` counts prefix-cache
    hits over all of the request's admissions (``Request.num_cached_tokens``). ``pool`` is
    described in ``_pool``.
    """
    tags = tags or {}
    scheduler, allocator, stats = engine.scheduler, engine.allocator, engine.stats
    plan = getattr(engine, "last_plan", None) if ran else None
    chunks = {chunk.request.request_id: chunk for chunk in plan.chunks} if plan is not None else {}
    running = getattr(scheduler, "running", None)
    waiting = getattr(scheduler, "waiting", None)
    config = getattr(scheduler, "config", None)
    listed_running = list(running) if running is not None else None
    frame = {
        "step": stats.num_steps,
        "time": round(time.time(), 3),
        "step_ms": None if step_s is None else round(step_s * 1000, 2),
        "scheduled_tokens": plan.num_batched_tokens if plan is not None else 0,
        "budget": getattr(config, "max_num_batched_tokens", None),
        "max_num_seqs": getattr(config, "max_num_seqs", None),
        "running": None if listed_running is None else [
            _request(r, chunks.get(r.request_id), tags, allocator) for r in listed_running],
        "waiting": None if waiting is None else [
            _request(r, None, tags, None) for r in list(waiting)[:MAX_LISTED_WAITING]],
        "num_waiting": None if waiting is None else len(waiting),
        "pool": _pool(allocator, listed_running or []),
        "totals": {"preemptions": stats.num_preemptions, "prefix_cached_tokens": stats.num_prefix_cached_tokens,
                   "generated_tokens": stats.num_generated_tokens, "batched_tokens": stats.num_batched_tokens,
                   "drafted_tokens": stats.num_drafted_tokens, "accepted_tokens": stats.num_accepted_tokens},
    }
    return frame


def _request(request, chunk, tags: dict, allocator) -> dict:
    status = getattr(request.status, "value", str(request.status))
    if chunk is not None:
        drafts = len(chunk.draft_token_ids)
        if chunk.start < request.num_prompt_tokens:
            state = "prefill"
        else:
            state = "decode" if chunk.num_tokens - drafts <= 1 else "recompute"
        ran = [chunk.start, chunk.num_tokens, drafts]
    else:
        state = {"running": "stalled", "preempted": "preempted"}.get(status, "waiting")
        ran = None
    blocks = None
    if allocator is not None:
        try:
            blocks = len(allocator.block_table(request.request_id))
        except (KeyError, ValueError):
            blocks = 0
    return {"id": str(request.request_id), "tag": tags.get(request.request_id), "state": state,
            "prompt": request.num_prompt_tokens, "computed": request.num_computed_tokens,
            "output": request.num_output_tokens, "max_tokens": getattr(request.params, "max_tokens", None),
            "cached": request.num_cached_tokens, "preemptions": request.num_preemptions, "blocks": blocks,
            "chunk": ran}


def _pool(allocator, running: Iterable) -> dict:
    """The KV pool block by block.

    ``owner[b]``: the index in ``running`` of the (first) request whose block table holds block b,
    or -1 when no running request holds it. ``shared``: [block, reference count] for blocks held
    more than once (a prefix shared by several requests). ``cached``: blocks registered in the
    prefix cache (a free one still holds a prefix a later request can reuse until it is evicted),
    or None when the allocator does not say. ``free``: blocks a new allocation could take.
    """
    num_blocks = allocator.num_blocks
    owner = [-1] * num_blocks
    shared: dict[int, int] = {}
    ref_counts = getattr(allocator, "ref_counts", None)
    for index, request in enumerate(running):
        try:
            table = allocator.block_table(request.request_id)
        except (KeyError, ValueError):
            continue
        for block in table:
            if owner[block] < 0:
                owner[block] = index
            elif ref_counts is None:
                shared[block] = shared.get(block, 1) + 1
            if ref_counts is not None and ref_counts[block] > 1:
                shared[block] = ref_counts[block]
    block_of_hash = getattr(allocator, "_block_of_hash", None)  # the course's BlockAllocator: hash -> block
    cached = sorted(block_of_hash.values()) if isinstance(block_of_hash, dict) else None
    return {"num_blocks": num_blocks, "block_size": allocator.block_size, "free": allocator.num_free_blocks,
            "owner": owner, "shared": sorted([block, count] for block, count in shared.items()), "cached": cached}


def describe_engine(engine) -> dict[str, Any]:
    """What the engine runs, for the status panels (``GET /server_info``)."""
    config = getattr(engine.scheduler, "config", None)
    speculator = getattr(engine, "speculator", None)
    speculative = None
    if speculator is not None:
        speculative = {"method": speculator.config.method, "num_draft_tokens": speculator.config.num_draft_tokens}
    parameter = next(engine.model.parameters(), None)
    backend = engine.attention_backend
    return {
        "block_size": engine.allocator.block_size,
        "num_blocks": engine.allocator.num_blocks,
        "max_num_seqs": getattr(config, "max_num_seqs", None),
        "max_num_batched_tokens": getattr(config, "max_num_batched_tokens", None),
        "chunked_prefill": getattr(config, "enable_chunked_prefill", None),
        "prefix_caching": getattr(engine.allocator, "enable_prefix_caching", None),
        "max_model_len": engine.max_model_len,
        "attention_backend": backend if isinstance(backend, str) else type(backend).__name__,
        "speculative": speculative,
        "device": str(parameter.device) if parameter is not None else "cpu",
        "dtype": str(parameter.dtype).removeprefix("torch.") if parameter is not None else None,
        "scheduler": type(engine.scheduler).__name__,
        "allocator": type(engine.allocator).__name__,
    }
