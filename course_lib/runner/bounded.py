"""Student output within byte limits, wherever it goes: cell outputs, printed text, error messages.

A submission may print 150 MB on one line, display a 60 MB image or raise an exception whose
message is 30 MB long. Everything the grader keeps of a student's output passes through here:

- ``TextKeeper``: printed text as it arrives, keeping its first and last bytes (``limit`` in all)
  and counting what it cuts; ``text()`` says how much was cut and what the limit is;
- ``clip``: a finished string cut the same way (exception messages, reasons, result files);
- ``CellOutputs``: one cell's nbformat outputs as they arrive (streams merged and clipped, a rich
  output too large for what is left of the cell's budget replaced by a line that says so,
  ``clear_output`` honoured);
- ``bound_outputs``: the same limits applied again by the grader to outputs the kernel sent,
  which it never trusts (and whose shape it checks: only nbformat's output kinds, strings where
  nbformat has strings).

Sizes are counted in UTF-8 bytes of the stored JSON strings (a base64 image counts its base64).
"""

from __future__ import annotations

from typing import Any, Iterable

__all__ = ["CellOutputs", "ERROR_BYTES", "HIDDEN_OUTPUT_NOTE", "MESSAGE_BYTES", "TextKeeper", "bound_outputs",
           "clip", "cut_note", "output_size"]

MESSAGE_BYTES = 8 * 1024      # an exception's message as the grader keeps it
TRACEBACK_BYTES = 16 * 1024   # an exception's traceback
ERROR_BYTES = MESSAGE_BYTES + TRACEBACK_BYTES
NAME_BYTES = 200              # an exception type's name, a MIME type
HIDDEN_OUTPUT_NOTE = "[output printed by your code during hidden checks is not shown]\n"
OUTPUT_KINDS = ("stream", "display_data", "execute_result", "error")


def _size(text: str) -> int:
    return len(text.encode("utf-8", errors="replace"))


def _shown_bytes(count: int) -> str:
    from course_lib.runner.limits import format_bytes

    return format_bytes(count)


def cut_note(cut: int, limit: int, what: str = "output") -> str:
    """The line that replaces what was cut: how much, and the limit."""
    return f"\n[... {cut:,} bytes of {what} cut here: at most {_shown_bytes(limit)} is kept ...]\n"


def _head(text: str, size: int) -> str:
    return text.encode("utf-8", errors="replace")[:size].decode("utf-8", errors="ignore")


def _tail(text: str, size: int) -> str:
    if size <= 0:
        return ""
    return text.encode("utf-8", errors="replace")[-size:].decode("utf-8", errors="ignore")


def clip(text: Any, limit: int, what: str = "text") -> str:
    """``text`` (made a string) with its middle cut to keep at most ``limit`` bytes of head and tail."""
    if not isinstance(text, str):
        try:
            text = str(text)
        except Exception:  # noqa: BLE001 - a student's __str__ may raise anything
            text = "<text that could not be shown>"
    if len(text) <= limit // 4 or _size(text) <= limit:
        return text
    encoded = text.encode("utf-8", errors="replace")
    half = limit // 2
    return (encoded[:half].decode("utf-8", errors="ignore") + cut_note(len(encoded) - 2 * half, limit, what)
            + encoded[-half:].decode("utf-8", errors="ignore"))


class TextKeeper:
    """Text written piece by piece, of which the first and last ``limit // 2`` bytes are kept."""

    def __init__(self, limit: int, what: str = "printed output") -> None:
        self.limit, self.what = limit, what
        self._head: list[str] = []
        self._head_size = 0
        self._tail = ""
        self.cut = 0

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            text = str(text)
        half = self.limit // 2
        room = half - self._head_size
        if room > 0:
            piece = text if _size(text) <= room else _head(text, room)
            self._head.append(piece)
            self._head_size += _size(piece)
            text = text[len(piece):]
        if text:
            combined = self._tail + text
            size = _size(combined)
            if size > half:
                self.cut += size - half
                combined = _tail(combined, half)
            self._tail = combined
        return 0

    def text(self) -> str:
        head = "".join(self._head)
        if not self.cut:
            return head + self._tail
        return head + cut_note(self.cut, self.limit, self.what) + self._tail

    def __bool__(self) -> bool:
        return bool(self._head_size or self._tail)

    @property
    def size(self) -> int:
        return self._head_size + _size(self._tail)


def output_size(output: dict) -> int:
    """Bytes of an nbformat output's strings (data values, text, traceback lines)."""
    total = 0
    for key in ("text", "evalue", "ename"):
        value = output.get(key)
        if isinstance(value, str):
            total += _size(value)
    for line in output.get("traceback") or []:
        if isinstance(line, str):
            total += _size(line)
    data = output.get("data")
    if isinstance(data, dict):
        for mime, value in data.items():
            total += _size(str(mime)) + (_size(value) if isinstance(value, str) else _size(repr(value)))
    return total


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return "".join(value)
    return ""


def _clean_error(output: dict) -> dict:
    traceback = [line for line in output.get("traceback") or [] if isinstance(line, str)]
    kept, size = [], 0
    for line in reversed(traceback):   # the last lines say where it failed
        size += _size(line)
        if size > TRACEBACK_BYTES:
            kept.append(f"[... {len(traceback) - len(kept)} earlier traceback lines cut ...]")
            break
        kept.append(line)
    return {"output_type": "error", "ename": clip(_as_text(output.get("ename")) or "Error", NAME_BYTES),
            "evalue": clip(_as_text(output.get("evalue")), MESSAGE_BYTES, "error message"),
            "traceback": list(reversed(kept))}


def _clean_rich(output: dict) -> dict | None:
    data = output.get("data")
    if not isinstance(data, dict):
        return None
    clean = {}
    for mime, value in data.items():
        if not isinstance(mime, str) or _size(mime) > NAME_BYTES:
            continue
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            value = "".join(value)
        if isinstance(value, (str, dict, list, int, float, bool)) or value is None:
            clean[mime] = value
    result = {"output_type": output["output_type"], "data": clean, "metadata": {}}
    if output["output_type"] == "execute_result":
        count = output.get("execution_count")
        result["execution_count"] = count if isinstance(count, int) and not isinstance(count, bool) else None
    return result


class CellOutputs:
    """One cell's outputs, kept within ``limit`` bytes (``stream_limit`` of them printed text).

    Printed text keeps its head and tail per run of one stream; a rich output (an image, HTML)
    that does not fit in what is left of the cell's budget is dropped and counted, and a note at
    the end says how many were; errors are always kept (clipped). At most ``MAX_OUTPUTS`` outputs.
    """

    MAX_OUTPUTS = 500

    def __init__(self, limit: int, stream_limit: int) -> None:
        self.limit, self.stream_limit = limit, stream_limit
        self.outputs: list[dict] = []
        self._rich_bytes = 0
        self._dropped = 0
        self._dropped_bytes = 0

    def _stream_bytes(self) -> int:
        return sum(o["_keeper"].size for o in self.outputs if o.get("output_type") == "stream")

    def add_stream(self, name: str, text: str) -> None:
        name = name if name in ("stdout", "stderr") else "stdout"
        last = self.outputs[-1] if self.outputs else None
        if last is None or last.get("output_type") != "stream" or last.get("name") != name:
            if len(self.outputs) >= self.MAX_OUTPUTS:
                self._dropped += 1
                self._dropped_bytes += _size(text)
                return
            keeper = TextKeeper(max(1024, self.stream_limit - self._stream_bytes()))
            last = {"output_type": "stream", "name": name, "_keeper": keeper}
            self.outputs.append(last)
        last["_keeper"].write(text)

    def add(self, output: dict) -> None:
        """Any nbformat output (its shape checked, its size counted)."""
        kind = output.get("output_type") if isinstance(output, dict) else None
        if kind == "stream":
            self.add_stream(str(output.get("name", "stdout")), _as_text(output.get("text")))
            return
        if kind == "error":
            clean = _clean_error(output)
        elif kind in ("display_data", "execute_result"):
            clean = _clean_rich(output)
        else:
            clean = None
        if clean is None:
            return
        size = output_size(clean)
        if kind != "error" and (self._rich_bytes + size > self.limit - self.stream_limit
                                or len(self.outputs) >= self.MAX_OUTPUTS):
            self._dropped += 1
            self._dropped_bytes += size
            return
        if kind != "error":
            self._rich_bytes += size
        self.outputs.append(clean)

    def clear(self) -> None:
        self.outputs.clear()
        self._rich_bytes = self._dropped = self._dropped_bytes = 0

    def result(self) -> list[dict]:
        """The kept outputs in nbformat form (a note before any error if outputs were dropped)."""
        outputs = []
        for output in self.outputs:
            if output.get("output_type") == "stream":
                text = output["_keeper"].text()
                if text:
                    outputs.append({"output_type": "stream", "name": output["name"], "text": text})
            else:
                outputs.append(output)
        if self._dropped:
            note = (f"[{self._dropped} output{'s' if self._dropped > 1 else ''} of {self._dropped_bytes:,} bytes "
                    f"removed: a cell keeps at most {_shown_bytes(self.limit)} of output]\n")
            errors = [o for o in outputs if o.get("output_type") == "error"]
            outputs = [o for o in outputs if o.get("output_type") != "error"]
            outputs.append({"output_type": "stream", "name": "stdout", "text": note})
            outputs.extend(errors)
        return outputs


def bound_outputs(outputs: Iterable[Any], limit: int, stream_limit: int) -> list[dict]:
    """``outputs`` (from an untrusted kernel) as nbformat outputs within the limits."""
    cell = CellOutputs(limit, stream_limit)
    for count, output in enumerate(outputs if isinstance(outputs, (list, tuple)) else []):
        if count >= 10_000:
            break
        if isinstance(output, dict):
            cell.add(output)
    return cell.result()
