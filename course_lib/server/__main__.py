"""``python -m course_lib.server``: one server process (a replica, or ``course serve`` without a router)."""

from __future__ import annotations

import argparse
import os
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_lib.server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="smollm2", choices=["smollm2", "tiny"])
    parser.add_argument("--num-blocks", type=int, default=None, help="KV pool size in blocks (default: 512 MiB)")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=32)
    parser.add_argument("--max-num-batched-tokens", type=int, default=1024)
    parser.add_argument("--no-prefix-caching", action="store_true")
    parser.add_argument("--quantize", choices=["int8", "int4"], default=None,
                        help="weight-only quantized linear layers (Lab 0.4; default: the weights as read)")
    parser.add_argument("--speculative", choices=["ngram", "self"], default=None,
                        help="speculative decoding: ngram (prompt lookup) or self (an int4 copy drafts); default: off")
    parser.add_argument("--num-draft-tokens", type=int, default=4, help="tokens drafted per step with --speculative")
    parser.add_argument("--admission", action="store_true",
                        help="admission control with the course's reference policy (--max-waiting, --kv-budget-blocks)")
    parser.add_argument("--max-waiting", type=int, default=32)
    parser.add_argument("--kv-budget-blocks", type=int, default=None, help="default: the whole pool")
    parser.add_argument("--retry-after", type=int, default=1)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    threads = os.environ.get("COURSE_TORCH_THREADS")
    import torch

    if threads:
        torch.set_num_threads(int(threads))
    from course_lib.server.serve import serve_forever

    return serve_forever(args)


if __name__ == "__main__":
    sys.exit(main())
