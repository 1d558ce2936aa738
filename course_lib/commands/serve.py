"""``course serve``: the course's engine behind an OpenAI-compatible HTTP API.

One replica: the engine loop and the web server in this process. ``--replicas N``: N server
processes on free loopback ports and a router on ``--port`` in front of them, choosing a replica
per request with ``--router`` (round-robin, least-outstanding, prefix-aware, kv-aware).

Either way a browser gets a chat page at ``/`` and a live view of the engine(s) at ``/engine``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

HELP = "Serve SmolLM2 over an OpenAI-compatible HTTP API, with a chat page and a live engine view."
DESCRIPTION = """Serve SmolLM2-135M-Instruct through course_lib.engine.LLMEngine over HTTP.

In a browser: http://127.0.0.1:8000/ is a chat page (streamed answers, every sampling control,
TTFT/TPOT and prefix-cache hits per answer); http://127.0.0.1:8000/engine shows the engine live:
its queues, the tokens of each step, the KV block pool block by block, preemptions, and the last
minute's latencies. Run `course loadtest` against the server and watch it batch.

Endpoints: POST /v1/completions and /v1/chat/completions (add "stream": true for server-sent
events), GET /v1/models, GET /health, GET /metrics (Prometheus text format), GET /server_info,
GET /engine/stream (the engine view's server-sent events).

Examples:
  course serve                                     # http://127.0.0.1:8000
  course serve --admission --max-waiting 16        # 429 + Retry-After past 16 waiting requests
  course serve --replicas 3 --router prefix-aware  # 3 engine processes behind a router
  course serve --replicas 2 --router kv-aware      # routed by the KV blocks each replica reports free
  course serve --quantize int8                     # Lab 0.4's int8 weights
  course serve --speculative ngram                 # speculative decoding with prompt-lookup drafts

Try it with the openai client:
  from openai import OpenAI
  client = OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="unused")
  client.chat.completions.create(model="SmolLM2-135M-Instruct", messages=[{"role": "user", "content": "Hi!"}])

Stop with Ctrl-C; replicas are stopped with the router."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1, this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: 8000)")
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"],
                        help="smollm2 (default) or tiny (a random 2-layer model, for testing the server)")
    parser.add_argument("--replicas", type=int, default=1, help="engine processes behind a router (default: 1, no router)")
    parser.add_argument("--router", default="least-outstanding",
                        choices=["round-robin", "least-outstanding", "prefix-aware", "kv-aware"],
                        help="how the router picks a replica (default: least-outstanding); kv-aware routes by the KV "
                             "blocks each replica reports free on /metrics, keeping a prompt's prefix-aware home while "
                             "it has room")
    parser.add_argument("--num-blocks", type=int, default=None, help="KV pool per replica, in blocks (default: 512 MiB)")
    parser.add_argument("--max-num-seqs", type=int, default=32, help="requests running at once per replica (default: 32)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=1024,
                        help="tokens one engine step may run, the token budget (default: 1024)")
    parser.add_argument("--quantize", choices=["int8", "int4"], default=None,
                        help="int8 / int4 weight-only quantized linear layers (default: the weights as read)")
    parser.add_argument("--speculative", choices=["ngram", "self"], default=None,
                        help="speculative decoding: 'ngram' (prompt lookup) or 'self' (an int4 copy drafts); default: off")
    parser.add_argument("--num-draft-tokens", type=int, default=4,
                        help="tokens drafted per step with --speculative (default: 4)")
    parser.add_argument("--admission", action="store_true", help="refuse with 429 past --max-waiting or the KV budget")
    parser.add_argument("--max-waiting", type=int, default=32, help="waiting requests before 429 (with --admission)")
    parser.add_argument("--kv-budget-blocks", type=int, default=None, help="KV blocks admitted requests may claim "
                        "(with --admission; default: the whole pool)")


def _replica_args(args: argparse.Namespace) -> list[str]:
    options = ["--model", args.model, "--max-num-seqs", str(args.max_num_seqs),
               "--max-num-batched-tokens", str(args.max_num_batched_tokens)]
    if args.num_blocks:
        options += ["--num-blocks", str(args.num_blocks)]
    if args.quantize:
        options += ["--quantize", args.quantize]
    if args.speculative:
        options += ["--speculative", args.speculative, "--num-draft-tokens", str(args.num_draft_tokens)]
    if args.admission:
        options += ["--admission", "--max-waiting", str(args.max_waiting)]
        if args.kv_budget_blocks:
            options += ["--kv-budget-blocks", str(args.kv_budget_blocks)]
    return options


def _wait_for_interrupt() -> None:
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()


def _check(args: argparse.Namespace) -> str | None:
    """What is wrong with the options, or None."""
    for name in ("replicas", "max_num_seqs", "max_num_batched_tokens", "num_draft_tokens"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}"
    if args.num_blocks is not None and args.num_blocks < 1:
        return f"--num-blocks must be >= 1, got {args.num_blocks}"
    if args.max_num_batched_tokens < args.max_num_seqs:
        return (f"--max-num-batched-tokens ({args.max_num_batched_tokens}) must be >= --max-num-seqs "
                f"({args.max_num_seqs}), so every running request can decode in every step")
    if not 0 <= args.port <= 65535:
        return f"--port must be in [0, 65535], got {args.port}"
    return None


def _pages(url: str) -> str:
    return f"chat page {url}/ , engine view {url}/engine"


def run(args: argparse.Namespace) -> int:
    problem = _check(args)
    if problem:
        print(f"course serve: {problem}", file=sys.stderr)
        return 2
    from course_lib.server.launch import is_loopback

    if not is_loopback(args.host):
        print(f"course serve: note: listening on {args.host}, reachable from other machines", file=sys.stderr)
    if args.replicas == 1:
        from course_lib.server.__main__ import build_parser
        from course_lib.server.serve import build_server

        server_args = build_parser().parse_args(["--host", args.host, "--port", str(args.port), *_replica_args(args)])
        print(f"loading {args.model}" + (f" with {args.quantize} weights" if args.quantize else "") + " ...",
              file=sys.stderr, flush=True)
        try:
            server = build_server(server_args)
        except (RuntimeError, ValueError, OSError) as error:  # a locked lab's part, a port in use, ...
            print(f"course serve: {error}", file=sys.stderr)
            return 2
        print(f"serving on {server.url} (Ctrl-C to stop): {_pages(server.url)}", file=sys.stderr, flush=True)
        try:
            _wait_for_interrupt()
        finally:
            server.stop()
        return 0
    return _serve_replicas(args)


def _serve_replicas(args: argparse.Namespace) -> int:
    from course_lib.exercises import is_locked, unlock_hint
    from course_lib.server.balancing import kv_aware_policy
    from course_lib.server.launch import ServerProcess
    from course_lib.server.router import start_router
    from course_lib.server.routing import POLICIES
    from course_lib.tokenizer import BPETokenizer

    chapter = {"prefix-aware": "chapter 4", "kv-aware": "chapters 4 and 6"}.get(args.router)
    if chapter and is_locked("lab05-serving"):
        print(f"course serve: --router {args.router} is your exercise in Lab 0.5 {chapter}; "
              f"{unlock_hint('lab05-serving')}", file=sys.stderr)
        return 2
    threads = max(1, (__import__("os").cpu_count() or 1) // args.replicas)
    replicas = [ServerProcess(_replica_args(args), threads=threads) for _ in range(args.replicas)]
    router = None
    try:
        print(f"starting {args.replicas} replicas ...", file=sys.stderr, flush=True)
        for replica in replicas:
            replica.launch()
        for replica in replicas:
            replica.wait()
        policy = kv_aware_policy(args.replicas) if args.router == "kv-aware" else POLICIES[args.router](args.replicas)
        router = start_router([r.url for r in replicas], policy, BPETokenizer.from_gguf(), port=args.port, host=args.host,
                              policy_name=args.router)
        print(f"router ({args.router}) on {router.url} in front of " + ", ".join(r.url for r in replicas),
              file=sys.stderr, flush=True)
        print(_pages(router.url), file=sys.stderr, flush=True)
        _wait_for_interrupt()
    finally:
        if router is not None:
            router.stop()
        for replica in replicas:
            replica.stop()
    return 0
