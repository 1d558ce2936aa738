"""KV-cache-aware load balancing: route by what each replica says about its KV cache.

Round robin and least-outstanding count requests; a 2,000-token document and a 20-token question
count the same. What a replica actually runs out of is KV-cache blocks: a replica whose pool is
full makes new requests wait (or preempts running ones and recomputes them later), while the
replica next to it may have room to spare. So each replica reports its KV cache on ``/metrics``
(``course_lib.server.metrics``: blocks used and free, requests waiting and running, preemptions),
the router scrapes those reports, and a balancer routes each request to where its blocks fit.

- ``kv_load(metrics_text)`` (Lab 0.5 chapter 6): one replica's report, read from its Prometheus
  text, as ``{"blocks_used", "blocks_free", "num_waiting", "num_running", "preemptions"}`` (ints);
- ``KVAwareRouter`` (Lab 0.5 chapter 6): ``report(replica, load)`` after each scrape,
  ``choose(prompt_token_ids, max_tokens, home)`` per request. A request needs
  ceil((prompt tokens + max_tokens) / block_size) blocks at its longest. A replica's *room* is
  the free blocks it last reported minus the blocks of the requests sent to it since (the report
  is already old when it arrives: without that correction every request of a burst would go to
  the same emptiest replica, the "herd" effect). The request goes to ``home``, the replica
  prefix affinity prefers (so its prefix cache hits), while home has room for it and nobody
  waits there; otherwise to the replica with the fewest requests waiting and, among those, the
  most room (waiting requests hold no blocks yet: a replica with a queue looks roomier than it is).
- ``stranded_share(timeline, num_blocks, min_free_blocks)`` (Lab 0.5 chapter 6): how often a
  load-blind router strands KV capacity: requests wait on one replica while another has room;
- ``MetricsRouting`` (platform): what the router (``course_lib.server.router``) runs for such a
  balancer. It parses each scrape with a ``kv_load`` function and passes it on, asks a ``home``
  function (a prefix-aware router's ``choose``) for each request's home, and keeps the loads it
  saw, for the engine view and for plots. ``kv_aware_policy(n)`` is ``course serve --router
  kv-aware``: the course's three parts in one policy.

Metrics arrive every ``scrape_interval_s`` (50 ms by default); production routers (vLLM's
production stack, llm-d, AIBrix) do the same with their engines' Prometheus metrics.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence

from course_lib.exercises import exercise

__all__ = ["KV_METRICS", "KVAwareRouter", "MetricsRouting", "kv_aware_policy", "kv_load", "stranded_share"]

KV_METRICS = {
    "blocks_used": "course_kv_blocks_used",
    "blocks_free": "course_kv_blocks_free",
    "num_waiting": "course_num_requests_waiting",
    "num_running": "course_num_requests_running",
    "preemptions": "course_num_preemptions_total",
}
"""What ``kv_load`` returns -> the sample of a replica's ``/metrics`` it comes from (a counter's ends in _total)."""


@exercise("lab05-serving", "06_kv_aware_balancing", "kv_load")
def kv_load(metrics_text: str) -> dict[str, int]:
    """One replica's KV-cache report, read from the text of its ``GET /metrics``.

    metrics_text: Prometheus text format: ``# HELP`` / ``# TYPE`` comment lines, then one sample
    per line, ``name value`` or ``name{label="..."} value``, values written as floats ("12.0").
    Returns {"blocks_used", "blocks_free", "num_waiting", "num_running", "preemptions"}, each the
    int value of the sample named in ``KV_METRICS`` (the name must match exactly: other samples
    share its first letters). Raises ValueError naming the first sample that is missing.
    """
    values: dict[str, float] = {}
    for line in metrics_text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        values[name] = float(value)
    load = {}
    for key, sample in KV_METRICS.items():
        if sample not in values:
            raise ValueError(f"the metrics have no sample {sample}")
        load[key] = int(values[sample])
    return load


@exercise("lab05-serving", "06_kv_aware_balancing", "kv_aware_router")
class KVAwareRouter:
    """Route by KV-cache room; keep prefix affinity while the home replica has room.

    report(replica, load): a fresh report of one replica (``kv_load``'s dict). It replaces what was
    known of that replica and forgets the blocks sent there since its previous report (the new
    report counts them).
    choose(prompt_token_ids, max_tokens, home) -> replica index:
      1. need = ceil((len(prompt_token_ids) + max_tokens) / block_size);
      2. room(r) = reported blocks_free of r - blocks sent to r since its last report;
      3. ``home`` (an int, or None when affinity has no preference) if room(home) >= need and
         home reports num_waiting == 0;
      4. otherwise the replica with the fewest requests waiting, and among those the most room;
         ties: the lowest index. (Waiting requests hold no blocks yet, so a replica with a queue
         looks roomier than it is.)
    The chosen replica's sent blocks grow by need. Every replica must be reported before the first
    choose (ValueError otherwise).
    """

    def __init__(self, num_replicas: int, *, block_size: int = 16) -> None:
        if not isinstance(num_replicas, int) or num_replicas < 1:
            raise ValueError(f"num_replicas must be an integer >= 1, got {num_replicas!r}")
        if not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an integer >= 1, got {block_size!r}")
        self.num_replicas = num_replicas
        self.block_size = block_size
        self.loads: list[dict | None] = [None] * num_replicas
        self.sent = [0] * num_replicas

    def report(self, replica: int, load: dict) -> None:
        if not 0 <= replica < self.num_replicas:
            raise ValueError(f"replica must be in [0, {self.num_replicas}), got {replica!r}")
        self.loads[replica] = dict(load)
        self.sent[replica] = 0

    def choose(self, prompt_token_ids: Sequence[int], max_tokens: int, home: int | None) -> int:
        if any(load is None for load in self.loads):
            missing = [r for r, load in enumerate(self.loads) if load is None]
            raise ValueError(f"replicas {missing} have not reported their load yet")
        need = math.ceil((len(prompt_token_ids) + max_tokens) / self.block_size)
        room = [load["blocks_free"] - sent for load, sent in zip(self.loads, self.sent)]
        if home is not None and room[home] >= need and self.loads[home]["num_waiting"] == 0:
            chosen = home
        else:
            chosen = min(range(self.num_replicas), key=lambda r: (self.loads[r]["num_waiting"], -room[r], r))
        self.sent[chosen] += need
        return chosen


@exercise("lab05-serving", "06_kv_aware_balancing", "stranded_share")
def stranded_share(timeline: Sequence[tuple[float, int, int, int]], num_blocks: int, min_free_blocks: int) -> float:
    """The share of the scrapes at which KV capacity was stranded: requests waited on one replica
    while another replica had room.

    timeline: (time, replica, blocks_used, num_waiting) reports in time order; the reports of one
        scrape share their time (every replica is reported at every scrape).
    num_blocks: int, the KV pool of each replica; a replica's free blocks are num_blocks - blocks_used.
    min_free_blocks: int, how many free blocks count as room.
    Returns a float in [0, 1]: the scrapes at which some replica had num_waiting > 0 while a
    *different* replica had at least min_free_blocks free, divided by the number of scrapes
    (0.0 for an empty timeline).
    """
    scrapes: dict[float, list[tuple[int, int, int]]] = {}
    for time_ms, replica, blocks_used, num_waiting in timeline:
        scrapes.setdefault(time_ms, []).append((replica, blocks_used, num_waiting))
    if not scrapes:
        return 0.0
    stranded = 0
    for reports in scrapes.values():
        waiting = {replica for replica, _, num_waiting in reports if num_waiting > 0}
        roomy = {replica for replica, blocks_used, _ in reports if num_blocks - blocks_used >= min_free_blocks}
        if any(other != replica for replica in waiting for other in roomy):
            stranded += 1
    return stranded / len(scrapes)


HISTORY = 2000
"""Reports a ``MetricsRouting`` keeps (for plots of the loads over time): the most recent ones."""


class MetricsRouting:
    """The router's side of a balancer that routes by the replicas' ``/metrics``.

    MetricsRouting(balancer, kv_load, home=None, scrape_interval_s=0.05, default_max_tokens=16):
    - ``balancer``: an object with ``report(replica, load)`` and ``choose(prompt_token_ids,
      max_tokens, home)`` (a ``KVAwareRouter``, yours or the course's);
    - ``kv_load``: the function that reads a replica's metrics text into a load;
    - ``home``: None, or a function ``home(prompt_token_ids, outstanding) -> replica`` whose answer
      is the request's home (a prefix-aware router's ``choose`` fits).
    The router calls ``report_metrics(replica, text)`` for every scrape, every
    ``scrape_interval_s`` seconds (None: only when ``refresh`` is called), and
    ``choose_request(prompt_token_ids, max_tokens, outstanding)`` for every request.
    ``history`` holds (seconds since start, replica, load) of recent reports; ``loads`` the latest.
    """

    def __init__(self, balancer, kv_load: Callable[[str], dict], home: Callable | None = None, *,
                 scrape_interval_s: float | None = 0.05, default_max_tokens: int = 16) -> None:
        if scrape_interval_s is not None and not scrape_interval_s > 0:
            raise ValueError(f"scrape_interval_s must be > 0 or None, got {scrape_interval_s!r}")
        self.balancer = balancer
        self.kv_load = kv_load
        self.home = home
        self.scrape_interval_s = scrape_interval_s
        self.default_max_tokens = default_max_tokens
        self.loads: dict[int, dict] = {}
        self.history: deque[tuple[float, int, dict]] = deque(maxlen=HISTORY)
        self.started = time.perf_counter()
        self.refresh_requested = threading.Event()

    def report_metrics(self, replica: int, text: str) -> dict:
        """Parse one scrape with ``kv_load`` and report it to the balancer; returns the load."""
        load = self.kv_load(text)
        if not isinstance(load, dict):
            raise TypeError(f"kv_load returned {type(load).__name__}, not a dict")
        load = dict(load)
        self.balancer.report(replica, load)
        self.loads[replica] = load
        self.history.append((time.perf_counter() - self.started, replica, load))
        return load

    def refresh(self) -> None:
        """Ask the router to scrape every replica before its next decision."""
        self.refresh_requested.set()

    def choose_request(self, prompt_token_ids: Sequence[int], max_tokens: int | None, outstanding: Sequence[int]) -> int:
        home = None if self.home is None else self.home(list(prompt_token_ids), list(outstanding))
        tokens = self.default_max_tokens if max_tokens is None else max_tokens
        return self.balancer.choose(list(prompt_token_ids), tokens, home)

    def choose(self, prompt_token_ids: Sequence[int], outstanding: Sequence[int]) -> int:
        """The routing-policy interface of ``course_lib.server.routing`` (max_tokens at its default)."""
        return self.choose_request(prompt_token_ids, None, outstanding)


def kv_aware_policy(num_replicas: int, *, block_size: int = 16) -> MetricsRouting:
    """``course serve --router kv-aware``: the course's balancer, reader and prefix-aware home, together.

    Uses Lab 0.5's references (chapters 4 and 6): a kit refuses it until that lab is unlocked.
    """
    from course_lib.server.routing import PrefixAwareRouter

    return MetricsRouting(KVAwareRouter(num_replicas, block_size=block_size), kv_load,
                          home=PrefixAwareRouter(num_replicas, block_size=block_size).choose)
