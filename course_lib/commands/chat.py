"""``course chat``: a terminal chat with SmolLM2-135M-Instruct served by the course's own engine.

Each turn renders the whole conversation with the model's chat template (read from the GGUF file),
adds it to ``LLMEngine`` as one request and streams the answer token by token as ``engine.step()``
produces it. With prefix caching the earlier turns' KV blocks are reused, so a long conversation
does not pay its whole prefill again. The command reads plain lines, so it also works with piped
input: ``echo "What is the capital of France?" | course chat --temperature 0``.
"""

from __future__ import annotations

import argparse
import sys
import time

HELP = "Chat with SmolLM2 in the terminal through the course's own engine."
DESCRIPTION = """Chat with SmolLM2-135M-Instruct through course_lib.engine.LLMEngine, streaming tokens.

Type a message and press Enter. Commands:
  /reset   forget the conversation so far
  /quit    leave (so do Ctrl-D and Ctrl-C at the prompt)
Ctrl-C while the model is answering stops that answer. After each answer the time to first
token (TTFT) and the decode speed are printed on stderr.

--quantize int8|int4 serves int8 / int4 weight-only quantized linear layers; --speculative ngram|self
drafts --num-draft-tokens tokens per step (prompt lookup, or an int4 copy of the model) and verifies
them in one pass. The decode speed printed after each answer shows what they change on this machine.

Reads lines from stdin when it is not a terminal, e.g.
  echo "What is the capital of France?" | course chat --temperature 0"""

RESET_COMMAND = "/reset"
QUIT_COMMAND = "/quit"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--temperature", type=float, default=0.2, help="0 = greedy (default: 0.2)")
    parser.add_argument("--top-p", type=float, default=0.9, help="nucleus sampling, in (0, 1] (default: 0.9)")
    parser.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 = off (default)")
    parser.add_argument("--min-p", type=float, default=0.0, help="min-p filter in [0, 1]; 0 = off (default)")
    parser.add_argument("--seed", type=int, default=None, help="seed each answer's sampling (reproducible chat)")
    parser.add_argument("--max-tokens", type=int, default=512, help="longest answer in tokens (default: 512)")
    parser.add_argument("--quantize", choices=("int8", "int4"), default=None,
                        help="int8 / int4 weight-only quantized linear layers (default: fp32)")
    parser.add_argument("--speculative", choices=("ngram", "self"), default=None,
                        help="speculative decoding: 'ngram' (prompt lookup) or 'self' (an int4 copy drafts); default: off")
    parser.add_argument("--num-draft-tokens", type=int, default=4,
                        help="tokens drafted per step with --speculative (default: 4)")
    parser.add_argument(
        "--system", default=None,
        help="system prompt (default: the chat template's own, 'You are a helpful AI assistant named SmolLM...')",
    )


def sampling_params_from_args(args: argparse.Namespace):
    """The SamplingParams of every answer; raises ValueError/TypeError for bad option values."""
    from course_lib.sampling import SamplingParams

    return SamplingParams(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
        seed=args.seed, max_tokens=args.max_tokens,
    )


def speculative_config_from_args(args: argparse.Namespace):
    """The engine's SpeculativeConfig, or None without --speculative; raises ValueError for bad values."""
    if args.speculative is None:
        return None
    from course_lib.speculative import SpeculativeConfig

    return SpeculativeConfig(method=args.speculative, num_draft_tokens=args.num_draft_tokens)


def read_user_line(interactive: bool) -> str | None:
    """The next message, or None at end of input (Ctrl-D, Ctrl-C at the prompt, or the end of a pipe)."""
    try:
        if interactive:
            return input("you> ")
        line = sys.stdin.readline()
        return line.rstrip("\n") if line else None
    except (EOFError, KeyboardInterrupt):
        if interactive:
            print(file=sys.stderr)
        return None


class ChatSession:
    """One conversation: the message history and the engine that answers it.

    messages: the history as ``{"role": ..., "content": ...}`` dicts, starting with the system
    message when one was given.
    """

    def __init__(self, engine, tokenizer, params, system_prompt: str | None, max_context_tokens: int):
        self.engine = engine
        self.tokenizer = tokenizer
        self.params = params
        self.system_prompt = system_prompt
        self.max_context_tokens = max_context_tokens
        self.messages: list[dict[str, str]] = []
        self.reset()

    def reset(self) -> None:
        self.messages = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []

    def render_prompt(self) -> str:
        """The conversation in the chat template, ending with the assistant's header.

        Drops the oldest exchanges when the prompt plus a full-length answer would not fit the context.
        """
        while True:
            prompt = self.tokenizer.apply_chat_template(self.messages, add_generation_prompt=True)
            fits = len(self.tokenizer.encode(prompt)) + self.params.max_tokens <= self.max_context_tokens
            first_turn = 1 if self.messages and self.messages[0]["role"] == "system" else 0
            if fits or len(self.messages) - first_turn <= 1:
                return prompt
            del self.messages[first_turn:first_turn + 2]

    def answer(self, user_text: str, out=sys.stdout) -> dict:
        """Stream the answer to ``user_text`` to ``out``; return its timing.

        Returns {"ttft": seconds, "num_tokens": int, "decode_tokens_per_s": float | None,
        "interrupted": bool}. Ctrl-C aborts the request and forgets this exchange.
        """
        self.messages.append({"role": "user", "content": user_text})
        start = time.perf_counter()
        try:
            request_id = self.engine.add_request(self.render_prompt(), self.params)
        except ValueError:
            self.messages.pop()  # e.g. a single message longer than the context: forget it
            raise
        pieces: list[str] = []
        num_tokens = 0
        first_token_time = None
        interrupted = False
        try:
            finished = False
            while not finished and self.engine.has_unfinished():
                for output in self.engine.step():
                    if output.request_id != request_id:
                        continue
                    if output.new_token_ids and first_token_time is None:
                        first_token_time = time.perf_counter()
                    num_tokens += len(output.new_token_ids)
                    pieces.append(output.new_text)
                    out.write(output.new_text)
                    out.flush()
                    finished = output.finished
        except KeyboardInterrupt:
            self.engine.abort(request_id)
            interrupted = True
        finish_time = time.perf_counter()
        out.write("\n")
        out.flush()

        if interrupted:
            self.messages.pop()
        else:
            self.messages.append({"role": "assistant", "content": "".join(pieces).strip()})
        decode_time = finish_time - first_token_time if first_token_time is not None else 0.0
        return {
            "ttft": None if first_token_time is None else first_token_time - start,
            "num_tokens": num_tokens,
            "decode_tokens_per_s": (num_tokens - 1) / decode_time if num_tokens > 1 and decode_time > 0 else None,
            "interrupted": interrupted,
        }


def format_stats(stats: dict) -> str:
    parts = []
    if stats["ttft"] is not None:
        parts.append(f"TTFT {stats['ttft']:.2f} s")
    parts.append(f"{stats['num_tokens']} tokens")
    if stats["decode_tokens_per_s"] is not None:
        parts.append(f"{stats['decode_tokens_per_s']:.1f} tokens/s")
    if stats["interrupted"]:
        parts.append("interrupted")
    return "[" + ", ".join(parts) + "]"


def run(args: argparse.Namespace) -> int:
    try:
        params = sampling_params_from_args(args)
        speculative = speculative_config_from_args(args)
    except (TypeError, ValueError) as error:
        print(f"course chat: {error}", file=sys.stderr)
        return 2

    import torch

    from course_lib.engine import LLMEngine
    from course_lib.model import load_smollm2

    interactive = sys.stdin.isatty()
    print("loading SmolLM2-135M-Instruct" + (f" with {args.quantize} weights" if args.quantize else "") + " ...",
          file=sys.stderr, flush=True)
    model, tokenizer = load_smollm2(dtype=torch.float32, device="cpu")
    if args.quantize:
        from course_lib.quantization import quantize_model

        model = quantize_model(model, args.quantize)
    engine = LLMEngine(model, tokenizer, speculative=speculative)
    session = ChatSession(engine, tokenizer, params, args.system, model.config.max_position_embeddings)
    if interactive:
        print(f"{RESET_COMMAND} clears the conversation, {QUIT_COMMAND} or Ctrl-D leaves.", file=sys.stderr)

    while True:
        line = read_user_line(interactive)
        if line is None or line.strip() == QUIT_COMMAND:
            return 0
        text = line.strip()
        if not text:
            continue
        if text == RESET_COMMAND:
            session.reset()
            print("(conversation cleared)", file=sys.stderr)
            continue
        try:
            stats = session.answer(text)
        except ValueError as error:
            print(f"course chat: {error}", file=sys.stderr)
            continue
        print(format_stats(stats), file=sys.stderr, flush=True)
