"""Benchmark: the course's LLMEngine against transformers on the CPU, greedy, one shared workload.

Workload: ``--num-requests`` (default 32) prompts cut from real text (the docstrings of the Python
standard library, ``course_lib.corpus``) to token lengths spread evenly over 20..400, each with its
own ``max_tokens`` spread evenly over 16..256, ``ignore_eos`` so every request produces exactly its
``max_tokens``. All requests are present at time 0 (an offline batch job).

Systems, each given the same token ids:

- ours: ``LLMEngine.generate`` (continuous batching over a paged KV cache).
- transformers ``generate``, one request at a time.
- transformers ``generate`` on one left-padded batch. A batch runs until its longest request is
  done, so a request that asked for 16 tokens still rides along for 256 steps; only each request's
  own ``max_tokens`` are counted as output.
- transformers continuous batching (the manager behind ``model.generate_batch``), each request
  added with its own ``max_new_tokens`` (``generate_batch`` itself takes only one for all).

Output tokens/s = useful output tokens / wall-clock seconds of the generation call (model loading and
one short warm-up excluded). For ours, TTFT and TPOT percentiles come from ``RequestMetrics``.
Our greedy tokens are checked against transformers' one-at-a-time tokens, request by request.

``--profile`` runs only our engine under torch.profiler (operator time) and cProfile (Python
function time) and prints where the time goes.

Run: ``course bench engine`` (or ``python benchmarks/engine_vs_hf.py``); ``--quick`` for a small
smoke run. The full run takes several minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import sys
import time
import warnings
from dataclasses import dataclass

SYSTEMS = ("ours", "hf-single", "hf-padded", "hf-continuous")
SYSTEM_LABELS = {
    "ours": "ours (LLMEngine)",
    "hf-single": "transformers generate, one at a time",
    "hf-padded": "transformers generate, left-padded batch",
    "hf-continuous": "transformers continuous batching",
}
TARGETS = {"hf-padded": 1.5, "hf-single": 5.0}  # ours must be at least this many times faster
PAD_TOKEN_ID = 2  # SmolLM2's <|im_end|>, its declared padding token; masked out by attention_mask


@dataclass(frozen=True)
class BenchRequest:
    prompt_ids: list[int]
    max_tokens: int


@dataclass
class SystemResult:
    name: str
    seconds: float | None = None
    cpu_seconds: float | None = None  # CPU time of this process (all threads): robust to other load
    output_tokens: int = 0
    token_ids: list[list[int]] | None = None  # per request, its own max_tokens only
    note: str = ""
    error: str | None = None

    @property
    def tokens_per_s(self) -> float | None:
        return self.output_tokens / self.seconds if self.seconds else None

    @property
    def tokens_per_cpu_s(self) -> float | None:
        return self.output_tokens / self.cpu_seconds if self.cpu_seconds else None


class Stopwatch:
    """Wall-clock and process CPU seconds of a ``with`` block.

    CPU time counts every thread of this process and nothing of other processes, so on a shared
    machine it measures the work a system did even when the wall clock is stretched by other load.
    """

    def __enter__(self):
        self.seconds = self.cpu_seconds = None
        self._wall, self._cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc_info):
        self.seconds = time.perf_counter() - self._wall
        self.cpu_seconds = time.process_time() - self._cpu


def spread(low: int, high: int, count: int, rng: random.Random) -> list[int]:
    """``count`` integers evenly spaced over [low, high], in a shuffled order."""
    if count == 1:
        return [low]
    values = [round(low + (high - low) * i / (count - 1)) for i in range(count)]
    rng.shuffle(values)
    return values


def build_workload(encode, num_requests: int, prompt_range=(20, 400), max_tokens_range=(16, 256)):
    """Requests whose prompts are consecutive, non-overlapping windows of the docstring corpus.

    encode: text -> token ids. Non-overlapping windows mean no two prompts share a prefix, so prefix
    caching cannot help ours (the comparison stays about batching).
    """
    from course_lib.corpus import load_corpus

    rng = random.Random(0)
    prompt_lens = spread(*prompt_range, num_requests, rng)
    max_tokens = spread(*max_tokens_range, num_requests, rng)
    needed = sum(prompt_lens)
    corpus_ids: list[int] = []
    text = load_corpus("stdlib-docstrings")
    # Encode the corpus piece by piece until there are enough tokens (the whole corpus is ~2.5 MB).
    for start in range(0, len(text), 20_000):
        corpus_ids.extend(encode(text[start:start + 20_000]))
        if len(corpus_ids) >= needed:
            break
    requests, offset = [], 0
    for length, tokens in zip(prompt_lens, max_tokens):
        requests.append(BenchRequest(corpus_ids[offset:offset + length], tokens))
        offset += length
    return requests


def machine_description() -> dict:
    import torch
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "date": datetime.date.today().isoformat(),
    }


def load_hf_model():
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from course_lib.gguf_file import gguf_path

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    path = gguf_path()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.eval()


# ---------------------------------------------------------------- the systems


def make_engine(model, tokenizer, args):
    from course_lib.engine import LLMEngine

    options = {}
    if args.max_num_seqs is not None:
        options["max_num_seqs"] = args.max_num_seqs
    if args.max_num_batched_tokens is not None:
        options["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.speculative is not None:
        from course_lib.speculative import SpeculativeConfig

        options["speculative"] = SpeculativeConfig(method=args.speculative, num_draft_tokens=args.num_draft_tokens)
    return LLMEngine(model, tokenizer, **options)


def run_ours(engine, workload) -> tuple[SystemResult, list]:
    """Our engine on the whole workload; also returns the RequestOutputs (for their metrics)."""
    from course_lib.sampling import SamplingParams

    params = [SamplingParams(temperature=0, max_tokens=r.max_tokens, ignore_eos=True) for r in workload]
    with Stopwatch() as clock:
        outputs = engine.generate([r.prompt_ids for r in workload], params, use_tqdm=False)
    token_ids = [list(o.token_ids) for o in outputs]
    return SystemResult("ours", clock.seconds, clock.cpu_seconds, sum(map(len, token_ids)), token_ids), outputs


def hf_generate(model, input_ids, attention_mask, max_new_tokens: int):
    """Greedy transformers generate that ignores EOS (eos_token_id=None): always max_new_tokens."""
    import torch

    with torch.inference_mode():
        return model.generate(
            input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=max_new_tokens,
            do_sample=False, eos_token_id=None, pad_token_id=PAD_TOKEN_ID,
        )


def run_hf_single(model, workload) -> SystemResult:
    import torch

    token_ids = []
    with Stopwatch() as clock:
        for request in workload:
            input_ids = torch.tensor([request.prompt_ids])
            output = hf_generate(model, input_ids, torch.ones_like(input_ids), request.max_tokens)
            token_ids.append(output[0, input_ids.shape[1]:].tolist())
    return SystemResult("hf-single", clock.seconds, clock.cpu_seconds, sum(map(len, token_ids)), token_ids)


def left_pad(prompts: list[list[int]]):
    """``input_ids`` and ``attention_mask`` ``[batch, longest]`` with the padding on the left."""
    import torch

    longest = max(map(len, prompts))
    input_ids = torch.full((len(prompts), longest), PAD_TOKEN_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), longest), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        input_ids[row, longest - len(prompt):] = torch.tensor(prompt)
        attention_mask[row, longest - len(prompt):] = 1
    return input_ids, attention_mask


def run_hf_padded(model, workload, batch_size: int) -> SystemResult:
    token_ids = []
    with Stopwatch() as clock:
        for first in range(0, len(workload), batch_size):
            batch = workload[first:first + batch_size]
            input_ids, attention_mask = left_pad([r.prompt_ids for r in batch])
            output = hf_generate(model, input_ids, attention_mask, max(r.max_tokens for r in batch))
            for row, request in enumerate(batch):
                # Only the request's own tokens count; the rest of its row was wasted work.
                token_ids.append(output[row, input_ids.shape[1]:input_ids.shape[1] + request.max_tokens].tolist())
    steps = sum(max(r.max_tokens for r in workload[i:i + batch_size]) for i in range(0, len(workload), batch_size))
    generated = steps * min(batch_size, len(workload))
    note = f"batch {batch_size}; {generated} tokens generated, {sum(map(len, token_ids))} useful"
    return SystemResult("hf-padded", clock.seconds, clock.cpu_seconds, sum(map(len, token_ids)), token_ids, note=note)


def run_hf_continuous(model, workload) -> SystemResult:
    """transformers' continuous batching manager, one request per prompt with its own max_new_tokens."""
    import torch
    from transformers import GenerationConfig

    config = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=PAD_TOKEN_ID, max_new_tokens=16)
    setup_start = time.perf_counter()
    with torch.inference_mode(), model.continuous_batching_context_manager(
        generation_config=config, warmup=False
    ) as manager:
        setup_seconds = time.perf_counter() - setup_start
        with Stopwatch() as clock:
            request_ids = [
                manager.add_request(r.prompt_ids, request_id=f"req_{i}", max_new_tokens=r.max_tokens, eos_token_id=-1)
                for i, r in enumerate(workload)
            ]
            results = {}
            while len(results) < len(request_ids):
                result = manager.get_result(timeout=600)
                if result is None:
                    raise RuntimeError(f"no result after 600 s ({len(results)}/{len(request_ids)} finished)")
                if result.is_finished():
                    if result.error is not None:
                        raise RuntimeError(f"request {result.request_id} failed: {result.error}")
                    results[result.request_id] = result
    token_ids = [list(results[i].generated_tokens) for i in request_ids]
    note = f"manager set-up {setup_seconds:.1f} s not counted"
    return SystemResult("hf-continuous", clock.seconds, clock.cpu_seconds, sum(map(len, token_ids)), token_ids, note=note)


# ---------------------------------------------------------------- checks and report


def compare_tokens(ours: list[list[int]], reference: list[list[int]]) -> list[str]:
    """One line per request whose tokens differ: where they first diverge."""
    problems = []
    for index, (a, b) in enumerate(zip(ours, reference)):
        if a != b:
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            problems.append(f"request {index}: first difference at output token {first} (lengths {len(a)}/{len(b)})")
    return problems


def report(results: dict[str, SystemResult], summary, machine: dict, workload, mismatches) -> str:
    lines = [
        f"machine: {machine['cpu']}, {machine['cpu_count']} cores, torch {machine['torch']} "
        f"({machine['torch_threads']} threads), transformers {machine['transformers']}, {machine['date']}",
        f"workload: {len(workload)} requests, prompts {min(len(r.prompt_ids) for r in workload)}.."
        f"{max(len(r.prompt_ids) for r in workload)} tokens ({sum(len(r.prompt_ids) for r in workload)} in all), "
        f"max_tokens {min(r.max_tokens for r in workload)}..{max(r.max_tokens for r in workload)} "
        f"({sum(r.max_tokens for r in workload)} in all), greedy, ignore_eos",
        "",
        "| system | out tokens | wall s | out tok/s | ours is | CPU s | out tok/CPU s | ours is (CPU) | note |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    ours = results.get("ours")
    for name, result in results.items():
        if result.error is not None:
            lines.append(f"| {SYSTEM_LABELS[name]} | - | - | - | - | - | - | - | failed: {result.error} |")
            continue
        wall_ratio = _ratio(ours.tokens_per_s if ours else None, result.tokens_per_s)
        cpu_ratio = _ratio(ours.tokens_per_cpu_s if ours else None, result.tokens_per_cpu_s)
        lines.append(
            f"| {SYSTEM_LABELS[name]} | {result.output_tokens} | {result.seconds:.1f} | {result.tokens_per_s:.1f} | "
            f"{wall_ratio} | {result.cpu_seconds:.1f} | {result.tokens_per_cpu_s:.1f} | {cpu_ratio} | {result.note} |"
        )
    if ours is not None and ours.error is None:
        lines.append("")
        for name, target in TARGETS.items():
            if name in results and results[name].error is None:
                wall = ours.tokens_per_s / results[name].tokens_per_s
                cpu = ours.tokens_per_cpu_s / results[name].tokens_per_cpu_s
                verdict = "met" if min(wall, cpu) >= target else "MISSED"
                lines.append(
                    f"target vs {SYSTEM_LABELS[name]}: >= {target}x; measured {wall:.2f}x wall-clock, "
                    f"{cpu:.2f}x CPU time ({verdict})"
                )
    if summary is not None:
        lines.append("")
        tpot = summary.tpot
        lines.append(
            f"ours: TTFT p50 {1000 * summary.ttft.median:.0f} ms, p99 {1000 * summary.ttft.p99:.0f} ms; "
            f"TPOT p50 {1000 * tpot.median:.1f} ms, p99 {1000 * tpot.p99:.1f} ms"
        )
    if mismatches is not None:
        lines.append("")
        total = len(workload)
        lines.append(f"greedy tokens equal to transformers one-at-a-time: {total - len(mismatches)}/{total} requests")
        lines.extend("  " + m for m in mismatches)
    return "\n".join(lines)


def _ratio(ours_rate: float | None, other_rate: float | None) -> str:
    return f"{ours_rate / other_rate:.2f}x" if ours_rate and other_rate else "-"


# ---------------------------------------------------------------- profiling


MATMUL_OPS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm"}


def _labelled(label: str, function):
    """``function`` wrapped in a torch.profiler range named ``label``."""
    import functools

    from torch.profiler import record_function

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with record_function(label):
            return function(*args, **kwargs)

    return wrapper


def profile_ours(engine, workload, top: int) -> str:
    """One run of our engine under torch.profiler, with ranges around the engine's parts.

    The ranges wrap attributes of this engine instance (and PagedAttention.attend for the run), so
    course_lib is not edited; a part whose attribute is missing is simply not labelled.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile

    from course_lib import model_runner

    parts = {  # label -> (object, attribute)
        "engine.step": (engine, "step"),
        "scheduler.schedule": (engine.scheduler, "schedule"),
        "scheduler.update": (engine.scheduler, "update"),
        "runner.run (batch layout + model forward)": (engine.runner, "run"),
        "runner.build_step_batch (Python)": (model_runner, "build_step_batch"),
        "attention (KV store + paged decode + prefill)": (model_runner.PagedAttention, "attend"),
        "sampler": (engine, "sampler"),
        "engine._emit (detokenize, bookkeeping)": (engine, "_emit"),
    }
    # (owner, name, whether owner itself held the attribute, its own value) to undo the wrapping.
    saved = []
    for label, (owner, name) in parts.items():
        if hasattr(owner, name):
            saved.append((owner, name, name in vars(owner), vars(owner).get(name)))
            setattr(owner, name, _labelled(label, getattr(owner, name)))
    try:
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            ours, _ = run_ours(engine, workload)
    finally:
        for owner, name, had_own, own_value in reversed(saved):
            if had_own:
                setattr(owner, name, own_value)
            else:
                delattr(owner, name)  # the instance falls back to its class's method again

    events = profiler.key_averages()
    by_name = {event.key: event for event in events}
    step_seconds = by_name["engine.step"].cpu_time_total / 1e6 if "engine.step" in by_name else ours.seconds
    op_events = [e for e in events if e.key.startswith("aten::")]
    op_seconds = sum(e.self_cpu_time_total for e in op_events) / 1e6
    matmul_seconds = sum(e.self_cpu_time_total for e in op_events if e.key in MATMUL_OPS) / 1e6

    lines = [
        f"profiled run: {ours.seconds:.1f} s wall ({torch.get_num_threads()} threads); profiler overhead included",
        "",
        "| part | seconds | share of engine.step |",
        "|---|---:|---:|",
    ]
    for label in parts:
        if label in by_name:
            seconds = by_name[label].cpu_time_total / 1e6
            lines.append(f"| {label} (x{by_name[label].count}) | {seconds:.1f} | {100 * seconds / step_seconds:.0f}% |")
    lines += [
        f"| all torch operators (self time) | {op_seconds:.1f} | {100 * op_seconds / step_seconds:.0f}% |",
        f"| of which matrix products ({', '.join(sorted(MATMUL_OPS))}) | {matmul_seconds:.1f} | "
        f"{100 * matmul_seconds / step_seconds:.0f}% |",
        f"| Python outside torch operators (step - operators) | {step_seconds - op_seconds:.1f} | "
        f"{100 * (step_seconds - op_seconds) / step_seconds:.0f}% |",
        "",
        events.table(sort_by="self_cpu_time_total", row_limit=top),
    ]
    return "\n".join(lines)


# ---------------------------------------------------------------- entry point


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="course bench engine",
        description="Output tokens/s of our LLMEngine against transformers generate (one at a time, "
        "left-padded batch) and transformers continuous batching, greedy, on the CPU.",
    )
    parser.add_argument("--num-requests", type=int, default=32, help="requests in the workload (default: 32)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 6 requests, prompts 20..120 tokens, max_tokens 8..32")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated subset of {','.join(SYSTEMS)} (default: all)")
    parser.add_argument("--padded-batch-size", type=int, default=None,
                        help="batch size of the left-padded run (default: all requests in one batch)")
    parser.add_argument("--max-num-seqs", type=int, default=None, help="passed to LLMEngine (default: its own)")
    parser.add_argument("--max-num-batched-tokens", type=int, default=None,
                        help="passed to LLMEngine (default: its own)")
    parser.add_argument("--quantize", choices=("int8", "int4"), default=None,
                        help="our engine with int8 / int4 weight-only quantized linear layers (default: fp32); "
                             "transformers stays fp32, so its tokens may differ")
    parser.add_argument("--speculative", choices=("ngram", "self"), default=None,
                        help="our engine with speculative decoding: prompt lookup or an int4 self-draft (default: off)")
    parser.add_argument("--num-draft-tokens", type=int, default=4, help="drafts per step with --speculative (default: 4)")
    parser.add_argument("--profile", action="store_true",
                        help="profile our engine only (torch.profiler + cProfile) instead of comparing")
    parser.add_argument("--profile-top", type=int, default=25, help="rows of each profile table (default: 25)")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(SYSTEMS))
    if unknown or not systems:
        parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
    args.systems = [s for s in SYSTEMS if s in systems]
    if args.num_requests < 1:
        parser.error("--num-requests must be >= 1")
    if args.padded_batch_size is not None and args.padded_batch_size < 1:
        parser.error("--padded-batch-size must be >= 1")
    if args.num_draft_tokens < 1:
        parser.error("--num-draft-tokens must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    import torch

    from course_lib.metrics import summarize
    from course_lib.model import load_smollm2

    torch.manual_seed(0)
    machine = machine_description()

    log("loading our model ..." + (f" ({args.quantize} weights)" if args.quantize else ""))
    model, tokenizer = load_smollm2(dtype=torch.float32, device="cpu")
    if args.quantize:
        from course_lib.quantization import quantize_model

        model = quantize_model(model, args.quantize)
    if args.quick:
        workload = build_workload(tokenizer.encode, min(args.num_requests, 6), (20, 120), (8, 32))
    else:
        workload = build_workload(tokenizer.encode, args.num_requests)
    warmup = [BenchRequest(workload[0].prompt_ids[:16], 4)]

    engine = make_engine(model, tokenizer, args)
    run_ours(engine, warmup)
    if args.profile:
        print(profile_ours(engine, workload, args.profile_top))
        return 0

    results: dict[str, SystemResult] = {}
    summary = None
    if "ours" in args.systems:
        log("running ours ...")
        results["ours"], outputs = run_ours(engine, workload)
        summary = summarize([o.metrics for o in outputs], duration=results["ours"].seconds)
    del engine

    hf_systems = [s for s in args.systems if s != "ours"]
    if hf_systems:
        log("loading the transformers model ...")
        hf_model = load_hf_model()
        runners = {
            "hf-single": lambda: run_hf_single(hf_model, workload),
            "hf-padded": lambda: run_hf_padded(hf_model, workload, args.padded_batch_size or len(workload)),
            # Last: the manager switches the model's attention implementation while it runs.
            "hf-continuous": lambda: run_hf_continuous(hf_model, workload),
        }
        run_hf_single(hf_model, warmup)
        for name in hf_systems:
            log(f"running {name} ...")
            try:
                results[name] = runners[name]()
            except Exception as error:  # record why a baseline could not run, and go on
                results[name] = SystemResult(name, error=f"{type(error).__name__}: {error}")

    for name, result in results.items():
        expected = [r.max_tokens for r in workload]
        if result.token_ids is not None and [len(t) for t in result.token_ids] != expected:
            result.note += " (WARNING: output lengths differ from max_tokens)"

    mismatches = None
    if "ours" in results and "hf-single" in results and results["hf-single"].token_ids is not None:
        mismatches = compare_tokens(results["ours"].token_ids, results["hf-single"].token_ids)
    print(report(results, summary, machine, workload, mismatches))

    if args.out:
        data = {
            "machine": machine,
            "workload": [{"prompt_tokens": len(r.prompt_ids), "max_tokens": r.max_tokens} for r in workload],
            "systems": {
                name: {"seconds": r.seconds, "cpu_seconds": r.cpu_seconds, "output_tokens": r.output_tokens,
                       "tokens_per_s": r.tokens_per_s, "tokens_per_cpu_s": r.tokens_per_cpu_s,
                       "note": r.note, "error": r.error}
                for name, r in results.items()
            },
            "ours_metrics": summary.as_dict() if summary is not None else None,
            "token_mismatches_vs_hf_single": mismatches,
        }
        with open(args.out, "w") as out_file:
            json.dump(data, out_file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
