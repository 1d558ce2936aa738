"""Tests of `course chat`: the session logic with a fake engine (fast) and the real model through a pipe (slow)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from course_lib import cli
from course_lib.commands.chat import ChatSession, format_stats
from course_lib.sampling import SamplingParams


class FakeTokenizer:
    """Renders messages as 'role: content' lines; one token per character."""

    def apply_chat_template(self, messages, add_generation_prompt=True):
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages)
        return text + ("assistant: " if add_generation_prompt else "")

    def encode(self, text):
        return [ord(c) for c in text]


class FakeEngine:
    """Answers every prompt with the words of ``reply``, one word per step."""

    def __init__(self, reply="Paris is the capital.", interrupt_after=None):
        self.words = reply.split(" ")
        self.interrupt_after = interrupt_after
        self.prompts, self.aborted = [], []
        self.pending = []

    def add_request(self, prompt, params, request_id=None, priority=0):
        self.prompts.append(prompt)
        self.pending = [(i, w if i == 0 else " " + w) for i, w in enumerate(self.words)]
        return "req"

    def has_unfinished(self):
        return bool(self.pending)

    def step(self):
        index, text = self.pending.pop(0)
        if self.interrupt_after is not None and index == self.interrupt_after:
            raise KeyboardInterrupt
        # A batch neighbour's output must be ignored by the session.
        neighbour = SimpleNamespace(request_id="other", new_token_ids=[9], new_text="XX", finished=False)
        mine = SimpleNamespace(request_id="req", new_token_ids=[index], new_text=text, finished=not self.pending)
        return [neighbour, mine]

    def abort(self, request_id):
        self.aborted.append(request_id)
        self.pending = []


def make_session(engine, system=None, max_context_tokens=10_000, max_tokens=10):
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    return ChatSession(engine, FakeTokenizer(), params, system, max_context_tokens)


def test_answer_streams_only_its_own_tokens_and_keeps_history():
    engine = FakeEngine()
    session = make_session(engine, system="Be brief.")
    out = io.StringIO()
    stats = session.answer("Capital of France?", out=out)
    assert out.getvalue() == "Paris is the capital.\n"
    assert stats["num_tokens"] == 4 and not stats["interrupted"] and stats["ttft"] >= 0
    assert engine.prompts[0] == "system: Be brief.\nuser: Capital of France?\nassistant: "
    session.answer("And Italy?", out=io.StringIO())
    assert engine.prompts[1].endswith("user: Capital of France?\nassistant: Paris is the capital.\nuser: And Italy?\nassistant: ")
    session.reset()
    assert session.messages == [{"role": "system", "content": "Be brief."}]


def test_ctrl_c_aborts_the_answer_and_forgets_the_exchange():
    engine = FakeEngine(interrupt_after=2)
    session = make_session(engine)
    stats = session.answer("Hello?", out=io.StringIO())
    assert stats["interrupted"] and engine.aborted == ["req"]
    assert session.messages == []
    assert "interrupted" in format_stats(stats)


def test_old_exchanges_are_dropped_when_the_context_is_full():
    engine = FakeEngine(reply="x" * 40)
    session = make_session(engine, system="S", max_context_tokens=150, max_tokens=10)
    for question in ("first question", "second question", "third question"):
        session.answer(question, out=io.StringIO())
    last_prompt = engine.prompts[-1]
    assert len(last_prompt) + 10 <= 150
    assert last_prompt.startswith("system: S\n") and "third question" in last_prompt
    assert "first question" not in last_prompt


def test_bad_sampling_option_fails_before_loading_the_model(capsys):
    assert cli.main(["chat", "--top-p", "1.5"]) == 2
    assert "top_p" in capsys.readouterr().err


@pytest.mark.slow
def test_chat_through_a_pipe_answers_paris():
    session_input = "What is the capital of France?\n/reset\n/quit\nthis line is never read\n"
    result = subprocess.run(
        [sys.executable, "-m", "course_lib.cli", "chat", "--temperature", "0", "--max-tokens", "24"],
        input=session_input, capture_output=True, text=True, timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout
    assert "TTFT" in result.stderr and "tokens/s" in result.stderr
    assert "(conversation cleared)" in result.stderr
    assert result.stdout.count("\n") == 1  # one answer: /quit stopped reading before the last line
