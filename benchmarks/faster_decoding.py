"""Benchmark: what quantization and speculative decoding do for SmolLM2 on this machine (Lab 0.4).

Three row groups, each measured in one run of this script:

1. **Quantization** (fp32, int8, int4 weight-only; ``course_lib.quantization``): bytes of the model
   and of its decoder-layer linear weights; perplexity on held-out text (the Python standard
   library's docstrings, ``course_lib.corpus``, windows of 256 tokens); greedy agreement with fp32
   (teacher-forced along fp32's greedy continuations of fixed chat prompts, ``greedy_agreement``);
   milliseconds per decode step at batch 1 with PyTorch's fused weight-only kernels and with
   dequantize-then-matmul; the bytes / bandwidth floor of that step; and an int8 KV cache's
   perplexity (``KVQuantizedAttention``) and bytes per token.
2. **Speculative decoding at batch 1** (``speculative_generate``, greedy): for prompt lookup
   (``ngram_draft``, k = 4) and the int4 self-draft (k = 3) on copying, summarizing and free writing:
   acceptance rate, tokens per target pass expected from it and measured, wall-clock speedup over
   plain greedy decoding of the same prompt (tokens checked equal).
3. **The engine at growing batch sizes** (``LLMEngine`` with and without
   ``SpeculativeConfig("ngram", 4)``) on a copy-heavy workload: output tokens/s, outputs checked equal,
   and the batch size where the two lines cross.

Run: ``course bench decoding`` (``--quick`` for a smoke run of every code path; ``--groups`` to run
some groups; ``--out FILE`` for JSON). The full run takes about 15 minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time

GROUPS = ("quantization", "speculative", "engine")
PASSAGE = ("The library opens at nine in the morning and closes at six in the evening. Members may borrow up to "
           "five books at a time for three weeks. Late returns cost twenty cents per book per day.")
TASKS = {
    "copy": f"Copy this text word for word:\n\n{PASSAGE}",
    "summarize": f"Summarize the following text in one sentence:\n\n{PASSAGE}",
    "free writing": "Write a short story about a robot who learns to paint.",
}
QUESTIONS = ["What is the capital of France?", "Name three primary colors.", "Write a haiku about the sea.",
             "Explain what a CPU does in one sentence.", "Give me a tip for learning a new language.",
             "What is 12 times 7?", "Describe a cat in two sentences.", "Why is the sky blue?"]
SENTENCES = ["The river runs past the old mill and under the stone bridge.",
             "Seven blue boats were tied to the wooden pier at dawn.",
             "Our train leaves the north station at half past eight.",
             "Fresh bread and warm soup are served every Friday evening.",
             "The garden has three apple trees and a small pond.",
             "She painted the door green and the window frames white.",
             "Two owls live in the tall pine behind the school.",
             "He forgot his umbrella on the bus again this morning.",
             "The museum is closed on Mondays for cleaning.",
             "A cold wind blew the last leaves off the oak tree.",
             "The recipe needs four eggs, flour, sugar and butter.",
             "They climbed the hill to watch the sun go down.",
             "The printer on the second floor is out of paper.",
             "Every spring the swallows return to the barn roof.",
             "The library lends books, music and board games.",
             "Our cat sleeps on the warm laptop whenever it can."]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def machine_description() -> dict:
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        commit = ""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cpu": cpu, "cpu_count": os.cpu_count(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(), "torch": torch.__version__,
            "date": datetime.date.today().isoformat(), "commit": commit, "load_average_at_start": load}


def timed(function):
    """(result, wall seconds, CPU seconds of this process) of ``function()``.

    CPU seconds count only this process's work, so on a shared machine tokens per CPU second is the
    steadier measure (with one torch thread; with several, waiting threads spin and count too).
    """
    wall, cpu = time.perf_counter(), time.process_time()
    result = function()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def ms_per_decode_step(model, prompt_ids: list[int], steps: int) -> float:
    """Milliseconds of one batch-1 decode step after prefilling ``prompt_ids`` into a KVCache (best of two)."""
    import torch

    from course_lib.kv_cache import KVCache

    best = float("inf")
    for _ in range(2):
        cache = KVCache(model.config, max_seq_len=len(prompt_ids) + steps)
        last_row = torch.tensor([-1])
        with torch.inference_mode():
            model(torch.tensor(prompt_ids), cache.next_positions(len(prompt_ids)), cache, logits_indices=last_row)
            start = time.perf_counter()
            for _ in range(steps):
                model(torch.tensor(prompt_ids[-1:]), cache.next_positions(1), cache, logits_indices=last_row)
            best = min(best, (time.perf_counter() - start) / steps)
    return 1e3 * best


# ---------------------------------------------------------------- group 1: quantization


def run_quantization(model, tokenizer, args) -> dict:
    import torch

    from course_lib import quantization as qz
    from course_lib import roofline
    from course_lib.corpus import load_corpus
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams

    config = model.config
    held_out = tokenizer.encode(load_corpus("stdlib-docstrings", max_bytes=40_000 + 12 * args.ppl_tokens)[40_000:])
    held_out = held_out[: args.ppl_tokens]
    prompts = [tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": q}]))
               for q in QUESTIONS[: args.num_questions]]
    answers = LLMEngine(model, tokenizer, num_blocks=128).generate(
        prompts, SamplingParams(temperature=0, max_tokens=args.agreement_tokens, ignore_eos=True))
    texts = [p + a.token_ids for p, a in zip(prompts, answers)]
    short = tokenizer.encode("The capital of France is")
    bandwidth = roofline.measure_memory_bandwidth()
    embedding_bytes = model.embed_tokens.numel() * model.embed_tokens.element_size()
    bits = {"fp32": 32.0, "int8": 8 + 32 / config.hidden_size, "int4": 4 + 32 / qz.INT4_GROUP_SIZE}
    rows = {}
    for scheme in ("fp32", "int8", "int4"):
        log(f"  quantization: {scheme}")
        with torch.inference_mode():
            plain = model if scheme == "fp32" else qz.quantize_model(model, scheme, kernel="dequantize")
            fused = None if scheme == "fp32" or not qz.fused_kernel_available(scheme) else qz.quantize_model(
                model, scheme, kernel="fused")
        total = qz.model_nbytes(plain)
        step_bytes = qz.decode_step_bytes(config, bits[scheme], 1, 128)
        rows[scheme] = {
            "model_mb": total / 1e6,
            "linear_mb": (total - embedding_bytes - sum(n.numel() * 4 for n in _norms(model))) / 1e6,
            "perplexity": qz.perplexity(plain, held_out, window=256),
            "agreement": 1.0 if scheme == "fp32" else qz.greedy_agreement(model, plain, texts, [len(p) for p in prompts]),
            "ms_dequantize": ms_per_decode_step(plain, short, args.decode_steps),
            "ms_fused": None if fused is None else ms_per_decode_step(fused, short, args.decode_steps),
            "floor_ms": 1e3 * step_bytes / bandwidth,
            "h100_us": 1e6 * step_bytes / 3.35e12,
        }
    values = 2 * config.num_layers * config.num_kv_heads * config.head_dim
    kv = {"fp32": values * 4, "fp16": values * 2, "int8": values + 4 * 2 * config.num_layers * config.num_kv_heads}

    def with_int8_kv(input_ids):
        return model(input_ids, attention=qz.KVQuantizedAttention())

    log("  quantization: int8 KV")
    kv_perplexity = qz.perplexity(with_int8_kv, held_out, window=256)
    return {"rows": rows, "kv_bytes_per_token": kv, "kv_perplexity": kv_perplexity, "bandwidth_gb_s": bandwidth / 1e9,
            "held_out_tokens": len(held_out), "agreement_positions": len(texts) * args.agreement_tokens}


def _norms(model):
    yield model.norm.weight
    for layer in model.layers:
        yield layer.input_norm.weight
        yield layer.post_attention_norm.weight


# ---------------------------------------------------------------- group 2: speculative decoding at batch 1


def run_speculative(model, tokenizer, args) -> dict:
    import torch

    from course_lib import speculative as spec
    from course_lib.model import greedy_generate
    from course_lib.quantization import quantize_model

    with torch.inference_mode():
        draft_model = quantize_model(model, "int4")
    drafters = {"n-gram (k=4)": (lambda ids, k: spec.ngram_draft(ids, k), 4),
                "int4 self-draft (k=3)": (spec.ModelDrafter(draft_model), 3)}
    short = tokenizer.encode("The capital of France is")
    draft_cost = ms_per_decode_step(draft_model, short, args.decode_steps) / ms_per_decode_step(model, short,
                                                                                                args.decode_steps)
    rows = []
    for task, text in TASKS.items():
        prompt = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": text}]))
        greedy_generate(model, prompt[:8], 2)
        expected, plain_seconds, plain_cpu = timed(lambda: greedy_generate(model, prompt, args.spec_tokens))
        for name, (drafter, k) in drafters.items():
            log(f"  speculative: {task}, {name}")
            stats = spec.SpeculationStats()
            got, seconds, cpu = timed(lambda: spec.speculative_generate(
                model, prompt, args.spec_tokens, drafter=drafter, num_draft_tokens=k, stats=stats))
            alpha = stats.acceptance_rate or 0.0
            cost = 0.0 if name.startswith("n-gram") else draft_cost
            rows.append({"task": task, "drafter": name, "same_tokens": got == expected, "acceptance": alpha,
                         "expected_tokens_per_pass": spec.expected_tokens_per_step(alpha, k),
                         "measured_tokens_per_pass": stats.tokens_per_step,
                         "predicted_speedup": spec.speculative_speedup(alpha, k, cost),
                         "speedup": plain_seconds / seconds, "speedup_cpu": plain_cpu / cpu})
    return {"rows": rows, "draft_cost": draft_cost, "new_tokens": args.spec_tokens}


# ---------------------------------------------------------------- group 3: the engine at growing batch sizes


def run_engine(model, tokenizer, args) -> dict:
    from course_lib.engine import LLMEngine
    from course_lib.sampling import SamplingParams
    from course_lib.speculative import SpeculativeConfig, crossover_batch_size

    workload = [tokenizer.apply_chat_template([{"role": "user", "content": f"Copy this text word for word: {s}"}])
                for s in SENTENCES]
    params = SamplingParams(temperature=0, max_tokens=args.engine_tokens)
    LLMEngine(model, tokenizer, num_blocks=32).generate(workload[:1], SamplingParams(max_tokens=2))
    rows = []
    for batch_size in args.batch_sizes:
        row = {"batch_size": batch_size, "plain": 0.0, "speculative": 0.0, "plain_cpu": 0.0, "speculative_cpu": 0.0}
        outputs = {}
        prompts = [workload[i % len(workload)] for i in range(batch_size)]
        # Plain and speculative alternate, best of two each: a neighbour's load hits both alike.
        for _ in range(2):
            for name, speculative in (("plain", None), ("speculative", SpeculativeConfig("ngram", 4))):
                log(f"  engine: batch {batch_size}, {name}")
                engine = LLMEngine(model, tokenizer, num_blocks=512, max_num_seqs=batch_size, speculative=speculative)
                outputs[name], seconds, cpu = timed(lambda: engine.generate(prompts, params))
                num_tokens = sum(len(o.token_ids) for o in outputs[name])
                row[name] = max(row[name], num_tokens / seconds)
                row[name + "_cpu"] = max(row[name + "_cpu"], num_tokens / cpu)
                if speculative is not None:
                    row["acceptance"] = engine.stats.acceptance_rate
        row["same_tokens"] = [o.token_ids for o in outputs["plain"]] == [o.token_ids for o in outputs["speculative"]]
        rows.append(row)
    sizes = [r["batch_size"] for r in rows]
    crossings = {}
    for suffix in ("", "_cpu"):
        crossings["crossover" + suffix] = crossover_batch_size(
            sizes, [r["plain" + suffix] for r in rows], [r["speculative" + suffix] for r in rows]) if len(rows) > 1 else None
    return {"rows": rows, **crossings, "max_tokens": args.engine_tokens}


# ---------------------------------------------------------------- report


def report(results: dict, machine: dict) -> str:
    lines = [f"machine: {machine['cpu']} ({machine['cpu_count']} cores, PyTorch CPU capability "
             f"{machine['cpu_capability']}), torch {machine['torch']} ({machine['torch_threads']} threads), "
             f"Python {machine['python']}, date {machine['date']}, commit {machine['commit']}, load average at "
             f"start {machine['load_average_at_start']}", ""]
    if "quantization" in results:
        q = results["quantization"]
        lines += [f"Quantization ({q['held_out_tokens']} held-out tokens, windows of 256; agreement over "
                  f"{q['agreement_positions']} positions; copy bandwidth {q['bandwidth_gb_s']:.1f} GB/s):", "",
                  "| weights | model MB | linear layers MB | perplexity | same greedy token | ms/token fused | "
                  "ms/token dequantize | bytes floor here (ms) | bytes floor H100 (us) |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for scheme, row in q["rows"].items():
            fused = "" if row["ms_fused"] is None else f"{row['ms_fused']:.1f}"
            dequantize = f"{row['ms_dequantize']:.1f}"
            lines.append(f"| {scheme} | {row['model_mb']:.1f} | {row['linear_mb']:.1f} | {row['perplexity']:.3f} | "
                         f"{100 * row['agreement']:.1f}% | {fused} | {dequantize} | {row['floor_ms']:.1f} | "
                         f"{row['h100_us']:.0f} |")
        kv = q["kv_bytes_per_token"]
        lines += ["", f"KV cache bytes per token: fp32 {kv['fp32']}, fp16 {kv['fp16']}, int8 {kv['int8']} "
                      f"(sequences of 2,048 tokens per GB: {1e9 / (kv['fp16'] * 2048):.1f} fp16, "
                      f"{1e9 / (kv['int8'] * 2048):.1f} int8); perplexity with an int8 KV cache: {q['kv_perplexity']:.3f}",
                  ""]
    if "speculative" in results:
        s = results["speculative"]
        lines += [f"Speculative decoding at batch 1 ({s['new_tokens']} new tokens per prompt, greedy; int4 draft step "
                  f"= {s['draft_cost']:.2f} fp32 target steps):", "",
                  "| task | drafter | acceptance | tokens/pass expected | tokens/pass measured | speedup predicted | "
                  "speedup (wall) | speedup (CPU time) | same tokens |", "|---|---|---:|---:|---:|---:|---:|---:|---|"]
        for row in s["rows"]:
            lines.append(f"| {row['task']} | {row['drafter']} | {100 * row['acceptance']:.1f}% | "
                         f"{row['expected_tokens_per_pass']:.2f} | {row['measured_tokens_per_pass']:.2f} | "
                         f"{row['predicted_speedup']:.2f}x | {row['speedup']:.2f}x | {row['speedup_cpu']:.2f}x | "
                         f"{row['same_tokens']} |")
        lines.append("")
    if "engine" in results:
        e = results["engine"]
        lines += [f"LLMEngine, copy-heavy workload ({e['max_tokens']} new tokens per request), plain vs "
                  "SpeculativeConfig('ngram', 4), best of two alternating runs:", "",
                  "| batch | plain tok/s | speculative tok/s | speedup | plain tok/CPU-s | speculative tok/CPU-s | "
                  "speedup (CPU time) | acceptance | same tokens |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
        for row in e["rows"]:
            lines.append(f"| {row['batch_size']} | {row['plain']:.1f} | {row['speculative']:.1f} | "
                         f"{row['speculative'] / row['plain']:.2f}x | {row['plain_cpu']:.1f} | "
                         f"{row['speculative_cpu']:.1f} | {row['speculative_cpu'] / row['plain_cpu']:.2f}x | "
                         f"{100 * (row['acceptance'] or 0):.1f}% | {row['same_tokens']} |")
        for suffix, label in (("", "wall clock"), ("_cpu", "CPU time")):
            crossing = e["crossover" + suffix]
            lines.append(f"lines cross ({label}): " + ("no crossing in this range" if crossing is None
                                                      else f"at batch {crossing:.1f}"))
    return "\n".join(lines)


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="course bench decoding", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny sizes, every code path")
    parser.add_argument("--groups", default=",".join(GROUPS), help=f"comma-separated subset of {','.join(GROUPS)}")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--out", default=None, help="write the results as JSON to this file")
    args = parser.parse_args(argv)
    groups = [g.strip() for g in args.groups.split(",") if g.strip()]
    if not groups or set(groups) - set(GROUPS):
        parser.error(f"--groups: choose from {', '.join(GROUPS)}")
    args.groups = groups
    if args.threads is not None and args.threads < 1:
        parser.error("--threads must be >= 1")
    sizes = dict(ppl_tokens=1024, num_questions=8, agreement_tokens=32, decode_steps=8, spec_tokens=32,
                 engine_tokens=24, batch_sizes=[1, 2, 4, 8, 16])
    if args.quick:
        sizes = dict(ppl_tokens=80, num_questions=2, agreement_tokens=4, decode_steps=1, spec_tokens=6,
                     engine_tokens=4, batch_sizes=[1, 2])
    for name, value in sizes.items():
        setattr(args, name, value)
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    from course_lib.model import load_smollm2

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    machine = machine_description()
    log("loading SmolLM2 ...")
    model, tokenizer = load_smollm2()
    runners = {"quantization": run_quantization, "speculative": run_speculative, "engine": run_engine}
    results = {}
    for group in args.groups:
        log(f"running {group} ...")
        start = time.perf_counter()
        results[group] = runners[group](model, tokenizer, args)
        results[group]["seconds"] = time.perf_counter() - start
    print(report(results, machine))
    if args.out:
        with open(args.out, "w") as out_file:
            json.dump({"machine": machine, "results": results}, out_file, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
