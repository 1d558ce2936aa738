"""``course serve`` and ``course loadtest`` as a user runs them: processes on loopback ports, a
router in front of replicas, a load test with a plot, and nothing left running afterwards."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest

from course_lib.server.launch import free_port, wait_healthy

ROOT = Path(__file__).resolve().parent.parent


def _children(pid: int) -> list[int]:
    result = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(line) for line in result.stdout.split()]


def _alive(pid: int) -> bool:
    return subprocess.run(["kill", "-0", str(pid)], capture_output=True).returncode == 0


@pytest.mark.slow
def test_serve_replicas_behind_a_router_then_loadtest(tmp_path):
    port = free_port()
    command = [sys.executable, "-m", "course_lib.cli", "serve", "--model", "tiny", "--replicas", "2",
               "--router", "prefix-aware", "--num-blocks", "64", "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=300, process=server)
        assert httpx.get(f"{url}/health").json()["replicas"] == [True, True]
        replica_pids = _children(server.pid)
        assert len(replica_pids) == 2
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        answer = client.chat.completions.create(model="tiny-random-llama", messages=[{"role": "user", "content": "hi"}],
                                                max_tokens=4)
        assert answer.usage.completion_tokens == 4 or answer.choices[0].finish_reason == "stop"
        out = tmp_path / "run.json"
        plot = tmp_path / "latency.png"
        loadtest = subprocess.run(
            [sys.executable, "-m", "course_lib.cli", "loadtest", url, "--rps", "5", "10", "--duration", "1.5",
             "--max-tokens", "6", "--json", str(out), "--plot", str(plot)],
            cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert loadtest.returncode == 0, loadtest.stderr
        assert "offered load 10 requests/s" in loadtest.stdout and "goodput/s" in loadtest.stdout
        results = json.loads(out.read_text())
        assert [r["rps"] for r in results] == [5, 10]
        assert all(r["summary"]["num_ok"] == r["summary"]["num_requests"] > 0 for r in results)
        assert plot.stat().st_size > 10_000
        routed = httpx.get(f"{url}/metrics").text
        assert 'course_router_requests_total{replica="0"}' in routed
        # The router serves the pages too, and describes its replicas to them.
        assert 'id="messages"' in httpx.get(f"{url}/").text and 'id="replicas"' in httpx.get(f"{url}/engine").text
        info = httpx.get(f"{url}/server_info").json()
        assert info["router"]["policy"] == "prefix-aware" and len(info["replicas"]) == 2
        assert all(replica["engine"]["num_blocks"] == 64 for replica in info["replicas"])
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(pid) for pid in replica_pids):
        time.sleep(0.2)
    assert not any(_alive(pid) for pid in replica_pids), "replica processes outlived course serve"


def test_loadtest_refuses_a_remote_address():
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "loadtest", "http://10.1.2.3:8000", "--rps", "1",
                             "--duration", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "this machine" in result.stderr


def test_serve_rejects_zero_replicas():
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "serve", "--replicas", "0"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "--replicas" in result.stderr


@pytest.mark.slow
def test_serve_kv_aware_router_routes_by_reported_free_blocks():
    port = free_port()
    command = [sys.executable, "-m", "course_lib.cli", "serve", "--model", "tiny", "--replicas", "2",
               "--router", "kv-aware", "--num-blocks", "48", "--port", str(port)]
    server = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, timeout=300, process=server)
        with httpx.stream("GET", f"{url}/engine/stream", timeout=30) as view:
            answers = [httpx.post(f"{url}/v1/completions", json={"prompt": [7 + i] * 300, "max_tokens": 40,
                                                                 "ignore_eos": True}, timeout=60) for i in range(2)]
            routes = []
            for line in view.iter_lines():
                if line.startswith("data: ") and '"type":"route"' in line:
                    routes.append(json.loads(line[6:]))
                if len(routes) == 2:
                    break
        assert all(answer.status_code == 200 for answer in answers)
        assert all(len(route["kv_free"]) == 2 and all(isinstance(free, int) for free in route["kv_free"])
                   for route in routes)
        assert httpx.get(f"{url}/server_info").json()["router"]["policy"] == "kv-aware"
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(60)


def test_serve_lists_the_kv_aware_router():
    result = subprocess.run([sys.executable, "-m", "course_lib.cli", "serve", "--help"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "kv-aware" in result.stdout
