"""Demo student: parse_stream notes [DONE] but keeps reading the events after it."""

DESCRIPTION = (
    "parse_stream sets done on 'data: [DONE]' and then continues instead of stopping, so an event that arrives "
    "after the sentinel adds a chunk time and text. The visible streams include one: loses the parse_stream cell "
    "(3 points), with a hint to stop at [DONE]; request_metrics and histogram_quantile keep theirs: expected 4/7"
)
BASE = "solution"
ANSWERS = {
    "parse_stream": '''
import json


def parse_stream(timed_lines):
    """Read a streamed completion or chat completion from its received lines."""
    parsed = {"chunk_times": [], "text": "", "num_output_tokens": None, "finish_reason": None, "done": False}
    for arrival, line in timed_lines:
        if not line.startswith("data:"):
            continue
        payload = line[len("data:"):].strip()
        if payload == "[DONE]":
            parsed["done"] = True
            continue
        event = json.loads(payload)
        if event.get("usage"):
            parsed["num_output_tokens"] = event["usage"]["completion_tokens"]
        choices = event.get("choices") or []
        if not choices:
            continue
        choice = choices[0]
        text = choice.get("text") if "text" in choice else (choice.get("delta") or {}).get("content")
        if text:
            parsed["chunk_times"].append(arrival)
            parsed["text"] += text
        if choice.get("finish_reason"):
            parsed["finish_reason"] = choice["finish_reason"]
    return parsed
''',
}
EXPECTED = {"01_metrics_from_the_wire": 4}
