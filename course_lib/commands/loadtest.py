"""``course loadtest``: open-loop Poisson load against a server on this machine."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HELP = "Load-test a server on this machine: open-loop Poisson arrivals, latency percentiles, goodput."
DESCRIPTION = """Send streamed requests to URL with Poisson arrivals at each --rps for --duration seconds
(open loop: requests leave on time whatever the server does), then print TTFT, TPOT and
end-to-end latency (mean, p50, p90, p99), output tokens/s, and goodput under the SLO.

Only loopback addresses (127.0.0.1, ::1, localhost) are accepted, and a run is bounded
(at most 10,000 requests and 600 s).

Examples:
  course serve &                                    # in another terminal
  course loadtest http://127.0.0.1:8000 --rps 2 --duration 20
  course loadtest http://127.0.0.1:8000 --rps 1 2 4 8 --duration 15 --plot latency.png
  course loadtest http://127.0.0.1:8000 --rps 4 --dataset prompts.jsonl --json results.json

--dataset: a JSON-lines file, one {"prompt": "...", "max_tokens": 32} per line (max_tokens optional)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("url", help="the server, e.g. http://127.0.0.1:8000")
    parser.add_argument("--rps", type=float, nargs="+", required=True, help="arrival rate(s), requests per second")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of arrivals per rate (default: 10)")
    parser.add_argument("--max-tokens", type=int, default=32, help="tokens per answer (default: 32)")
    parser.add_argument("--dataset", type=Path, default=None, help="JSON-lines prompts (default: built-in short prompts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo-ttft", type=float, default=1.0, help="SLO on TTFT, seconds (default: 1.0)")
    parser.add_argument("--slo-tpot", type=float, default=0.2, help="SLO on TPOT, seconds (default: 0.2)")
    parser.add_argument("--plot", type=Path, default=None, help="save the latency-versus-load plot here (PNG)")
    parser.add_argument("--json", type=Path, default=None, help="save every record and summary here")


def read_dataset(path: Path, default_max_tokens: int) -> tuple[list[str], list[int]]:
    prompts, lengths = [], []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            prompts.append(str(item["prompt"]))
            lengths.append(int(item.get("max_tokens", default_max_tokens)))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: expected {{\"prompt\": ..., \"max_tokens\": ...}} ({error})") from None
    if not prompts:
        raise ValueError(f"{path} holds no prompt")
    return prompts, lengths


def run(args: argparse.Namespace) -> int:
    from course_lib import loadtest
    from course_lib.exercises import is_locked, unlock_hint

    if is_locked("lab05-serving"):
        print(f"course loadtest: its open-loop generator is your exercise in Lab 0.5 chapter 2; "
              f"{unlock_hint('lab05-serving')}", file=sys.stderr)
        return 2
    try:
        if args.dataset:
            prompts, lengths = read_dataset(args.dataset, args.max_tokens)
        else:
            prompts, lengths = loadtest.default_prompts(), [args.max_tokens]
        if any(rate <= 0 for rate in args.rps) or args.duration <= 0:
            raise ValueError("--rps values and --duration must be > 0")
        slo = loadtest.Slo(ttft_s=args.slo_ttft, tpot_s=args.slo_tpot)
        results = []
        for rate in args.rps:
            arrivals = loadtest.poisson_arrival_times(rate, args.duration, args.seed)
            per_request = [lengths[i % len(lengths)] for i in range(len(arrivals))]
            schedule = loadtest.poisson_schedule(arrivals, prompts, per_request)
            print(f"{rate:g} requests/s for {args.duration:g} s: {len(schedule)} requests ...", file=sys.stderr,
                  flush=True)
            records = loadtest.run(loadtest.open_loop, args.url, schedule)
            summary = loadtest.summarize(records, slo)
            print(loadtest.format_summary(summary, title=f"\n== offered load {rate:g} requests/s =="))
            results.append({"rps": rate, "summary": summary, "records": records})
    except (ValueError, OSError) as error:
        print(f"course loadtest: {error}", file=sys.stderr)
        return 2
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot:
        from course_lib.viz.serving import latency_vs_load

        figure = latency_vs_load([(r["rps"], r["summary"]) for r in results], slo=slo)
        figure.savefig(args.plot, dpi=120, bbox_inches="tight")
        print(f"plot saved to {args.plot}", file=sys.stderr)
    return 0
