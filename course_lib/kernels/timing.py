"""Timing GPU kernels honestly: paired, alternated runs, the median, and the bandwidth that bounds them.

Three ways a kernel benchmark lies, and what this module does about each:

1. **The clock is read before the work is done.** A CUDA launch returns as soon as the kernel is
   queued. Reading ``time.perf_counter()`` right after it measures the queueing, not the kernel.
   Every measurement here calls ``synchronize()`` (``torch.cuda.synchronize`` on a GPU) before it
   reads the clock, at the start and at the end.
2. **The machine changes under the benchmark.** A GPU warms up and clocks down, another process
   starts, the first call compiles the kernel. Timing all runs of A and then all runs of B puts
   each drift on one side. ``time_paired`` warms both up, then alternates them (A B, B A, A B, ...)
   so both see the same conditions, and reports the **median** of each, which one slow outlier
   cannot move.
3. **A time that is too good.** A kernel that skips work, or whose output is never checked, can
   look faster than the memory allows. No kernel that must read ``num_bytes`` can finish in less
   than ``num_bytes / copy_bandwidth``: ``copy_bandwidth`` measures that bandwidth on the device,
   and a check that gets a time below that floor calls it not credible instead of celebrating.
   (Check the output before timing, too: a wrong kernel's speed means nothing.)
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from course_lib.exercises import exercise

__all__ = ["copy_bandwidth", "median", "time_paired"]


def median(values) -> float:
    """The middle value (the mean of the two middle ones for an even count)."""
    values = list(values)
    if not values:
        raise ValueError("median of an empty list")
    return float(statistics.median(values))


@exercise("lab03-kernels", "05_into_the_engine", "time_paired")
def time_paired(
    run_a: Callable[[], object],
    run_b: Callable[[], object],
    repeats: int = 20,
    *,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
    synchronize: Callable[[], object] | None = None,
) -> tuple[float, float]:
    """Median seconds of one call of ``run_a`` and of ``run_b``, measured in alternation.

    Args:
        run_a, run_b: functions of no argument (a kernel launch each).
        repeats: timed calls of each, >= 1.
        warmup: untimed calls of each first (compilation, caches, clocks), >= 0.
        clock: returns the time in seconds (``time.perf_counter``).
        synchronize: waits until the device has finished all queued work (``torch.cuda.synchronize``
            on a GPU); None on a CPU, where a call returns when its work is done.

    Returns:
        ``(median_seconds_a, median_seconds_b)``. Pair ``i`` runs A then B when ``i`` is even and
        B then A when it is odd, so neither always runs first; each call is timed on its own,
        between a synchronize and a synchronize.
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    wait = synchronize if synchronize is not None else (lambda: None)

    def timed(run: Callable[[], object]) -> float:
        wait()
        start = clock()
        run()
        wait()
        return clock() - start

    for _ in range(warmup):
        run_a()
        run_b()
    times_a, times_b = [], []
    for pair in range(repeats):
        if pair % 2 == 0:
            times_a.append(timed(run_a))
            times_b.append(timed(run_b))
        else:
            times_b.append(timed(run_b))
            times_a.append(timed(run_a))
    return median(times_a), median(times_b)


def copy_bandwidth(device: torch.device | str = "cuda", num_bytes: int = 2**30, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device copy: ``2 * num_bytes / median time`` (read + write).

    The practical ceiling for any memory-bound kernel on this device (on an H100 SXM, roughly 85-90%
    of the 3.35 TB/s datasheet figure). ``num_bytes`` should dwarf the L2 cache (50 MB on an H100).
    """
    device = torch.device(device)
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes < 2**20:
        raise ValueError(f"num_bytes must be an int >= 2**20, got {num_bytes!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    source = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    destination = torch.empty_like(source)

    def wait() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    destination.copy_(source)  # warm-up (platform code: it must not lean on time_paired, an exercise)
    times = []
    for _ in range(repeats):
        wait()
        start = time.perf_counter()
        destination.copy_(source)
        wait()
        times.append(time.perf_counter() - start)
    return 2 * num_bytes / median(times)
