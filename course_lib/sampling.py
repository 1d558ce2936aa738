"""Turning logits into the next token: temperature, top-k, top-p (nucleus), min-p and seeds.

A model step returns one row of logits per running sequence, ``[num_seqs, vocab]``. Each row belongs
to a different request with its own ``SamplingParams``, so every filter here takes *per-row*
parameters and works on the whole batch at once.

The pipeline for one row, in this order (the order of Hugging Face's logits warpers and of vLLM's
original sampler):

1. ``temperature == 0``: greedy, take the argmax of the raw logits and stop here.
2. ``apply_temperature``: divide the logits by the temperature (< 1 sharpens, > 1 flattens).
3. ``top_k_filter``: keep the k highest logits.
4. ``top_p_filter``: keep the smallest set of most likely tokens whose probability reaches top_p,
   measured on the distribution that top-k left (so top-p sees renormalized probabilities).
5. ``min_p_filter``: keep tokens at least ``min_p`` times as likely as the most likely one.
6. softmax over what is left, then one ``torch.multinomial`` draw with the request's own generator.

Order matters only where a filter looks at *renormalized* probabilities: top-p after top-k keeps
fewer tokens than top-p alone. min-p compares each probability with the largest one, a ratio that
renormalizing does not change, and the most likely token survives every filter, so min-p gives the
same set wherever it sits.

Filtered entries are set to ``-inf``; a softmax turns them into probability exactly 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from course_lib.exercises import exercise

# Temperatures below this count as greedy. Dividing logits by a tiny positive number overflows fp32
# to inf, and the resulting distribution is the argmax anyway (vLLM uses the same cut-off).
GREEDY_TEMPERATURE = 1e-5

# torch.Generator.manual_seed takes any 64-bit unsigned value.
MAX_SEED = 2**64 - 1


def _is_int(value) -> bool:
    # bool is a subclass of int, but SamplingParams(top_k=True) is a mistake, not a request.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class SamplingParams:
    """How one request chooses its tokens and when it stops.

    temperature: >= 0. 0 means greedy (argmax); so does anything below 1e-5 (see GREEDY_TEMPERATURE).
    top_k: >= 0 integer; 0 turns top-k off. -1 is accepted as "off" too (vLLM's old spelling) and is
        stored as 0. A k larger than the vocabulary keeps everything.
    top_p: in (0, 1]; 1 turns top-p off.
    min_p: in [0, 1]; 0 turns min-p off.
    max_tokens: >= 1, the most tokens to generate.
    seed: None (use the process-wide generator) or an integer in [0, 2**64 - 1]. A seeded request
        gets its own torch.Generator, so its tokens do not depend on the rest of the batch.
    stop: strings that end generation when they appear in the output text; a single string or any
        sequence of non-empty strings, stored as a tuple.
    stop_token_ids: token ids (>= 0) that end generation, stored as a tuple.
    ignore_eos: keep generating past the end-of-sequence token (benchmarks use it to fix the length).

    Bad values raise ValueError (wrong range) or TypeError (wrong type) naming the field.
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    max_tokens: int = 16
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self):
        self._check_number("temperature", self.temperature)
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}")

        if not _is_int(self.top_k):
            raise TypeError(f"top_k must be an int (0 or -1 = off), got {type(self.top_k).__name__}")
        if self.top_k < -1:
            raise ValueError(f"top_k must be >= 0 (0 or -1 = off), got {self.top_k}")
        if self.top_k == -1:
            object.__setattr__(self, "top_k", 0)

        self._check_number("top_p", self.top_p)
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {self.top_p!r}")

        self._check_number("min_p", self.min_p)
        if not (0 <= self.min_p <= 1):
            raise ValueError(f"min_p must be in [0, 1] (0 = off), got {self.min_p!r}")

        if not _is_int(self.max_tokens):
            raise TypeError(f"max_tokens must be an int >= 1, got {type(self.max_tokens).__name__}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")

        if self.seed is not None:
            if not _is_int(self.seed):
                raise TypeError(f"seed must be None or an int, got {type(self.seed).__name__}")
            if not (0 <= self.seed <= MAX_SEED):
                raise ValueError(f"seed must be in [0, 2**64 - 1], got {self.seed}")

        object.__setattr__(self, "stop", self._normalize_stop(self.stop))
        object.__setattr__(self, "stop_token_ids", self._normalize_stop_token_ids(self.stop_token_ids))

        if not isinstance(self.ignore_eos, bool):
            raise TypeError(f"ignore_eos must be a bool, got {type(self.ignore_eos).__name__}")

    @staticmethod
    def _check_number(name: str, value) -> None:
        if not _is_number(value):
            raise TypeError(f"{name} must be a number, got {type(value).__name__}")

    @staticmethod
    def _normalize_stop(stop) -> tuple[str, ...]:
        if isinstance(stop, str):
            stop = (stop,)
        if not isinstance(stop, Sequence):
            raise TypeError(f"stop must be a str or a sequence of str, got {type(stop).__name__}")
        for text in stop:
            if not isinstance(text, str):
                raise TypeError(f"stop must contain only str, got {type(text).__name__}")
            if not text:
                raise ValueError("stop strings must be non-empty (an empty string would stop at once)")
        return tuple(stop)

    @staticmethod
    def _normalize_stop_token_ids(stop_token_ids) -> tuple[int, ...]:
        if not isinstance(stop_token_ids, Sequence) or isinstance(stop_token_ids, str):
            raise TypeError(f"stop_token_ids must be a sequence of int, got {type(stop_token_ids).__name__}")
        for token_id in stop_token_ids:
            if not _is_int(token_id):
                raise TypeError(f"stop_token_ids must contain only int, got {type(token_id).__name__}")
            if token_id < 0:
                raise ValueError(f"stop_token_ids must be >= 0, got {token_id}")
        return tuple(stop_token_ids)

    @property
    def is_greedy(self) -> bool:
        """True when this request takes the argmax instead of sampling."""
        return self.temperature < GREEDY_TEMPERATURE


def make_generator(seed: int | None, device: str | torch.device = "cpu") -> torch.Generator | None:
    """A torch.Generator seeded with ``seed`` on ``device``, or None (the default generator) for no seed."""
    if seed is None:
        return None
    if not _is_int(seed) or not (0 <= seed <= MAX_SEED):
        raise ValueError(f"seed must be None or an int in [0, 2**64 - 1], got {seed!r}")
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def _per_row(values, num_seqs: int, name: str, dtype: torch.dtype, device) -> torch.Tensor:
    """``values`` (a number, a sequence or a tensor) as a 1-D tensor of length ``num_seqs``."""
    tensor = torch.as_tensor(values, dtype=dtype, device=device)
    if tensor.dim() == 0:
        tensor = tensor.expand(num_seqs)
    if tensor.shape != (num_seqs,):
        raise ValueError(f"{name} must have one value per row ({num_seqs}), got shape {tuple(tensor.shape)}")
    return tensor


def _check_logits(logits: torch.Tensor) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        raise ValueError("logits must be a 2-D tensor [num_seqs, vocab]")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {logits.dtype}")


@exercise("lab01-text-to-tensors", "05_pipeline", "temperature_top_k")
def apply_temperature(logits: torch.Tensor, temperature) -> torch.Tensor:
    """Logits divided row by row by the temperature.

    logits: ``[num_seqs, vocab]`` float. temperature: a number or one value per row, each > 0
    (greedy rows, temperature 0, never reach this function: ``sample`` takes their argmax first).
    Returns a new ``[num_seqs, vocab]`` tensor; ``softmax(logits / T)`` is the tempered distribution.
    """
    _check_logits(logits)
    temperature = _per_row(temperature, logits.shape[0], "temperature", logits.dtype, logits.device)
    if not bool((temperature > 0).all()):
        raise ValueError("temperature must be > 0 in apply_temperature (temperature 0 means greedy: take the argmax)")
    return logits / temperature.unsqueeze(1)


@exercise("lab01-text-to-tensors", "05_pipeline", "temperature_top_k")
def top_k_filter(logits: torch.Tensor, top_k) -> torch.Tensor:
    """Keep, in each row, the tokens whose logit is at least the k-th largest; the rest become -inf.

    logits: ``[num_seqs, vocab]`` float. top_k: an int or one int per row; 0 (or -1) leaves the row
    unchanged, and so does any k >= vocab.
    Ties: every token equal to the k-th largest logit is kept, so a row can keep more than k tokens
    when several share the boundary value (the rule of Hugging Face and vLLM; it does not depend on
    token order). Returns a new ``[num_seqs, vocab]`` tensor.
    """
    _check_logits(logits)
    num_seqs, vocab_size = logits.shape
    top_k = _per_row(top_k, num_seqs, "top_k", torch.long, logits.device)
    if bool((top_k < -1).any()):
        raise ValueError("top_k must be >= 0 (0 or -1 = off)")
    filtered = logits.clone()
    rows = ((top_k > 0) & (top_k < vocab_size)).nonzero().squeeze(1)
    if rows.numel() == 0:
        return filtered
    k = top_k[rows]
    # One topk call for all rows with the largest k; each row then reads its own k-th value.
    largest = torch.topk(logits[rows], int(k.max()), dim=1).values  # [len(rows), max_k], descending
    kth_largest = largest.gather(1, (k - 1).unsqueeze(1))  # [len(rows), 1]
    below = logits[rows] < kth_largest
    filtered[rows] = logits[rows].masked_fill(below, float("-inf"))
    return filtered


@exercise("lab01-text-to-tensors", "05_pipeline", "top_p")
def top_p_filter(logits: torch.Tensor, top_p) -> torch.Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probability sum reaches top_p.

    logits: ``[num_seqs, vocab]`` float (entries already -inf count as probability 0). top_p: a number
    or one value per row, each in (0, 1]; 1 leaves the row unchanged.
    Rule: sort the row's probabilities in decreasing order and keep a token when the probability of
    the tokens *before* it sums to less than top_p. The most likely token is always kept (nothing
    comes before it). Ties: tokens with equal probability are ordered by token id (a stable sort), so
    the kept set is unique; for uniform probabilities over 4 tokens and top_p=0.5 it is the 2 lowest
    ids. The comparison happens in the logits' dtype, so a boundary that falls exactly on a rounded
    sum can go either way by one token. Returns a new ``[num_seqs, vocab]`` tensor.
    """
    _check_logits(logits)
    num_seqs = logits.shape[0]
    top_p = _per_row(top_p, num_seqs, "top_p", logits.dtype, logits.device)
    if not bool(((top_p > 0) & (top_p <= 1)).all()):
        raise ValueError("top_p must be in (0, 1] (1 = off)")
    filtered = logits.clone()
    # Rows with top_p == 1 skip the sort: float rounding of the cumulative sum could otherwise drop
    # tokens of tiny probability from a row that asked for no filtering.
    rows = (top_p < 1).nonzero().squeeze(1)
    if rows.numel() == 0:
        return filtered
    probs = torch.softmax(logits[rows], dim=1)
    sorted_probs, sorted_ids = torch.sort(probs, dim=1, descending=True, stable=True)
    mass_before = torch.cumsum(sorted_probs, dim=1) - sorted_probs  # [len(rows), vocab]
    drop_sorted = mass_before >= top_p[rows].unsqueeze(1)
    # Scatter the decision back from sorted order to token order.
    drop = torch.zeros_like(drop_sorted).scatter(1, sorted_ids, drop_sorted)
    filtered[rows] = logits[rows].masked_fill(drop, float("-inf"))
    return filtered


@exercise("lab01-text-to-tensors", "05_pipeline", "min_p")
def min_p_filter(logits: torch.Tensor, min_p) -> torch.Tensor:
    """Keep tokens whose probability is at least ``min_p`` times the row's largest probability.

    logits: ``[num_seqs, vocab]`` float. min_p: a number or one value per row, each in [0, 1];
    0 leaves the row unchanged. Boundary: p == min_p * p_max is kept, so the most likely token (and
    every token tied with it) always survives; min_p = 1 keeps exactly the tokens tied for the maximum.
    Returns a new ``[num_seqs, vocab]`` tensor.
    """
    _check_logits(logits)
    num_seqs = logits.shape[0]
    min_p = _per_row(min_p, num_seqs, "min_p", logits.dtype, logits.device)
    if not bool(((min_p >= 0) & (min_p <= 1)).all()):
        raise ValueError("min_p must be in [0, 1] (0 = off)")
    filtered = logits.clone()
    rows = (min_p > 0).nonzero().squeeze(1)
    if rows.numel() == 0:
        return filtered
    probs = torch.softmax(logits[rows], dim=1)
    threshold = min_p[rows].unsqueeze(1) * probs.max(dim=1, keepdim=True).values
    filtered[rows] = logits[rows].masked_fill(probs < threshold, float("-inf"))
    return filtered


def filtered_probs(logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """The distribution each non-greedy row samples from: temperature, top-k, top-p, min-p, softmax.

    logits: ``[num_seqs, vocab]`` float; params: one non-greedy SamplingParams per row.
    Returns ``[num_seqs, vocab]`` probabilities (rows sum to 1, filtered tokens exactly 0).
    """
    if any(p.is_greedy for p in params):
        raise ValueError("filtered_probs is for sampled rows; greedy rows (temperature 0) take the argmax")
    logits = apply_temperature(logits, [p.temperature for p in params])
    logits = top_k_filter(logits, [p.top_k for p in params])
    logits = top_p_filter(logits, [p.top_p for p in params])
    logits = min_p_filter(logits, [p.min_p for p in params])
    return torch.softmax(logits, dim=1)


def sample(
    logits: torch.Tensor,
    params: Sequence[SamplingParams],
    generators: Sequence[torch.Generator | None] | None = None,
) -> torch.Tensor:
    """One next token per row.

    logits: ``[num_seqs, vocab]`` float (fp32 from the model). params: one SamplingParams per row.
    generators: one torch.Generator (from ``make_generator``) or None per row; None, or a None entry,
    draws from the process-wide default generator. Returns ``[num_seqs]`` int64 token ids.

    Greedy rows take the argmax of the raw logits (the lowest token id among ties). Sampled rows run
    ``filtered_probs`` and draw with ``torch.multinomial`` using their own generator, one row at a
    time, so a seeded row consumes random numbers only from its own generator: its token is the same
    whatever else is in the batch and wherever the row sits. A generator on another device than
    the logits (``make_generator(seed)`` makes CPU ones) draws on its own device.
    """
    _check_logits(logits)
    num_seqs = logits.shape[0]
    if len(params) != num_seqs:
        raise ValueError(f"params must have one entry per row of logits ({num_seqs}), got {len(params)}")
    if generators is None:
        generators = [None] * num_seqs
    if len(generators) != num_seqs:
        raise ValueError(f"generators must have one entry per row of logits ({num_seqs}), got {len(generators)}")

    next_tokens = torch.empty(num_seqs, dtype=torch.long, device=logits.device)
    greedy_rows = [i for i, p in enumerate(params) if p.is_greedy]
    sampled_rows = [i for i, p in enumerate(params) if not p.is_greedy]
    if greedy_rows:
        next_tokens[greedy_rows] = logits[greedy_rows].argmax(dim=1)
    if sampled_rows:
        probs = filtered_probs(logits[sampled_rows], [params[i] for i in sampled_rows])
        for row_probs, i in zip(probs, sampled_rows):
            generator = generators[i]
            # A generator made for another device (say a CPU one for logits on a GPU) draws there.
            if generator is not None and generator.device != row_probs.device:
                row_probs = row_probs.to(generator.device)
            next_tokens[i] = torch.multinomial(row_probs, 1, generator=generator)[0]
    return next_tokens
