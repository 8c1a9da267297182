"""The preprocessed MSL source the generator reads and rewrites: its text, the text
with comments and literals masked (``msl_text.mask``), the (file, line) each line
came from, and the rewrites recorded against it (applied together by ``result``, so
every pass reads the source as it was written)."""
from __future__ import annotations

import bisect
import re

if __package__:
    from .msl_preprocess import Preprocessed
    from .msl_restrictions import MslError
    from .msl_text import attribute_items, mask
else:   # imported by msl_to_cpp.py run as a script
    from msl_preprocess import Preprocessed
    from msl_restrictions import MslError
    from msl_text import attribute_items, mask


class SourceFile:
    def __init__(self, pre: Preprocessed):
        self.pre = pre
        self.text = "\n".join(pre.lines)
        self.masked = mask(self.text)
        self.edits: list[tuple[int, int, str]] = []
        self._starts = [0]
        for line in pre.lines[:-1]:
            self._starts.append(self._starts[-1] + len(line) + 1)

    def where(self, pos: int) -> str:
        if not self.pre.locations:
            return f"{self.pre.files[0] if self.pre.files else '?'}:1"
        path, line = self.pre.locations[bisect.bisect_right(self._starts, pos) - 1]
        return f"{path}:{line}"

    def error(self, pos: int, message: str) -> MslError:
        return MslError(f"{self.where(pos)}: error: {message}")

    def attributes(self):
        """(start, end, items) of every [[...]] in the file."""
        for m in re.finditer(r"\[\[(.*?)\]\]", self.masked, re.S):
            body = self.text[m.start(1):m.end(1)]
            yield m.start(), m.end(), attribute_items(body)

    def replace(self, start: int, end: int, new: str) -> None:
        """Replace [start, end) keeping the number of newlines (lines stay put)."""
        lost = self.text.count("\n", start, end) - new.count("\n")
        if lost < 0:
            raise self.error(start, "a rewrite adds lines (generator bug)")
        self.edits.append((start, end, new + "\n" * lost))

    def blank(self, start: int, end: int) -> None:
        self.replace(start, end, re.sub(r"[^\n]", " ", self.text[start:end]))

    def result(self) -> str:
        out, last = [], 0
        for start, end, new in sorted(self.edits):
            if start < last:
                raise self.error(start, "overlapping rewrite (generator bug)")
            out.append(self.text[last:start])
            out.append(new)
            last = end
        out.append(self.text[last:])
        return "".join(out)
