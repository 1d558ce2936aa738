"""Benchmark: BPE training (incremental vs naive full recount) and encoding (ours vs HF tokenizers).

Training. Both trainers learn merges up to ``--vocab-size`` ids (default 4096) from the same text
and must learn the same merges (asserted). The naive trainer (``train_bpe_naive``) recounts every
pair of every word before each merge; on the whole corpus it would take far too long, so it runs
on growing prefixes (``--naive-kb``), and the incremental trainer (``train_bpe``) runs on the same
prefixes, which gives the speed ratio on equal inputs, and then on growing prefixes up to the whole
corpus, which shows how its time grows with the corpus size (seconds per MB in the last column).
Both times include pre-tokenization and word counting.

Times are CPU seconds of this process (``time.process_time``): each measured call is
single-threaded, and CPU time stays comparable when other jobs share the machine's cores.

Encoding. ``BPETokenizer.from_gguf()`` against Hugging Face ``tokenizers`` (the Rust tokenizer
transformers builds from the same GGUF file), single-threaded (``TOKENIZERS_PARALLELISM=false``),
on the same text, with identical ids asserted: once as one long string, once paragraph by
paragraph (text split at blank lines, one call per paragraph). Each side encodes twice: the first
("cold") call fills the per-word caches, the second ("warm") reuses them. Throughput is MB of
UTF-8 text per second; the ratio is ours / HF (above 1 means ours is faster).

Corpus: ``course_lib.corpus.load_corpus`` ("python-docs": the Python 3.11 documentation sources
from Debian's python3.11-doc, about 11 MB; "stdlib-docstrings" when that is not installed).

Run: ``course bench bpe`` (or ``python benchmarks/bpe.py``); ``--quick`` for a smoke run of a few
seconds; ``--out FILE`` writes the results as a markdown snippet. The full run takes 10-20 minutes
on 2 CPU cores, almost all of it in the naive trainer.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time
import warnings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

MB = 1_000_000
TARGET_TRAINING_SPEEDUP = 20.0  # incremental >= 20x naive on equal inputs
TARGET_ENCODE_RATIO = 0.2  # ours >= 0.2x HF tokenizers' throughput


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bpe.py",
        description="BPE training (incremental vs naive) and encoding throughput (ours vs HF tokenizers).",
    )
    parser.add_argument(
        "--corpus",
        choices=("python-docs", "stdlib-docstrings"),
        default="python-docs",
        help="text to train and encode on (default: python-docs, needs apt-get install python3.11-doc)",
    )
    parser.add_argument(
        "--max-mb", type=float, default=None, help="use at most this many MB of the corpus (default: all)"
    )
    parser.add_argument(
        "--vocab-size", type=int, default=4096, help="ids after training, bytes included (default: 4096)"
    )
    parser.add_argument(
        "--naive-kb",
        default="128,256,512,1024",
        help="comma-separated corpus prefixes (kB) on which both trainers run (default: 128,256,512,1024)",
    )
    parser.add_argument("--quick", action="store_true", help="smoke run: 0.5 MB, vocab 512, naive on 32 and 64 kB")
    parser.add_argument("--out", default=None, help="also write the results as a markdown snippet to this file")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_mb, args.vocab_size, args.naive_kb = 0.5, 512, "32,64"
    try:
        args.naive_sizes = [int(float(kb) * 1000) for kb in args.naive_kb.split(",") if kb.strip()]
    except ValueError:
        parser.error(f"--naive-kb must be comma-separated numbers, got {args.naive_kb!r}")
    if args.vocab_size < 257:
        parser.error(f"--vocab-size must be >= 257 (256 byte ids plus at least one merge), got {args.vocab_size}")
    if args.max_mb is not None and args.max_mb <= 0:
        parser.error(f"--max-mb must be > 0, got {args.max_mb}")
    return args


def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            cpu = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}"


def timed(function, *args, **kwargs):
    """(result, seconds of CPU time this process spent in the call).

    CPU time, not wall-clock time: every measured call runs on one thread, and on a machine whose
    cores are shared with other jobs, CPU time is what stays comparable between runs.
    """
    start = time.process_time()
    result = function(*args, **kwargs)
    return result, time.process_time() - start


def utf8_prefix(text: str, num_bytes: int) -> str:
    return text.encode("utf-8")[:num_bytes].decode("utf-8", errors="ignore")


def megabytes(text: str) -> float:
    return len(text.encode("utf-8")) / MB


# ---------------------------------------------------------------------------------------- training


def benchmark_training(text: str, vocab_size: int, naive_sizes: list[int]) -> tuple[list[dict], list[dict]]:
    """Rows of (size, naive s, incremental s) on the naive prefixes, and incremental-only rows."""
    from course_lib.tokenizer import train_bpe, train_bpe_naive

    corpus_bytes = len(text.encode("utf-8"))
    train_bpe("warm-up: imports and regex compilation are not part of the timings", 260)
    equal_rows = []
    for size in [size for size in naive_sizes if size < corpus_bytes]:
        prefix = utf8_prefix(text, size)
        fast_merges, fast_s = timed(train_bpe, prefix, vocab_size)
        naive_merges, naive_s = timed(train_bpe_naive, prefix, vocab_size)
        if fast_merges != naive_merges:
            raise AssertionError(f"incremental and naive trainers learned different merges on {size} bytes")
        row = {"mb": megabytes(prefix), "merges": len(fast_merges), "naive_s": naive_s, "incremental_s": fast_s}
        equal_rows.append(row)
        print(
            f"  {row['mb']:6.3f} MB  naive {naive_s:8.2f} s  incremental {fast_s:6.2f} s  "
            f"speedup {naive_s / fast_s:6.1f}x",
            flush=True,
        )
    growth_rows = []
    sizes = sorted({size for size in (1 * MB, 2 * MB, 4 * MB, 8 * MB) if size < corpus_bytes} | {corpus_bytes})
    for size in sizes:
        prefix = utf8_prefix(text, size)
        merges, fast_s = timed(train_bpe, prefix, vocab_size)
        row = {"mb": megabytes(prefix), "merges": len(merges), "incremental_s": fast_s}
        growth_rows.append(row)
        print(f"  {row['mb']:6.3f} MB  incremental {fast_s:6.2f} s  ({fast_s / row['mb']:.2f} s/MB)", flush=True)
    return equal_rows, growth_rows


# ---------------------------------------------------------------------------------------- encoding


def load_hf_tokenizer():
    """The Rust ``tokenizers.Tokenizer`` that transformers builds from the GGUF file."""
    from transformers import AutoTokenizer

    from course_lib.gguf_file import gguf_path

    path = gguf_path()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name).backend_tokenizer


def benchmark_encoding(text: str) -> tuple[dict, list[dict]]:
    from course_lib.gguf_file import read_tokenizer_metadata
    from course_lib.tokenizer import BPETokenizer

    _, metadata_s = timed(read_tokenizer_metadata)
    _, construction_s = timed(BPETokenizer.from_gguf)
    setup = {"metadata_s": metadata_s, "from_gguf_s": construction_s}
    hf = load_hf_tokenizer()

    paragraphs = [paragraph for paragraph in text.split("\n\n") if paragraph]
    workloads = {
        "one string": (lambda tok: tok.encode(text), lambda: hf.encode(text, add_special_tokens=False).ids),
        f"{len(paragraphs)} paragraphs": (
            lambda tok: [tok.encode(paragraph) for paragraph in paragraphs],
            lambda: [hf.encode(paragraph, add_special_tokens=False).ids for paragraph in paragraphs],
        ),
    }
    text_mb = megabytes(text)
    rows = []
    for name, (encode_ours, encode_hf) in workloads.items():
        ours = BPETokenizer.from_gguf()  # a fresh, empty word cache
        # HF keeps its own word cache across calls: clear it too (tokenizers >= 0.15 exposes it).
        if hasattr(hf.model, "_clear_cache"):
            hf.model._clear_cache()
        ours_ids, ours_cold = timed(encode_ours, ours)
        hf_ids, hf_cold = timed(encode_hf)
        _, ours_warm = timed(encode_ours, ours)
        _, hf_warm = timed(encode_hf)
        if ours_ids != hf_ids:
            raise AssertionError(f"ids differ from HF tokenizers ({name})")
        num_tokens = len(ours_ids) if name == "one string" else sum(map(len, ours_ids))
        row = {
            "workload": name,
            "tokens": num_tokens,
            "ours_cold": text_mb / ours_cold,
            "hf_cold": text_mb / hf_cold,
            "ours_warm": text_mb / ours_warm,
            "hf_warm": text_mb / hf_warm,
        }
        rows.append(row)
        print(
            f"  {name:<20} cold: ours {row['ours_cold']:5.2f} MB/s, HF {row['hf_cold']:5.2f} MB/s "
            f"({row['ours_cold'] / row['hf_cold']:.2f}x)   warm: ours {row['ours_warm']:5.2f} MB/s, "
            f"HF {row['hf_warm']:5.2f} MB/s ({row['ours_warm'] / row['hf_warm']:.2f}x)",
            flush=True,
        )
    return setup, rows


# ---------------------------------------------------------------------------------------- report


def markdown_report(args, corpus_mb, equal_rows, growth_rows, setup, encode_rows) -> str:
    lines = [
        "## BPE tokenizer",
        "",
        f"Machine: {machine_description()}. Date: {datetime.date.today().isoformat()}.",
        f"Command: `python benchmarks/bpe.py {' '.join(args.argv)}`".rstrip() + ".",
        f"Corpus: `{args.corpus}`, {corpus_mb:.2f} MB. Training to {args.vocab_size} ids "
        f"({args.vocab_size - 256} merges); times are CPU seconds of the benchmark process and include "
        "pre-tokenization and word counting.",
        "",
        "Training, both trainers on the same prefixes (identical merges asserted):",
        "",
        "| corpus MB | merges | naive s | incremental s | speedup |",
        "| ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in equal_rows:
        lines.append(
            f"| {row['mb']:.3f} | {row['merges']} | {row['naive_s']:.2f} | {row['incremental_s']:.2f} | "
            f"{row['naive_s'] / row['incremental_s']:.1f}x |"
        )
    lines += [
        "",
        "Incremental trainer on growing prefixes:",
        "",
        "| corpus MB | merges | incremental s | s per MB |",
        "| ---: | ---: | ---: | ---: |",
    ]
    for row in growth_rows:
        seconds_per_mb = row["incremental_s"] / row["mb"]
        lines.append(f"| {row['mb']:.2f} | {row['merges']} | {row['incremental_s']:.2f} | {seconds_per_mb:.2f} |")
    lines += [
        "",
        f"Encoding {corpus_mb:.2f} MB with SmolLM2's tokenizer, single-threaded, identical ids asserted "
        f"(`BPETokenizer.from_gguf()` builds in {setup['from_gguf_s']:.2f} s once the GGUF metadata is read; "
        f"reading it took {setup['metadata_s']:.2f} s). MB/s of UTF-8 text:",
        "",
        "| workload | tokens | ours cold | HF cold | ratio cold | ours warm | HF warm | ratio warm |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in encode_rows:
        lines.append(
            f"| {row['workload']} | {row['tokens']} | {row['ours_cold']:.2f} | {row['hf_cold']:.2f} | "
            f"{row['ours_cold'] / row['hf_cold']:.2f}x | {row['ours_warm']:.2f} | {row['hf_warm']:.2f} | "
            f"{row['ours_warm'] / row['hf_warm']:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    args.argv = argv
    from course_lib.corpus import CorpusMissing, load_corpus

    max_bytes = None if args.max_mb is None else int(args.max_mb * MB)
    try:
        text = load_corpus(args.corpus, max_bytes=max_bytes)
    except CorpusMissing as error:
        print(f"bpe.py: {error}\n(or run with --corpus stdlib-docstrings)", file=sys.stderr)
        return 2
    corpus_mb = megabytes(text)
    print(f"corpus {args.corpus}: {corpus_mb:.2f} MB; machine: {machine_description()}", flush=True)

    print(f"training to {args.vocab_size} ids:", flush=True)
    equal_rows, growth_rows = benchmark_training(text, args.vocab_size, args.naive_sizes)
    print("encoding:", flush=True)
    setup, encode_rows = benchmark_encoding(text)

    report = markdown_report(args, corpus_mb, equal_rows, growth_rows, setup, encode_rows)
    print()
    print(report)
    if args.out:
        with open(args.out, "w") as out:
            out.write(report)

    if args.quick:
        print("quick run: the targets (training >= 20x, encoding >= 0.2x) are for the full run")
        return 0
    speedups = [row["naive_s"] / row["incremental_s"] for row in equal_rows]
    ratios = [row["ours_warm"] / row["hf_warm"] for row in encode_rows]
    if speedups and min(speedups) < TARGET_TRAINING_SPEEDUP:
        print(f"note: training speedup {min(speedups):.1f}x is below the {TARGET_TRAINING_SPEEDUP:.0f}x target")
    if min(ratios) < TARGET_ENCODE_RATIO:
        print(f"note: encoding ratio {min(ratios):.2f}x is below the {TARGET_ENCODE_RATIO}x target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
