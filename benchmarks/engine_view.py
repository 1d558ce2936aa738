"""Benchmark: what the live engine view (``/engine``) costs the engine's throughput.

One server (``course_lib.server.launch.start_server``, the engine loop and uvicorn in this process,
as ``course serve`` runs them) serves the same burst of requests again and again, alternately
**without** a viewer and **with** one viewer attached to ``GET /engine/stream``. Alternating in one
process, on one warm model, keeps a busy machine's drift out of the comparison as far as it can:
each "with" run is compared with the "without" runs on either side of it.

Workload per run: ``--requests`` streamed ``/v1/completions`` sent at once (greedy, ``ignore_eos``,
``--max-tokens`` each, prompts of 20 to 120 tokens), so every run does exactly the same work.
Throughput = output tokens / seconds from the first request sent to the last token received.

The viewer runs in a process of its own, as a browser would: ``--viewer sse`` reads the stream and
parses every message (what the page's JavaScript does, without drawing); ``--viewer browser`` opens
the real page in headless Chromium (drawing included: on a small machine the browser's own CPU use
competes with the engine, which this measures too).

Wall-clock throughput on a shared machine is noisy, so three more measures come from the server
itself, which other processes disturb far less: the engine thread's time spent building frames
(the only work the view adds to the engine's own loop), and the CPU time of the engine thread and
of the web server's thread (which encodes and sends the frames) per output token, with and without
the viewer (``time.pthread_getcpuclockid``: each thread's own CPU clock).

Run: ``course bench view`` (or ``python benchmarks/engine_view.py``); ``--model tiny`` for a quick
check of the script. Results: benchmarks/RESULTS.md, "Engine view overhead".
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_SSE_VIEWER = r"""
import json, sys, httpx
count = 0
with httpx.stream("GET", sys.argv[1] + "/engine/stream", timeout=None) as response:
    print("connected", response.status_code, flush=True)
    for line in response.iter_lines():
        if line.startswith("data: "):
            json.loads(line[6:])
            count += 1
"""

_BROWSER_VIEWER = r"""
import sys, time
from playwright.sync_api import sync_playwright
with sync_playwright() as p:
    browser = p.chromium.launch(executable_path=sys.argv[2], args=["--no-sandbox", "--disable-dev-shm-usage",
                                "--disable-background-networking", "--disable-component-update"])
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(sys.argv[1] + "/engine")
    page.get_by_text("Connected").wait_for()
    print("connected 200", flush=True)
    while True:
        time.sleep(1)
"""


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="course bench view", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", choices=["smollm2", "tiny"], default="smollm2")
    parser.add_argument("--requests", type=int, default=16, help="requests per run, sent at once (default: 16)")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens per request (default: 64)")
    parser.add_argument("--pairs", type=int, default=6, help="runs with a viewer, each between two without (default: 6)")
    parser.add_argument("--viewer", choices=["sse", "browser"], default="sse")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", type=Path, default=None, help="save every run here")
    args = parser.parse_args(argv)
    for name in ("requests", "max_tokens", "pairs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    return args


async def _burst(url: str, prompts: list[str], max_tokens: int) -> tuple[float, int]:
    """(seconds from the first send to the last token, output tokens) of one burst."""
    import httpx

    async def one(client, prompt):
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        tokens = 0
        async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
            response.raise_for_status()
            async for line in response.aiter_lines():
                if line.startswith("data: {") and '"usage"' in line:
                    tokens = json.loads(line[6:])["usage"]["completion_tokens"]
        return time.perf_counter(), tokens

    limits = httpx.Limits(max_connections=len(prompts) + 4)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        start = time.perf_counter()
        results = await asyncio.gather(*(one(client, p) for p in prompts))
    return max(t for t, _ in results) - start, sum(n for _, n in results)


def _prompts(tokenizer, count: int) -> list[str]:
    words = ("the engine schedules every request in steps and pages its keys and values into blocks of the "
             "cache so that memory is never reserved for tokens that are not generated yet").split()
    prompts = []
    for index in range(count):
        length = 20 + (100 * index) // max(count - 1, 1)
        text = " ".join(words[(index + i) % len(words)] for i in range(length))
        ids = tokenizer.encode(text)[:length]
        prompts.append(f"[{index}] " + tokenizer.decode(ids))   # a distinct first block: no prefix-cache help
    return prompts


def _start_viewer(kind: str, url: str) -> subprocess.Popen:
    if kind == "sse":
        command = [sys.executable, "-c", _SSE_VIEWER, url]
    else:
        import shutil

        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        command = [sys.executable, "-c", _BROWSER_VIEWER, url, chromium]
    viewer = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    line = viewer.stdout.readline()
    if not line.startswith("connected 200"):
        viewer.kill()
        raise RuntimeError(f"the {kind} viewer did not connect: {line!r}")
    return viewer


def _thread_cpu_s(thread) -> float:
    """CPU seconds a thread of this process has used (Linux and other POSIX systems)."""
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def _run(url, server, prompts, max_tokens, viewer_kind) -> dict:
    monitor = server.backend.monitor
    engine_thread, web_thread = server.backend._thread, server._thread
    viewer = _start_viewer(viewer_kind, url) if viewer_kind else None
    try:
        if viewer is not None:
            deadline = time.monotonic() + 30
            while monitor.num_viewers == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
        frames, building = monitor.frames_built, monitor.seconds_building
        steps = server.backend.engine.stats.num_steps
        engine_cpu, web_cpu = _thread_cpu_s(engine_thread), _thread_cpu_s(web_thread)
        seconds, tokens = asyncio.run(_burst(url, prompts, max_tokens))
        return {"viewer": bool(viewer_kind), "seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds,
                "frames": monitor.frames_built - frames, "building_s": monitor.seconds_building - building,
                "steps": server.backend.engine.stats.num_steps - steps,
                "engine_cpu_ms_per_token": 1000 * (_thread_cpu_s(engine_thread) - engine_cpu) / tokens,
                "web_cpu_ms_per_token": 1000 * (_thread_cpu_s(web_thread) - web_cpu) / tokens}
    finally:
        if viewer is not None:
            viewer.terminate()
            viewer.wait(10)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    import torch

    from course_lib.server.launch import start_server
    from course_lib.server.models import load_named_model

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer, name = load_named_model(args.model)
    prompts = _prompts(tokenizer, args.requests)
    print(f"{name}: {args.requests} requests x {args.max_tokens} tokens per run, {args.pairs} runs with a "
          f"{args.viewer} viewer alternating with {args.pairs + 1} without; torch threads {torch.get_num_threads()}",
          file=sys.stderr)
    runs = []
    with start_server(model, tokenizer, model_name=name) as server:
        _run(server.url, server, prompts[:4], 8, None)   # warm-up: first-call costs out of the way
        order = [None] + [args.viewer, None] * args.pairs
        for index, kind in enumerate(order):
            run = _run(server.url, server, prompts, args.max_tokens, kind)
            runs.append(run)
            print(f"  run {index + 1:2d}/{len(order)} {'with' if kind else 'without':7s} a viewer: "
                  f"{run['tokens_per_s']:7.1f} tokens/s ({run['seconds']:.2f} s, {run['steps']} steps, "
                  f"{run['frames']} frames, {1000 * run['building_s']:.1f} ms building them; CPU per token: engine "
                  f"thread {run['engine_cpu_ms_per_token']:.2f} ms, web thread {run['web_cpu_ms_per_token']:.2f} ms)",
                  file=sys.stderr)
    ratios = []
    for index in range(1, len(runs), 2):   # each run with a viewer against the mean of its two neighbours
        neighbours = (runs[index - 1]["tokens_per_s"] + runs[index + 1]["tokens_per_s"]) / 2
        ratios.append(runs[index]["tokens_per_s"] / neighbours)
    with_viewer = [r for r in runs if r["viewer"]]
    building_share = sum(r["building_s"] for r in with_viewer) / sum(r["seconds"] for r in with_viewer)
    frames_per_step = sum(r["frames"] for r in with_viewer) / max(sum(r["steps"] for r in with_viewer), 1)
    median = statistics.median(ratios)
    print()
    print(f"Engine view overhead, {name}, {args.viewer} viewer, {datetime.date.today()}, "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}")
    print("| run pair | with / without (tokens/s) |")
    print("| --- | --- |")
    for index, ratio in enumerate(ratios, 1):
        print(f"| {index} | {ratio:.3f} |")
    print(f"median ratio {median:.3f} (throughput cost {100 * (1 - median):+.1f}%), spread {min(ratios):.3f} .. "
          f"{max(ratios):.3f}; without a viewer {statistics.median(r['tokens_per_s'] for r in runs if not r['viewer']):.1f} "
          f"tokens/s (median)")
    print(f"engine thread building frames: {100 * building_share:.2f}% of the runs' time; "
          f"{frames_per_step:.2f} frames per step ({sum(r['frames'] for r in with_viewer)} frames)")
    without = [r for r in runs if not r["viewer"]]
    for name, key in (("engine thread", "engine_cpu_ms_per_token"), ("web server thread", "web_cpu_ms_per_token")):
        on, off = statistics.median(r[key] for r in with_viewer), statistics.median(r[key] for r in without)
        print(f"{name} CPU per output token: {on:.3f} ms with the viewer, {off:.3f} ms without "
              f"({100 * (on / off - 1):+.1f}%; medians)")
    target = median >= 0.98
    print(f"target (cost < 2%): {'met' if target else 'NOT met'} by the median ratio")
    if args.json:
        args.json.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "runs": runs,
                                         "ratios": ratios}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
