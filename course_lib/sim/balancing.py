"""Routing policies compared on a cluster of replicas in simulated time (Lab 0.5 chapter 6).

Each replica is the course's own scheduler and block allocator (``course_lib.scheduler``,
``course_lib.paged``): continuous batching with a token budget, chunked prefill, preemption by
recompute when the KV pool runs out, and a prefix cache with LRU eviction; what ``course serve``
runs, minus the model. A step takes the time ``StepCost`` gives it, a GPU's shape of cost: a fixed
part (reading the weights once), a part per prefill token (compute) and a part per running
sequence (reading its KV). Nothing runs on this machine's clock, so a run gives the same numbers
every time, busy laptop or not, and hundreds of requests on four replicas take seconds.

The router sees what the real router (``course_lib.server.router``) sees: the requests each
replica has in flight, and every ``scrape_interval_ms`` each replica's load, the dict that
``kv_load`` reads from ``/metrics`` (blocks used and free, requests waiting and running,
preemptions). A policy is either a load-blind one, ``choose(prompt_token_ids, outstanding)``
(``RoundRobin``, ``LeastOutstanding``, a ``PrefixAwareRouter``), or a balancer with
``report(replica, load)`` and ``choose(prompt_token_ids, max_tokens, home)`` (a ``KVAwareRouter``),
given ``home(prompt_token_ids, outstanding)`` for affinity.

``mixed_workload`` builds the kind of traffic where the two differ: many short chat requests
behind a handful of shared system prompts, and a few long documents, each with a prompt of its own.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from course_lib.metrics import percentile
from course_lib.paged import BlockAllocator
from course_lib.sampling import SamplingParams
from course_lib.scheduler import Request, Scheduler, SchedulerConfig

__all__ = ["ReplicaConfig", "SimRequest", "SimResult", "StepCost", "mixed_workload", "simulate"]


@dataclass(frozen=True)
class StepCost:
    """How long one engine step takes, in ms: fixed + per prefill token + per decoding sequence.

    The defaults are a mid-size model on one GPU: ~10 ms to read the weights, 0.05 ms of compute
    per prompt token, 0.2 ms per running sequence for its KV. Decoding a batch of 8 costs little
    more than decoding 1; what limits the batch is how many sequences' KV fit in the pool.
    """

    fixed_ms: float = 10.0
    prefill_token_ms: float = 0.05
    decode_ms: float = 0.2

    def step_ms(self, prefill_tokens: int, decodes: int) -> float:
        return self.fixed_ms + self.prefill_token_ms * prefill_tokens + self.decode_ms * decodes


@dataclass(frozen=True)
class ReplicaConfig:
    """One replica's engine: KV pool (blocks of block_size tokens), batch limits, context length."""

    num_blocks: int = 1024
    block_size: int = 16
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    max_model_len: int = 16384


@dataclass(frozen=True)
class SimRequest:
    """One request: when it arrives (ms), its prompt (token ids), how many tokens it generates, a label."""

    arrival_ms: float
    prompt_token_ids: tuple[int, ...]
    max_tokens: int
    kind: str = ""


@dataclass
class _Trace:
    replica: int
    arrival_ms: float
    kind: str
    first_token_ms: float | None = None
    finish_ms: float | None = None


@dataclass
class SimResult:
    """What one simulated run measured.

    ttft_ms[i] / e2e_ms[i]: request i's time to first token and end to end (ms), in workload order;
    kinds[i] its label and replicas[i] where it went. preemptions[r], prompt_tokens and
    cached_prompt_tokens (prefix-cache hits) per replica. timeline: (ms, replica, blocks used,
    requests waiting) at every scrape.
    """

    ttft_ms: list[float]
    e2e_ms: list[float]
    kinds: list[str]
    replicas: list[int]
    preemptions: list[int]
    prompt_tokens: list[int]
    cached_prompt_tokens: list[int]
    num_blocks: int
    timeline: list[tuple[float, int, int, int]] = field(default_factory=list)

    def summary(self, kind: str | None = None) -> dict:
        """TTFT p50/p90/p99 (ms), preemptions, prefix-cache hit rate, requests per replica; ``kind`` filters TTFT."""
        ttft = [t for t, k in zip(self.ttft_ms, self.kinds) if kind is None or k == kind]
        return {"ttft_p50_ms": percentile(ttft, 50), "ttft_p90_ms": percentile(ttft, 90),
                "ttft_p99_ms": percentile(ttft, 99), "preemptions": sum(self.preemptions),
                "hit_rate": sum(self.cached_prompt_tokens) / max(1, sum(self.prompt_tokens)),
                "per_replica": [self.replicas.count(r) for r in range(len(self.preemptions))]}


class _Replica:
    """One engine without a model: the course's scheduler and allocator, stepped on a simulated clock."""

    def __init__(self, config: ReplicaConfig, cost: StepCost) -> None:
        self.allocator = BlockAllocator(config.num_blocks, config.block_size, enable_prefix_caching=True)
        self.scheduler = Scheduler(SchedulerConfig(max_num_seqs=config.max_num_seqs,
                                                   max_num_batched_tokens=config.max_num_batched_tokens,
                                                   max_model_len=config.max_model_len), self.allocator)
        self.cost = cost
        self.plan = None
        self.busy_until: float | None = None
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0

    def load(self) -> dict:
        """What this replica's /metrics says now, as ``kv_load`` reads it."""
        free = self.allocator.num_free_blocks
        return {"blocks_used": self.allocator.num_blocks - free, "blocks_free": free,
                "num_waiting": len(self.scheduler.waiting), "num_running": len(self.scheduler.running),
                "preemptions": self.scheduler.num_preemptions}

    def start_step(self, now: float) -> None:
        self.plan = self.scheduler.schedule()
        self.cached_prompt_tokens += self.plan.num_cached_tokens
        prefill = sum(chunk.num_tokens for chunk in self.plan.chunks if chunk.num_tokens > 1 or not chunk.samples)
        decodes = sum(1 for chunk in self.plan.chunks if chunk.num_tokens == 1 and chunk.samples)
        self.busy_until = now + self.cost.step_ms(prefill, decodes)

    def finish_step(self) -> tuple[list[Request], list[Request]]:
        """(requests that got a token this step, requests that finished)."""
        sampled = [chunk.request for chunk in self.plan.chunks if chunk.samples]
        finished = self.scheduler.update(self.plan, [0] * len(sampled))
        self.plan, self.busy_until = None, None
        return sampled, finished


def _route(policy, home: Callable | None, request: SimRequest, outstanding: list[int]) -> int:
    prompt = list(request.prompt_token_ids)
    if hasattr(policy, "report"):
        preferred = None if home is None else home(prompt, list(outstanding))
        return policy.choose(prompt, request.max_tokens, preferred)
    return policy.choose(prompt, list(outstanding))


def simulate(requests: Sequence[SimRequest], policy, *, num_replicas: int = 4, home: Callable | None = None,
             replica: ReplicaConfig = ReplicaConfig(), cost: StepCost = StepCost(),
             scrape_interval_ms: float = 50.0) -> SimResult:
    """Run ``requests`` through ``num_replicas`` simulated replicas, each routed as ``policy`` chooses.

    policy: ``choose(prompt_token_ids, outstanding)``, or a balancer with ``report(replica, load)``
    and ``choose(prompt_token_ids, max_tokens, home)`` (then ``home(prompt_token_ids, outstanding)``
    gives each request's home, or None). Loads are reported at 0 ms and every ``scrape_interval_ms``.
    Returns a ``SimResult``; a policy that returns something other than a replica index raises ValueError.
    """
    if not scrape_interval_ms > 0:
        raise ValueError(f"scrape_interval_ms must be > 0, got {scrape_interval_ms!r}")
    ordered = sorted(range(len(requests)), key=lambda index: requests[index].arrival_ms)
    replicas = [_Replica(replica, cost) for _ in range(num_replicas)]
    reports = hasattr(policy, "report")
    traces: list[_Trace | None] = [None] * len(requests)
    outstanding = [0] * num_replicas
    timeline: list[tuple[float, int, int, int]] = []
    next_arrival, next_scrape, done = 0, 0.0, 0
    while done < len(requests):
        busy = [r.busy_until for r in replicas if r.busy_until is not None]
        arrival = requests[ordered[next_arrival]].arrival_ms if next_arrival < len(ordered) else math.inf
        now = min([arrival, next_scrape, *busy])
        for index, server in enumerate(replicas):  # steps that end now: their tokens, their finished requests
            if server.busy_until is not None and server.busy_until <= now:
                sampled, finished = server.finish_step()
                for request in sampled:
                    trace = traces[request.request_id]
                    if trace.first_token_ms is None:
                        trace.first_token_ms = now
                for request in finished:
                    traces[request.request_id].finish_ms = now
                    outstanding[index] -= 1
                    done += 1
        if next_scrape <= now:
            for index, server in enumerate(replicas):
                load = server.load()
                timeline.append((now, index, load["blocks_used"], load["num_waiting"]))
                if reports:
                    policy.report(index, load)
            next_scrape = now + scrape_interval_ms
        while next_arrival < len(ordered) and requests[ordered[next_arrival]].arrival_ms <= now:
            position = ordered[next_arrival]
            request = requests[position]
            chosen = _route(policy, home, request, outstanding)
            if not isinstance(chosen, int) or isinstance(chosen, bool) or not 0 <= chosen < num_replicas:
                raise ValueError(f"the policy chose {chosen!r}; it must be a replica index in [0, {num_replicas})")
            traces[position] = _Trace(chosen, request.arrival_ms, request.kind)
            params = SamplingParams(temperature=0, max_tokens=request.max_tokens, ignore_eos=True)
            replicas[chosen].scheduler.add(Request(position, list(request.prompt_token_ids), params,
                                                   arrival_time=request.arrival_ms))
            replicas[chosen].prompt_tokens += len(request.prompt_token_ids)
            outstanding[chosen] += 1
            next_arrival += 1
        for server in replicas:
            if server.busy_until is None and server.scheduler.has_unfinished():
                server.start_step(now)
    return SimResult(
        ttft_ms=[t.first_token_ms - t.arrival_ms for t in traces], e2e_ms=[t.finish_ms - t.arrival_ms for t in traces],
        kinds=[t.kind for t in traces], replicas=[t.replica for t in traces],
        preemptions=[r.scheduler.num_preemptions for r in replicas], prompt_tokens=[r.prompt_tokens for r in replicas],
        cached_prompt_tokens=[r.cached_prompt_tokens for r in replicas], num_blocks=replica.num_blocks,
        timeline=timeline)


def mixed_workload(arrival_ms: Sequence[float], *, document_share: float = 0.1, num_system_prompts: int = 6,
                   system_prompt_tokens: int = 512, question_tokens: tuple[int, int] = (16, 64),
                   chat_output_tokens: int = 32, document_tokens: tuple[int, int] = (5000, 9000),
                   document_output_tokens: int = 128, seed: int = 0) -> list[SimRequest]:
    """One request per arrival time: a chat (kind "chat") or, with probability ``document_share``, a document.

    A chat is one of ``num_system_prompts`` shared system prompts followed by a question of its own;
    a document is a prompt of its own, ``document_tokens`` long, with a longer answer. Token ids
    are random (seeded): only their sharing matters to the prefix cache and the routers.
    """
    if not 0 <= document_share <= 1:
        raise ValueError(f"document_share must be in [0, 1], got {document_share!r}")
    rng = random.Random(seed)

    def tokens(count: int) -> tuple[int, ...]:
        return tuple(rng.randrange(1, 49152) for _ in range(count))

    system_prompts = [tokens(system_prompt_tokens) for _ in range(num_system_prompts)]
    workload = []
    for at in arrival_ms:
        if rng.random() < document_share:
            workload.append(SimRequest(float(at), tokens(rng.randint(*document_tokens)), document_output_tokens,
                                       "document"))
        else:
            prompt = rng.choice(system_prompts) + tokens(rng.randint(*question_tokens))
            workload.append(SimRequest(float(at), prompt, chat_output_tokens, "chat"))
    return workload
