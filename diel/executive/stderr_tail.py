"""A child's standard error, passed through to ours and its last lines kept, bounded.

A trial's process may print anything: a progress bar redrawn with ``\\r`` a million
times, a 40 MB line with no line end, a traceback. :class:`StderrTail` copies the stream
to our standard error unchanged, chunk by chunk as it comes, and keeps only what an
error message quotes: the last :data:`~diel.limits.STDERR_LINES` lines, each clipped to
:data:`~diel.limits.STDERR_LINE_CHARS` characters. Lines end at ``\\n`` or ``\\r``; a line
ended by ``\\r`` is replaced by the next one, as on a terminal, so a progress bar is one
line. Whatever the child prints, the tail holds a few tens of kilobytes.
"""

from __future__ import annotations

import collections
import os
import select
import sys
import threading
from typing import IO

from diel.limits import STDERR_LINE_CHARS, STDERR_LINES, clip

__all__ = ["StderrTail"]

CHUNK = 1 << 16          # bytes read at a time
PIPE_MOST = 1 << 20      # the most a pipe holds (Linux's default limit for pipe-max-size)


class _Line:
    """The line being read, in bounded memory: its first and last bytes and its length."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0

    def add(self, data: bytes) -> None:
        self.size += len(data)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data[-self.keep:]
            del self.tail[:-self.keep]

    def text(self, chars: int) -> str:
        """The line, clipped to ``chars`` characters (:func:`~diel.limits.clip`)."""
        cut = self.size - len(self.head) - len(self.tail)
        if not cut:
            return clip((self.head + self.tail).decode("utf-8", "replace"), chars)
        return clip(self.head.decode("utf-8", "replace") + self.tail.decode("utf-8", "replace"),
                    chars, cut)


class StderrTail:
    """Copies a child's standard error (``stream``, the binary read end of its pipe) to
    ours in a thread and keeps its last lines, to quote them when the child fails."""

    def __init__(self, stream: IO[bytes], lines: int = STDERR_LINES,
                 line_chars: int = STDERR_LINE_CHARS) -> None:
        self._stream = stream
        self._fd = stream.fileno()
        os.set_blocking(self._fd, False)
        self._line_chars = line_chars
        self._lines: collections.deque[str] = collections.deque(maxlen=lines)
        self._line = _Line(4 * line_chars)   # bytes enough for line_chars characters of UTF-8
        self._replace_last = False   # the last kept line ended with "\r": the next replaces it
        self._open = True
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._copy, daemon=True)
        self._thread.start()

    def _copy(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        while self._open:
            poller.poll()   # sleeps until there is something to read, or the end
            with self._lock:
                self._read(CHUNK)
        self._stream.close()   # here only: the fd must not be reused while this thread polls it

    def _read(self, most: int) -> None:
        """Read what the pipe holds, at most ``most`` bytes (the lock held)."""
        while self._open and most > 0:
            try:
                chunk = os.read(self._fd, min(CHUNK, most))
            except BlockingIOError:   # nothing more for now
                return
            except OSError:
                chunk = b""
            if not chunk:   # the child and everything that shared the pipe are gone
                self._open = False
                return
            most -= len(chunk)
            _pass_through(chunk)
            self._keep(chunk)

    def _keep(self, chunk: bytes) -> None:
        """Add ``chunk``'s lines to the tail; of many lines only the last few are looked at."""
        start = len(chunk)
        for _ in range((self._lines.maxlen or 0) + 1):
            start = chunk.rfind(b"\n", 0, start)
            if start < 0:
                break
        else:   # the lines after this line end fill the tail: nothing before them is kept
            chunk = chunk[start + 1:]
            self._lines.clear()
            self._line = _Line(self._line.keep)
            self._replace_last = False
        for piece in chunk.splitlines(keepends=True):
            body = piece.rstrip(b"\r\n")
            if body == piece:   # no line end yet: the line goes on in the next chunk
                self._line.add(piece)
            elif not body and self._replace_last and piece == b"\n" and not self._line.size:
                self._replace_last = False   # the "\n" of a "\r\n" split between two reads
            else:
                self._line.add(body)
                self._end_line(replaceable=piece.endswith(b"\r"))

    def _end_line(self, replaceable: bool) -> None:
        text = self._line.text(self._line_chars)
        if self._replace_last and self._lines:
            self._lines[-1] = text
        else:
            self._lines.append(text)
        self._replace_last = replaceable
        self._line = _Line(self._line.keep)

    def clear(self) -> None:
        """Forget the lines so far (a reused child starts a new trial). What the pipe
        holds now was written before, by the trial that ended: it is read and forgotten
        too, so that a line that trial left unfinished never reaches the next one's error."""
        with self._lock:
            self._read(PIPE_MOST)
            self._lines.clear()
            self._line = _Line(self._line.keep)
            self._replace_last = False

    def join(self, timeout: float | None = 2.0) -> None:
        """Wait for the stream's end (the child exited), at most ``timeout`` seconds."""
        self._thread.join(timeout)

    def lines(self) -> list[str]:
        """The lines kept, the unfinished one last."""
        with self._lock:
            self._read(PIPE_MOST)
            lines = list(self._lines)
            if self._line.size:   # the line being written, over one it replaces
                if self._replace_last and lines:
                    lines.pop()
                lines.append(self._line.text(self._line_chars))
            return lines

    def text(self, note_silence: bool = True) -> str:
        """``; last lines of its stderr: ...``, or a note that there were none (or "")."""
        lines = self.lines()
        if not lines:
            return " (it wrote nothing to stderr)" if note_silence else ""
        return "; last lines of its stderr:\n    " + "\n    ".join(lines)


def _pass_through(chunk: bytes) -> None:
    """Write ``chunk`` to our standard error as it is; a stderr we cannot write to is
    skipped (the lines are still kept)."""
    try:
        out = getattr(sys.stderr, "buffer", None)
        if out is None:
            sys.stderr.write(chunk.decode("utf-8", "replace"))
            sys.stderr.flush()
        else:
            out.write(chunk)
            out.flush()
    except (OSError, ValueError, AttributeError):   # AttributeError: sys.stderr is None
        pass
