"""Streaming detokenization: turn tokens into text as they arrive, one token at a time.

A byte-level BPE token is a few *bytes*, not characters: an emoji or a Chinese character is often
split across two or three tokens. Decoding each token alone would print replacement characters
("\ufffd"), so the bytes of an incomplete UTF-8 character wait until the rest arrives.

Stop strings have a similar problem: the text "Obs" might be the start of the stop string
"Observation:". While any stop string could still be completing, the last ``len(longest) - 1``
characters are held back; when a stop string appears, the text ends just before it.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable, Sequence

__all__ = ["IncrementalDetokenizer"]


class IncrementalDetokenizer:
    """Text of one request, released piece by piece.

    token_bytes: ``f(token_id) -> bytes`` (``BPETokenizer.decode_token_bytes``).
    stop: stop strings; the released text never contains one and ends before the first found.
    """

    def __init__(self, token_bytes: Callable[[int], bytes], stop: Sequence[str] = ()) -> None:
        self._token_bytes = token_bytes
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stop = tuple(stop)
        self._hold_back = max((len(s) for s in self._stop), default=1) - 1
        self._pending = ""
        self.text = ""
        """Everything released so far."""
        self.stopped = False
        """True once a stop string appeared (later tokens are ignored)."""

    def add_token(self, token_id: int) -> str:
        """Take one token; return the text it releases (possibly "")."""
        if self.stopped:
            return ""
        self._pending += self._utf8.decode(self._token_bytes(token_id))
        if self._stop:
            hits = [index for index in (self._pending.find(s) for s in self._stop) if index >= 0]
            if hits:
                self.stopped = True
                return self._release(min(hits))
        return self._release(max(len(self._pending) - self._hold_back, 0))

    def flush(self) -> str:
        """The request ended: release what was held back (an unfinished character becomes "\ufffd")."""
        if self.stopped:
            return ""
        self._pending += self._utf8.decode(b"", final=True)
        return self._release(len(self._pending))

    def _release(self, num_chars: int) -> str:
        released, self._pending = self._pending[:num_chars], self._pending[num_chars:]
        self.text += released
        return released
