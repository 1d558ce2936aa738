"""Running one server until interrupted (``python -m course_lib.server`` and ``course serve``)."""

from __future__ import annotations

import argparse
import os
import signal
import threading

__all__ = ["build_server", "serve_forever"]


def build_server(args: argparse.Namespace):
    """A started ``ServerThread`` for the options of ``python -m course_lib.server``."""
    from course_lib.server.admission import AdmissionLimits
    from course_lib.server.launch import start_server
    from course_lib.server.models import load_named_model

    quantize = getattr(args, "quantize", None)
    model, tokenizer, model_name = load_named_model(args.model, quantize=quantize)
    engine_options = dict(block_size=args.block_size, num_blocks=args.num_blocks, max_num_seqs=args.max_num_seqs,
                          max_num_batched_tokens=args.max_num_batched_tokens,
                          enable_prefix_caching=not args.no_prefix_caching)
    if getattr(args, "speculative", None):
        from course_lib.speculative import SpeculativeConfig

        engine_options["speculative"] = SpeculativeConfig(method=args.speculative, num_draft_tokens=args.num_draft_tokens)
    admission, limits = None, None
    if args.admission:
        from course_lib.exercises import is_locked, unlock_hint

        if is_locked("lab05-serving"):
            raise SystemExit(f"--admission uses the reference admission policy: {unlock_hint('lab05-serving')}")
        from course_lib.server.admission import admission_policy

        admission = admission_policy
    server = start_server(model, tokenizer, model_name=model_name, host=args.host, port=args.port,
                          admission=admission, server_info={"quantization": quantize}, **engine_options)
    if args.admission:
        total = server.backend.engine.allocator.num_blocks
        limits = AdmissionLimits(max_waiting=args.max_waiting, kv_budget_blocks=args.kv_budget_blocks or total,
                                 retry_after_s=args.retry_after)
        server.app.state.limits = limits
    return server


def stop_when_orphaned(stop: threading.Event, interval_s: float = 1.0) -> None:
    """Set ``stop`` once this process's parent is gone (a notebook kernel killed, say), so a
    replica never outlives whoever started it."""
    parent = os.getppid()

    def watch() -> None:
        while not stop.wait(interval_s):
            if os.getppid() != parent:
                stop.set()

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve_forever(args: argparse.Namespace) -> int:
    server = build_server(args)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop_when_orphaned(stop)
    try:
        stop.wait()
    finally:
        server.stop()
    return 0
