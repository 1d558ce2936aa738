"""Demo student: the load generator waits for each answer before sending the next request."""

DESCRIPTION = (
    "open_loop sleeps until each request's time but awaits its answer before the next (a closed loop with one "
    "client): the scripted server sees arrivals a whole answer apart; loses the open_loop cell (3 points): "
    "expected 4/7"
)
BASE = "solution"
ANSWERS = {
    "open_loop": '''
import asyncio
import time

import httpx

from course_lib.loadtest import stream_request


async def open_loop(url, schedule):
    """Send every request of the schedule at its time."""
    start = time.perf_counter()
    records = []
    async with httpx.AsyncClient(timeout=120) as client:
        for item in schedule:
            await asyncio.sleep(max(0.0, start + item["at"] - time.perf_counter()))
            record = await stream_request(client, url, item["prompt"], item["max_tokens"], t0=start)
            records.append({"scheduled_at": item["at"], **record})
    return records
''',
}
EXPECTED = {"02_load": 4}
