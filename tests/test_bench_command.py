"""Tests of `course bench`: finding benchmarks/, passing arguments through, clear errors."""

from __future__ import annotations

import pytest

from course_lib import cli
from course_lib.commands import bench


def test_help_lists_the_benchmarks(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for name, (script, _) in bench.BENCHMARKS.items():
        assert name in help_text and script in help_text


def test_arguments_after_the_name_reach_the_script(tmp_path, monkeypatch):
    (tmp_path / "engine_vs_hf.py").write_text(
        "import json, pathlib\n"
        "def main(argv):\n"
        "    pathlib.Path(__file__).with_name('argv.json').write_text(json.dumps(argv))\n"
        "    return 3\n"
    )
    monkeypatch.setattr(bench, "benchmarks_dir", lambda: tmp_path)
    assert cli.main(["bench", "engine", "--quick", "--help", "-x", "positional"]) == 3
    assert (tmp_path / "argv.json").read_text() == '["--quick", "--help", "-x", "positional"]'


def test_engine_help_comes_from_the_real_script(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "engine", "--help"])
    assert exit_info.value.code == 0
    assert "--num-requests" in capsys.readouterr().out


def test_missing_benchmarks_folder_is_a_clear_error(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "benchmarks_dir", lambda: tmp_path / "not-a-checkout")
    assert cli.main(["bench", "engine"]) == 2
    assert "pip install -e ." in capsys.readouterr().err


def test_missing_script_and_missing_main(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "benchmarks_dir", lambda: tmp_path)
    assert cli.main(["bench", "bpe"]) == 2
    assert "bpe.py not found" in capsys.readouterr().err
    (tmp_path / "bpe.py").write_text("x = 1\n")
    assert cli.main(["bench", "bpe"]) == 2
    assert "no main(argv)" in capsys.readouterr().err


def test_unknown_name_is_rejected(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "nope"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
