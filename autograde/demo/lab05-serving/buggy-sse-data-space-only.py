"""Demo student: parse_stream only reads lines that start with 'data: ', with the space."""

DESCRIPTION = (
    "parse_stream tests line.startswith('data: ') and slices off six characters, so an event sent as 'data:{...}' "
    "(legal SSE: the space is optional) is skipped as if it were a comment. The visible streams include one: loses "
    "the parse_stream cell (3 points), with a hint that names the missing space; request_metrics and "
    "histogram_quantile keep theirs: expected 4/7"
)
BASE = "solution"
ANSWERS = {
    "parse_stream": '''
import json


def parse_stream(timed_lines):
    """Read a streamed completion or chat completion from its received lines."""
    parsed = {"chunk_times": [], "text": "", "num_output_tokens": None, "finish_reason": None, "done": False}
    for arrival, line in timed_lines:
        if not line.startswith("data: "):
            continue  # blank lines and comments
        payload = line[6:]
        if payload == "[DONE]":
            parsed["done"] = True
            break
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
