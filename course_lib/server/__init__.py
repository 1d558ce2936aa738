"""Serving over HTTP: an OpenAI-compatible server over ``LLMEngine``, and routing across replicas.

One module per concept:

- ``protocol``: the OpenAI wire format (request parsing, JSON bodies, server-sent events);
- ``engine_loop``: ``LLMEngine.step()`` in a thread of its own, fed through a command queue;
- ``admission``: 400 / 429 + Retry-After / admit, decided before a request costs anything;
- ``metrics``: the Prometheus histograms, gauges and counters of ``GET /metrics``;
- ``app``: the FastAPI routes that tie them together (streaming, disconnects, errors), and the
  pages for people: a chat page at ``/`` and the engine view at ``/engine`` (``static/``: HTML,
  CSS and a little JavaScript, no build step, nothing loaded from elsewhere);
- ``engine_view``: what the engine did at each step (queues, chunks, the KV block pool,
  preemptions) as frames and events for the engine view, in bounded queues that never block it;
- ``launch``: servers in a thread or a process of their own, on free loopback ports, always stopped;
- ``router``: one address in front of many replicas (round robin, least outstanding, prefix-aware);
- ``models``: the models a server loads by name (SmolLM2, or a tiny random model for tests);
- ``disaggregated``: prefill and decode in separate worker processes, KV blocks shipped between them;
- ``scripted``: a model-free server with exact timing that logs what it received (for checks);
- ``serve``: one server until interrupted (``python -m course_lib.server``, ``course serve``).

``python -m course_lib.server`` runs one server process (what ``course serve`` and the router's
replicas start).
"""
