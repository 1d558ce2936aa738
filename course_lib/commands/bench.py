"""``course bench NAME [ARGS...]``: run one of the repository's benchmark scripts.

The scripts live in ``benchmarks/`` at the repository root, not inside the package: they are
experiments with recorded results (benchmarks/RESULTS.md), not library code. This command finds
them next to the installed ``course_lib`` (an editable install from a checkout), loads the script
as a module and calls its ``main(argv)``, passing every argument after NAME through unchanged.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import course_lib

# NAME -> (script in benchmarks/, what it measures)
BENCHMARKS = {
    "engine": ("engine_vs_hf.py", "our LLMEngine against transformers generate / generate_batch (CPU)"),
    "kernel": ("paged_attention.py", "the Triton paged-attention decode kernel against its torch reference"),
    "bpe": ("bpe.py", "our BPE tokenizer against Hugging Face tokenizers"),
    "decoding": ("faster_decoding.py", "int8/int4 weights and speculative decoding on SmolLM2 (Lab 0.4)"),
    "view": ("engine_view.py", "what the live engine view of course serve costs the engine's throughput"),
}

HELP = "Run a benchmark (engine, kernel, bpe, decoding, view) and print its table."
DESCRIPTION = (
    "Run a benchmark script from the repository's benchmarks/ folder.\n\nbenchmarks:\n"
    + "\n".join(f"  {name:<8} benchmarks/{script:<20} {what}" for name, (script, what) in BENCHMARKS.items())
    + "\n\nArguments after NAME go to the script: `course bench engine --help` shows its options."
)


class BenchmarkNotFound(FileNotFoundError):
    """The benchmark script (or its ``main``) is not where ``course bench`` looks for it."""


def benchmarks_dir() -> Path:
    """``benchmarks/`` of the checkout that ``course_lib`` is installed from (editable install)."""
    return Path(course_lib.__file__).resolve().parent.parent / "benchmarks"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=sorted(BENCHMARKS), metavar="NAME", help="one of: " + ", ".join(BENCHMARKS))
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="passed to the benchmark script")


def load_benchmark(name: str):
    """The benchmark script for ``name`` imported as a module (it must define ``main(argv) -> int``)."""
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    folder = benchmarks_dir()
    if not folder.is_dir():
        raise BenchmarkNotFound(
            f"{folder} does not exist. The benchmark scripts live in the repository, not in the installed "
            "package: run `course bench` from a checkout installed with `pip install -e .`."
        )
    script = folder / BENCHMARKS[name][0]
    if not script.is_file():
        raise BenchmarkNotFound(f"{script} not found (benchmark {name!r} is not in this checkout yet).")
    spec = importlib.util.spec_from_file_location(f"course_benchmarks.{script.stem}", script)
    module = importlib.util.module_from_spec(spec)
    # Registered before running it, as an import would be: dataclasses look their module up there.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    if not callable(getattr(module, "main", None)):
        raise BenchmarkNotFound(f"{script} defines no main(argv) function")
    return module


def run(args: argparse.Namespace) -> int:
    try:
        module = load_benchmark(args.name)
    except BenchmarkNotFound as error:
        print(f"course bench: {error}", file=sys.stderr)
        return 2
    return int(module.main(list(args.args)) or 0)
