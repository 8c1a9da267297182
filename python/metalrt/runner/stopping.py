"""Stop strings over streamed text, and the text of a request as its tokens arrive."""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple


class StopStrings:
    """Cuts streamed text at the first occurrence of any stop string.

    ``feed`` returns the text that is safe to show: text that could still turn out
    to be the beginning of a stop string is held back until the next piece decides
    it. The stop string itself is never returned.
    """

    def __init__(self, stops: Iterable[str] = ()):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.matched: Optional[str] = None   # the stop string that was found

    def feed(self, text: str) -> Tuple[str, bool]:
        """(text to emit, whether a stop string was found)."""
        self.pending += text
        hits = [(i, s) for i, s in ((self.pending.find(s), s) for s in self.stops) if i >= 0]
        if hits:
            at, self.matched = min(hits, key=lambda hit: hit[0])
            out, self.pending = self.pending[:at], ""
            return out, True
        hold = max((k for s in self.stops for k in range(1, len(s))
                    if self.pending.endswith(s[:k])), default=0)
        out, self.pending = self.pending[:len(self.pending) - hold], self.pending[len(self.pending) - hold:]
        return out, False

    def flush(self) -> str:
        """The held-back text, when the generation ends for another reason."""
        out, self.pending = self.pending, ""
        return out


class TextStream:
    """Text of one request as tokens arrive: streaming detokenization (never a partial
    UTF-8 character), eos text left out, stop strings cut off."""

    def __init__(self, tokenizer, stop: Optional[Sequence[str]]):
        self.detokenizer = tokenizer.detokenizer()
        self.eos = set(tokenizer.eos_token_ids)
        self.stops = StopStrings([stop] if isinstance(stop, str) else (stop or ()))

    def add(self, token: int, finished: bool):
        """(new text, whether a stop string ended the request)."""
        piece = "" if token in self.eos else self.detokenizer.add_token(token)
        if finished:
            piece += self.detokenizer.finalize()
        text, stopped = self.stops.feed(piece)
        if finished and not stopped:
            text += self.stops.flush()
        return text, stopped
