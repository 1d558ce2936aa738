"""``course serve``: the course's engine behind an OpenAI-compatible HTTP API.

One replica: the engine loop and the web server in this process. ``--replicas N``: N server
processes on free loopback ports and a router on ``--port`` in front of them, choosing a replica
per request with ``--router`` (round-robin, least-outstanding, prefix-aware).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

HELP = "Serve SmolLM2 over an OpenAI-compatible HTTP API (streaming, metrics, replicas behind a router)."
DESCRIPTION = """Serve SmolLM2-135M-Instruct through course_lib.engine.LLMEngine over HTTP.

Endpoints: POST /v1/completions and /v1/chat/completions (add "stream": true for server-sent
events), GET /v1/models, GET /health, GET /metrics (Prometheus text format).

Examples:
  course serve                                     # http://127.0.0.1:8000
  course serve --admission --max-waiting 16        # 429 + Retry-After past 16 waiting requests
  course serve --replicas 3 --router prefix-aware  # 3 engine processes behind a router

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
                        choices=["round-robin", "least-outstanding", "prefix-aware"],
                        help="how the router picks a replica (default: least-outstanding)")
    parser.add_argument("--num-blocks", type=int, default=None, help="KV pool per replica, in blocks (default: 512 MiB)")
    parser.add_argument("--max-num-seqs", type=int, default=32, help="requests running at once per replica (default: 32)")
    parser.add_argument("--admission", action="store_true", help="refuse with 429 past --max-waiting or the KV budget")
    parser.add_argument("--max-waiting", type=int, default=32, help="waiting requests before 429 (with --admission)")
    parser.add_argument("--kv-budget-blocks", type=int, default=None, help="KV blocks admitted requests may claim "
                        "(with --admission; default: the whole pool)")


def _replica_args(args: argparse.Namespace) -> list[str]:
    options = ["--model", args.model, "--max-num-seqs", str(args.max_num_seqs)]
    if args.num_blocks:
        options += ["--num-blocks", str(args.num_blocks)]
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


def run(args: argparse.Namespace) -> int:
    if args.replicas < 1:
        print(f"course serve: --replicas must be >= 1, got {args.replicas}", file=sys.stderr)
        return 2
    from course_lib.server.launch import is_loopback

    if not is_loopback(args.host):
        print(f"course serve: note: listening on {args.host}, reachable from other machines", file=sys.stderr)
    if args.replicas == 1:
        from course_lib.server.__main__ import build_parser
        from course_lib.server.serve import build_server

        server_args = build_parser().parse_args(["--host", args.host, "--port", str(args.port), *_replica_args(args)])
        print(f"loading {args.model} ...", file=sys.stderr, flush=True)
        server = build_server(server_args)
        print(f"serving on {server.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        try:
            _wait_for_interrupt()
        finally:
            server.stop()
        return 0
    return _serve_replicas(args)


def _serve_replicas(args: argparse.Namespace) -> int:
    from course_lib.exercises import is_locked, unlock_hint
    from course_lib.server.launch import ServerProcess
    from course_lib.server.router import start_router
    from course_lib.server.routing import POLICIES
    from course_lib.tokenizer import BPETokenizer

    if args.router == "prefix-aware" and is_locked("lab05-serving"):
        print(f"course serve: --router prefix-aware is your exercise in Lab 0.5 chapter 4; {unlock_hint('lab05-serving')}",
              file=sys.stderr)
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
        policy = POLICIES[args.router](args.replicas)
        router = start_router([r.url for r in replicas], policy, BPETokenizer.from_gguf(), port=args.port, host=args.host)
        print(f"router ({args.router}) on {router.url} in front of " + ", ".join(r.url for r in replicas),
              file=sys.stderr, flush=True)
        _wait_for_interrupt()
    finally:
        if router is not None:
            router.stop()
        for replica in replicas:
            replica.stop()
    return 0
