"""Model-free simulators: workloads run against a cost model instead of a real model.

They answer "what if" questions in milliseconds, so a notebook can sweep a policy or a workload
that would take hours on the real engine: how much memory contiguous reservation wastes, how
batching policies trade latency for throughput, what separating prefill from decode removes.
One module per question; each takes a seed and gives the same answer every time.
"""
