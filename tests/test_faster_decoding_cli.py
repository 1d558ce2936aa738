"""`course chat` and `course bench` gain Lab 0.4's options: --quantize and --speculative (--num-draft-tokens)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from course_lib import cli
from course_lib.commands import bench, chat


def test_chat_help_lists_quantize_and_speculative(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["chat", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for option in ("--quantize", "--speculative", "--num-draft-tokens"):
        assert option in text


def test_chat_rejects_bad_values_before_loading_the_model(capsys):
    assert cli.main(["chat", "--speculative", "ngram", "--num-draft-tokens", "0"]) == 2
    assert "num_draft_tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["chat", "--quantize", "int3"])
    assert "invalid choice" in capsys.readouterr().err


def test_speculative_config_from_args():
    parser = cli.build_parser("chat")
    namespace = parser.parse_args(["chat", "--speculative", "self", "--num-draft-tokens", "3"])
    config = chat.speculative_config_from_args(namespace)
    assert (config.method, config.num_draft_tokens) == ("self", 3)
    assert chat.speculative_config_from_args(parser.parse_args(["chat"])) is None


def test_bench_knows_the_decoding_benchmark_and_engine_flags(capsys):
    assert "decoding" in bench.BENCHMARKS
    module = bench.load_benchmark("engine")
    args = module.parse_args(["--quantize", "int8", "--speculative", "ngram", "--num-draft-tokens", "2"])
    assert (args.quantize, args.speculative, args.num_draft_tokens) == ("int8", "ngram", 2)
    with pytest.raises(SystemExit):
        module.parse_args(["--speculative", "ngram", "--num-draft-tokens", "0"])
    decoding = bench.load_benchmark("decoding")
    args = decoding.parse_args(["--quick", "--groups", "speculative,engine"])
    assert args.groups == ["speculative", "engine"] and args.spec_tokens < 10
    with pytest.raises(SystemExit):
        decoding.parse_args(["--groups", "nothing"])


@pytest.mark.slow
def test_chat_with_int8_weights_and_ngram_speculation_answers_paris():
    result = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "chat", "--temperature", "0", "--max-tokens", "12",
         "--quantize", "int8", "--speculative", "ngram", "--num-draft-tokens", "3"],
        input="What is the capital of France?\n", capture_output=True, text=True, timeout=900,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    assert "int8" in result.stderr and "tokens/s" in result.stderr
