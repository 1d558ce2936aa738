"""Prefill and decode in separate worker processes, KV blocks shipped between them.

Colocated, one engine runs every request's prefill *and* its decode steps, in the same batches:
a long prompt's prefill stretches the step in which everybody else was waiting for one token.
Disaggregated (Splitwise, DistServe), two engines split the work:

```
            prompt                       (request id, prompt, first token, KV payload)
 server ───────────────> prefill worker ───────────── shared memory ─────────────> decode worker
   ^                          │ first token                                             │ tokens 2..n
   └──────────────────────────┴─────────────────────── results queue <──────────────────┘
```

- the **prefill worker** runs each prompt with ``max_tokens=1``; when the request finishes, and
  *before* its blocks go back to the pool, ``pack_kv`` gathers its KV into one tensor;
- the payload goes to the **decode worker** through a ``torch.multiprocessing`` queue, which moves
  tensors into shared memory (only a handle crosses the pipe);
- the decode worker queues the request as prompt + first token; when its scheduler gives it
  blocks, ``unpack_kv`` writes the payload into them and the allocator reports the prompt as
  already computed, so the very first step for this request is a decode step.

The server process only routes messages and turns token ids into text (one detokenizer per
request, so a character split across the two workers' tokens is still decoded right). Each
worker reports how long every transfer took (pack on one side, unpack on the other, and the trip
between), so the comparison with a colocated engine counts the cost of shipping KV.

The student's ``pack_kv`` / ``unpack_kv`` run inside the workers: their *source code* is sent to
the worker processes and executed there, the way a distributed framework ships a user's function
(``course_lib.server.shipping``: the imports and definitions of the cell that defines each
function travel, and so does what it reads from the notebook's other cells: helpers, imports,
values). Each worker tries its function once on its own pool before it says it is ready, so a
function that cannot run there (or an ``unpack_kv`` that writes into a copy of the pool) stops
``start`` at once with a ``ShippingError`` that says so. A worker that fails later
reports why and stops; the backend then ends every request in flight at once (no client waits
for a timeout), refuses new ones, and ``raise_if_failed()`` raises the worker's message.

The colocated baseline runs on the same workers' code: ``backend.mode = "colocated"`` sends whole
requests to the prefill worker's engine (prompt to last token, KV never leaves it), so one pair of
processes, loaded once, serves both sides of the comparison. ``DisaggregatedBackend(mode="colocated")``
without pack/unpack starts a single worker. Either way the backend serves HTTP through
``course_lib.server.app``.
"""

from __future__ import annotations

import collections
import itertools
import os
import queue
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from course_lib.engine import StepOutput
from course_lib.paged import BlockAllocator
from course_lib.sampling import SamplingParams
from course_lib.server.engine_loop import LoopState
from course_lib.server.shipping import ShippingError, function_source, guarded, load_function

__all__ = ["DisaggregatedBackend", "ShippingError", "WorkerFailed", "function_source", "start_disaggregated"]


class WorkerFailed(RuntimeError):
    """A worker process stopped: its own message says why (a ShippingError's, or the error it hit)."""


# ---------------------------------------------------------------------------------------------
# Allocators that move KV in and out at the right moment
# ---------------------------------------------------------------------------------------------


class _ExportingAllocator(BlockAllocator):
    """Packs a finished prefill's KV when its blocks are freed (the last moment it still exists)."""

    def __init__(self, *args, pack: Callable, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.pack = pack
        self.kv_cache = None
        self.num_tokens: dict = {}
        self.exported: dict = {}

    def free(self, seq_id) -> None:
        if seq_id in self.num_tokens:
            started = time.perf_counter()
            payload = self.pack(self.kv_cache.storage, self.block_table(seq_id), self.num_tokens.pop(seq_id))
            self.exported[seq_id] = (payload.contiguous(), time.perf_counter() - started)
        super().free(seq_id)


class _ImportingAllocator(BlockAllocator):
    """Writes a shipped payload into a request's new blocks and reports its prompt as computed."""

    def __init__(self, *args, unpack: Callable, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.unpack = unpack
        self.kv_cache = None
        self.pending: dict = {}
        self.unpack_seconds: dict = {}

    def allocate(self, seq_id, token_ids) -> int:
        cached = super().allocate(seq_id, token_ids)
        payload = self.pending.pop(seq_id, None)
        if payload is None:
            return cached  # a preempted request starts over: recompute, as usual
        if payload.dim() != 5 or payload.shape[2] != len(token_ids) - 1:
            self.free(seq_id)
            raise ValueError(f"the KV payload has shape {tuple(payload.shape)}; it should hold the "
                             f"{len(token_ids) - 1} prompt tokens: [layers, 2, {len(token_ids) - 1}, kv_heads, head_dim]")
        started = time.perf_counter()
        # unpack_kv writes in place; what it returns is not read (the engine only ever reads its own pool).
        self.unpack(payload, self.kv_cache.storage, self.block_table(seq_id))
        self.unpack_seconds[seq_id] = time.perf_counter() - started
        return payload.shape[2]


# ---------------------------------------------------------------------------------------------
# The worker process
# ---------------------------------------------------------------------------------------------


class _TokenIdsOnly:
    """What a worker's engine needs of a tokenizer when prompts arrive as token ids and text is made elsewhere."""

    def __init__(self, eos_token_id: int | None) -> None:
        self.eos_token_id = eos_token_id

    def decode_token_bytes(self, token_id: int) -> bytes:
        return b""


def _worker_model(name: str):
    """(model, tokenizer) of a worker: SmolLM2's weights without its tokenizer (the server detokenizes)."""
    if name == "tiny":
        from course_lib.server.models import tiny_random_model

        return tiny_random_model()
    from course_lib.model import load_model

    model = load_model()
    return model, _TokenIdsOnly(model.config.eos_token_id)


def _worker_engine(role: str, options: dict, functions: dict):
    """(engine, allocator) of a worker, its shipped function tried once on its own pool."""
    import torch

    from course_lib.engine import LLMEngine

    torch.set_num_threads(options.get("threads", 1))
    model, tokenizer = _worker_model(options.get("model", "smollm2"))
    engine_options = dict(block_size=options.get("block_size", 16), max_num_seqs=options.get("max_num_seqs", 8),
                          max_num_batched_tokens=options.get("max_num_batched_tokens", 512))
    num_blocks = options.get("num_blocks", 256)
    allocator = None
    where = f"the {role} worker"
    if role == "prefill":
        pack = guarded(load_function(*functions["pack"]), "pack_kv", where)
        allocator = _ExportingAllocator(num_blocks, engine_options["block_size"], pack=pack)
    elif role == "decode":
        unpack = guarded(load_function(*functions["unpack"]), "unpack_kv", where)
        allocator = _ImportingAllocator(num_blocks, engine_options["block_size"], unpack=unpack)
    engine = LLMEngine(model, tokenizer, allocator=allocator, num_blocks=None if allocator else num_blocks,
                       enable_prefix_caching=False, **engine_options)
    if allocator is not None:
        allocator.kv_cache = engine.kv_cache
        _try_shipped_function(role, allocator, engine.kv_cache.storage, engine_options["block_size"])
    with torch.inference_mode():  # warm up the forward once, so the first request is not charged for it
        model(torch.tensor([1, 2, 3]), logits_indices=torch.tensor([2]))
    return engine, allocator


def _try_shipped_function(role: str, allocator, storage, block_size: int) -> None:
    """Call the worker's pack_kv or unpack_kv once on two blocks of its pool, before any request depends on it.

    A function that cannot run in the worker (a name it uses is not defined there) or returns
    something the engine cannot use fails here, at start, with a message that says so.
    """
    import torch

    num_tokens = block_size + 1  # one full block and one token of the next, blocks out of order
    shape = (storage.shape[0], 2, num_tokens, storage.shape[4], storage.shape[5])
    if role == "prefill":
        payload = allocator.pack(storage, [1, 0], num_tokens)
        if not torch.is_tensor(payload) or tuple(payload.shape) != shape:
            got = tuple(payload.shape) if torch.is_tensor(payload) else type(payload).__name__
            raise ShippingError(f"your pack_kv returned {got} in the prefill worker for {num_tokens} tokens; the "
                                f"decode worker needs a tensor of shape {shape} [layers, 2, tokens, kv_heads, head_dim]")
    else:
        before = storage[:, :, :2].clone()
        result = allocator.unpack(torch.ones(shape, dtype=storage.dtype), storage, [1, 0])
        written = not torch.equal(storage[:, :, :2], before)
        storage[:, :, :2] = before  # the try leaves the pool as it found it
        if result is not None and not (torch.is_tensor(result) and result.shape == storage.shape):
            raise ShippingError(f"your unpack_kv returned {type(result).__name__} in the decode worker; it should "
                                f"return the storage tensor it wrote into")
        if not written:
            raise ShippingError("your unpack_kv left the decode worker's pool unchanged (it wrote into a copy?): the "
                                "engine reads only the storage tensor it passes in, so write into it in place")


def _worker_main(role: str, options: dict, inbox, peer, results, functions: dict) -> None:
    """One worker: 'prefill', 'decode' or 'colocated'. Messages in ``inbox`` (and ``peer``), out to ``results``.

    Whatever stops it is reported on ``results`` as ("failed", role, message) before it exits.
    """
    try:
        engine, allocator = _worker_engine(role, options, functions)
    except ShippingError as error:
        results.put(("failed", role, str(error)))
        return
    except Exception as error:  # noqa: BLE001 - reported to the server, which raises it where the user sees it
        results.put(("failed", role, f"the {role} worker could not start: {type(error).__name__}: {error}"))
        return
    results.put(("ready", role))
    try:
        _serve(role, engine, allocator, inbox, peer, results)
    except ShippingError as error:
        results.put(("failed", role, str(error)))
    except Exception as error:  # noqa: BLE001 - as above
        where = "".join(traceback.format_exception(type(error), error, error.__traceback__)[-3:]).strip()
        results.put(("failed", role, f"the {role} worker stopped: {type(error).__name__}: {error}\n{where}"))


def _serve(role: str, engine, allocator, inbox, peer, results) -> None:
    """The worker's loop: take messages, step the engine, send tokens (and KV, from the prefill worker)."""
    real: dict = {}  # request id -> (prompt ids, params) for the prefill worker
    whole: set = set()  # requests this worker runs from prompt to last token (colocated mode)

    def take(message) -> bool:
        kind = message[0]
        if kind == "stop":
            return False
        if kind == "abort":
            engine.abort(message[1])
        elif kind == "generate_whole":  # the colocated baseline, run by the prefill worker's engine
            _, request_id, prompt_ids, params = message
            whole.add(request_id)
            engine.add_request(prompt_ids, params, request_id=request_id)
        elif kind == "generate":  # colocated, or the prefill half
            _, request_id, prompt_ids, params = message
            if role == "prefill":
                real[request_id] = (prompt_ids, params)
                allocator.num_tokens[request_id] = len(prompt_ids)
                params = SamplingParams(**{**params.__dict__, "max_tokens": 1, "stop": ()})
            engine.add_request(prompt_ids, params, request_id=request_id)
        elif kind == "kv":  # the decode half
            _, request_id, prompt_ids, first_token, params, payload, pack_seconds, sent_at = message
            received = time.perf_counter()
            allocator.pending[request_id] = payload
            rest = SamplingParams(**{**params.__dict__, "max_tokens": params.max_tokens - 1, "stop": ()})
            engine.add_request(prompt_ids + [first_token], rest, request_id=request_id)
            results.put(("transfer", request_id, int(payload.numel() * payload.element_size()), pack_seconds,
                         received - sent_at))
        return True

    parent = os.getppid()
    running = True
    while running:
        if os.getppid() != parent:
            break  # whoever started us is gone: never outlive it
        sources = [inbox] + ([peer] if role == "decode" else [])
        idle = not engine.has_unfinished()
        for source in sources:
            while True:
                try:
                    message = source.get(timeout=0.02 if idle else None) if idle else source.get_nowait()
                except queue.Empty:
                    break
                running = take(message) and running
                idle = False
        if not running:
            break
        if not engine.has_unfinished():
            continue
        tokens_before, started = engine.stats.num_batched_tokens, time.perf_counter()
        outputs = engine.step()
        now = time.perf_counter()
        results.put(("step", role, engine.stats.num_batched_tokens - tokens_before, now - started))
        for output in outputs:
            request_id = output.request_id
            if role == "decode" and request_id in allocator.unpack_seconds:
                results.put(("unpacked", request_id, allocator.unpack_seconds.pop(request_id)))
            if role != "prefill" or request_id in whole:
                results.put(("token", request_id, output.new_token_ids, output.finished, output.finish_reason, now))
                if output.finished:
                    whole.discard(request_id)
                continue
            prompt_ids, params = real.pop(request_id) if output.finished else real[request_id]
            payload, pack_seconds = allocator.exported.pop(request_id, (None, 0.0))
            eos = output.finish_reason == "stop"
            done = eos or params.max_tokens == 1 or output.finish_reason == "abort"
            reason = output.finish_reason if done else None
            if params.max_tokens == 1 and not eos:
                reason = "length"
            results.put(("token", request_id, output.new_token_ids, done, reason, now))
            if not done and payload is not None:
                peer.put(("kv", request_id, prompt_ids, output.new_token_ids[0], params, payload, pack_seconds,
                          time.perf_counter()))


# ---------------------------------------------------------------------------------------------
# The backend the HTTP app talks to
# ---------------------------------------------------------------------------------------------


@dataclass
class _Live:
    params: SamplingParams
    on_output: Callable
    detokenizer: object
    num_prompt_tokens: int
    arrival_time: float
    first_token_time: float | None = None
    num_output_tokens: int = 0


class DisaggregatedBackend:
    """Worker processes behind the interface of ``EngineLoop`` (submit, abort, state, ...).

    mode: where requests go first, "disaggregated" (prefill worker, then decode worker) or
    "colocated" (one engine does both; see ``mode``). pack_kv / unpack_kv: the functions the
    workers use to move KV (shipped as source); with them there are two workers, without them one.
    model: "smollm2" or "tiny". threads: torch threads per worker. Engine options per worker:
    num_blocks, block_size, max_num_seqs, max_num_batched_tokens.
    """

    def __init__(self, *, mode: str = "disaggregated", pack_kv: Callable | None = None, unpack_kv: Callable | None = None,
                 model: str = "smollm2", threads: int | None = None, on_finish: Callable | None = None,
                 **engine_options) -> None:
        import torch.multiprocessing as torch_mp

        from course_lib.detokenizer import IncrementalDetokenizer
        from course_lib.server.models import MODEL_NAMES

        if mode not in ("disaggregated", "colocated"):
            raise ValueError(f"mode must be 'disaggregated' or 'colocated', got {mode!r}")
        if mode == "disaggregated" and (pack_kv is None or unpack_kv is None):
            raise ValueError("disaggregated mode needs pack_kv and unpack_kv (yours, from chapter 5)")
        self._mode = mode
        self.model_name = MODEL_NAMES[model]
        self._detokenizer_type = IncrementalDetokenizer
        self._on_finish = on_finish
        context = torch_mp.get_context("spawn")
        self._results = context.Queue()
        self._peer = context.Queue()
        functions = {}
        if pack_kv is not None and unpack_kv is not None:
            functions = {"pack": function_source(pack_kv), "unpack": function_source(unpack_kv)}
        roles = ["prefill", "decode"] if functions else ["colocated"]
        threads = threads or 1
        options = {"model": model, "threads": threads, **engine_options}
        self._inboxes = {role: context.Queue() for role in roles}
        self._workers = [context.Process(target=_worker_main, name=f"{role}-worker", daemon=True,
                                         args=(role, options, self._inboxes[role], self._peer, self._results, functions))
                         for role in roles]
        self._engine_options = engine_options
        self._live: dict[str, _Live] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._reader: threading.Thread | None = None
        self._stopping = False
        self.transfers: list[dict] = []
        """One dict per shipped request: bytes, pack_s, trip_s (queue to the decode worker), unpack_s."""
        self.steps: collections.deque = collections.deque(maxlen=100_000)
        """One dict per engine step of either worker, in order: worker ("prefill" or "decode"; in
        colocated mode the prefill worker's engine runs whole requests), tokens (prompt and decode
        tokens the step computed), seconds (how long it took)."""
        self.tokenizer = None
        self.max_model_len = None
        self.failure: str | None = None
        """Why a worker stopped (its own message), or None while both are well."""

    @property
    def mode(self) -> str:
        """"disaggregated" or "colocated": where the next requests go (switch only while idle)."""
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        if mode not in ("disaggregated", "colocated"):
            raise ValueError(f"mode must be 'disaggregated' or 'colocated', got {mode!r}")
        if mode == "disaggregated" and "decode" not in self._inboxes:
            raise ValueError("this backend has no decode worker: build it with pack_kv and unpack_kv")
        with self._lock:
            if self._live:
                raise RuntimeError(f"cannot switch modes with {len(self._live)} requests in flight")
            self._mode = mode

    # ----- life cycle --------------------------------------------------------------------------

    def start(self, timeout: float = 240.0) -> DisaggregatedBackend:
        for worker in self._workers:
            worker.start()
        model_key = "tiny" if self.model_name.startswith("tiny") else "smollm2"
        if model_key == "tiny":
            from course_lib.server.models import tiny_random_model

            model, self.tokenizer = tiny_random_model()
        else:
            from course_lib.tokenizer import BPETokenizer

            self.tokenizer, model = BPETokenizer.from_gguf(), None
        if model is None:
            from course_lib.model import ModelConfig

            self.max_model_len = ModelConfig.from_gguf().max_position_embeddings
        else:
            self.max_model_len = model.config.max_position_embeddings
        ready = 0
        deadline = time.monotonic() + timeout
        while ready < len(self._workers):
            try:
                message = self._results.get(timeout=1.0)
            except queue.Empty:
                dead = [f"{w.name} (exit code {w.exitcode})" for w in self._workers if not w.is_alive()]
                if time.monotonic() > deadline or dead:
                    self.stop()
                    why = f"{', '.join(dead)} died" if dead else f"took more than {timeout:.0f} s"
                    raise WorkerFailed(f"a worker process did not start: {why}") from None
                continue
            if message[0] == "failed":
                self.stop()
                raise WorkerFailed(message[2])
            ready += message[0] == "ready"
        self._reader = threading.Thread(target=self._read_results, name="worker-results", daemon=True)
        self._reader.start()
        return self

    def stop(self) -> None:
        self._stopping = True
        for inbox in self._inboxes.values():
            inbox.put(("stop",))
        for worker in self._workers:
            worker.join(10)
            if worker.is_alive():
                worker.terminate()
                worker.join(5)
        self._results.put(("closed",))
        if self._reader is not None:
            self._reader.join(5)
        with self._lock:
            lives, self._live = self._live, {}
        for request_id, live in lives.items():
            live.on_output(StepOutput(request_id, [], "", True, "abort"))

    @property
    def is_alive(self) -> bool:
        return not self._stopping and self.failure is None and all(worker.is_alive() for worker in self._workers)

    def raise_if_failed(self) -> None:
        """Raise ``WorkerFailed`` with the worker's own message if a worker has stopped."""
        if self.failure is not None:
            raise WorkerFailed(self.failure)

    def _fail(self, message: str) -> None:
        """A worker stopped: remember why, and end every request in flight now (nobody waits for a timeout)."""
        if self.failure is None:
            self.failure = message
        with self._lock:
            lives, self._live = self._live, {}
        for request_id, live in lives.items():
            live.on_output(StepOutput(request_id, [], "", True, "abort"))

    def reset(self) -> None:
        raise RuntimeError("the disaggregated backend has no prefix cache to reset")

    # ----- requests ----------------------------------------------------------------------------

    def submit(self, prompt_token_ids: list[int], params: SamplingParams, on_output: Callable,
               arrival_time: float | None = None) -> Future:
        accepted: Future = Future()
        if self.failure is not None:
            accepted.set_exception(WorkerFailed(self.failure))
            return accepted
        if len(prompt_token_ids) >= self.max_model_len:
            accepted.set_exception(ValueError(f"prompt has {len(prompt_token_ids)} tokens; the context is {self.max_model_len}"))
            return accepted
        request_id = f"req-{next(self._ids)}"
        live = _Live(params, on_output, self._detokenizer_type(self.tokenizer.decode_token_bytes, params.stop),
                     len(prompt_token_ids), arrival_time or time.perf_counter())
        with self._lock:
            self._live[request_id] = live
        if "colocated" in self._inboxes:
            self._inboxes["colocated"].put(("generate", request_id, list(prompt_token_ids), params))
        elif self._mode == "colocated":
            self._inboxes["prefill"].put(("generate_whole", request_id, list(prompt_token_ids), params))
        else:
            self._inboxes["prefill"].put(("generate", request_id, list(prompt_token_ids), params))
        accepted.set_result(request_id)
        return accepted

    def abort(self, request_id: str) -> None:
        for inbox in self._inboxes.values():
            inbox.put(("abort", request_id))

    def state(self) -> LoopState:
        with self._lock:
            waiting = sum(1 for live in self._live.values() if live.first_token_time is None)
            running = len(self._live) - waiting
        return LoopState(num_waiting=waiting, num_running=running, kv_blocks_total=0, kv_blocks_used=0,
                         waiting_blocks=0, running_blocks=0, block_size=self._engine_options.get("block_size", 16),
                         max_model_len=self.max_model_len or 0, num_preemptions=0, num_prompt_tokens=0,
                         num_prefix_cached_tokens=0)

    def _read_results(self) -> None:
        transfers: dict[str, dict] = {}
        while True:
            try:
                message = self._results.get(timeout=0.5)
            except queue.Empty:
                dead = [w for w in self._workers if not w.is_alive()]
                if dead and not self._stopping:
                    self._fail(f"the {dead[0].name} process died (exit code {dead[0].exitcode}) without saying why")
                continue
            kind = message[0]
            if kind == "closed":
                return
            if kind == "failed":
                self._fail(message[2])
            if kind == "step":
                self.steps.append({"worker": message[1], "tokens": message[2], "seconds": message[3]})
            elif kind == "transfer":
                _, request_id, num_bytes, pack_seconds, trip_seconds = message
                transfers[request_id] = {"bytes": num_bytes, "pack_s": pack_seconds, "trip_s": trip_seconds}
            elif kind == "unpacked":
                _, request_id, unpack_seconds = message
                entry = transfers.pop(request_id, None)
                if entry is not None:
                    self.transfers.append({**entry, "unpack_s": unpack_seconds})
            elif kind == "token":
                self._deliver(*message[1:])

    def _deliver(self, request_id: str, token_ids: list[int], finished: bool, reason: str | None, now: float) -> None:
        with self._lock:
            live = self._live.get(request_id)
        if live is None:
            return
        text = ""
        for token_id in token_ids:
            if token_id == self.tokenizer.eos_token_id and not live.params.ignore_eos:
                continue
            text += live.detokenizer.add_token(token_id)
        if live.detokenizer.stopped and not finished:
            self.abort(request_id)  # a stop string: the workers need not go on
            finished, reason = True, "stop"
        if token_ids and live.first_token_time is None:
            live.first_token_time = now
        live.num_output_tokens += len(token_ids)
        if finished:
            text += live.detokenizer.flush()
            with self._lock:
                self._live.pop(request_id, None)
            if self._on_finish is not None:
                from course_lib.server.engine_loop import RequestTiming

                timing = RequestTiming(live.arrival_time, live.num_prompt_tokens, live.params.max_tokens,
                                       live.first_token_time, now, live.num_output_tokens, True)
                self._on_finish(timing, reason or "stop")
        live.on_output(StepOutput(request_id, list(token_ids), text, finished, reason if finished else None))


def start_disaggregated(*, mode: str = "disaggregated", pack_kv: Callable | None = None, unpack_kv: Callable | None = None,
                        model: str = "smollm2", port: int | None = None, **options):
    """An HTTP server (in this process) over a ``DisaggregatedBackend``; returns the running ``ServerThread``."""
    from course_lib.server.app import build_app
    from course_lib.server.launch import ServerThread
    from course_lib.server.metrics import ServerMetrics

    holder: dict = {}
    backend = DisaggregatedBackend(mode=mode, pack_kv=pack_kv, unpack_kv=unpack_kv, model=model,
                                   on_finish=lambda timing, reason: holder["metrics"].observe_finished(timing, reason),
                                   **options)
    holder["metrics"] = ServerMetrics(backend.state)
    backend.start()
    try:
        app = build_app(backend, model_name=backend.model_name, metrics=holder["metrics"])
        return ServerThread(app, backend=backend, port=port).start()
    except BaseException:
        backend.stop()
        raise
