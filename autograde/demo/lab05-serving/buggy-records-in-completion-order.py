"""Demo student: the open-loop generator returns its records in the order the answers finished."""

DESCRIPTION = (
    "open_loop sends every request on time from its own task but appends each record to a list when its "
    "answer ends, so a short answer sent later comes back before a long one sent earlier: the records are in "
    "completion order, not schedule order; loses the open_loop cell (3 points): expected 4/7"
)
BASE = "solution"
ANSWERS = {
    "open_loop": '''
import asyncio
import time

import httpx

from course_lib.loadtest import stream_request


async def open_loop(url, schedule):
    """Send every request of the schedule at its time, without waiting for earlier answers."""
    start = time.perf_counter()
    records = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(limits=limits, timeout=120) as client:

        async def send(item):
            await asyncio.sleep(max(0.0, start + item["at"] - time.perf_counter()))
            record = await stream_request(client, url, item["prompt"], item["max_tokens"], t0=start)
            records.append({"scheduled_at": item["at"], **record})

        await asyncio.gather(*(send(item) for item in schedule))
    return records
''',
}
EXPECTED = {"02_load": 4}
