"""Lines from standard input, read through the event loop.

Never from a blocked thread: a thread stuck in ``readline`` would keep the process alive
after Ctrl-C or ``/quit``. A pipe, a file and a pseudo-terminal all work.
"""

from __future__ import annotations

import asyncio
import errno
import os
from typing import Final

__all__ = ["StdinLines"]

_READ_CHUNK: Final = 65536


class StdinLines:
    """Lines from a file descriptor, read through the event loop.

    ``loop.add_reader`` works for pipes and terminals; regular files and ``/dev/null``
    cannot be polled, but reading them never blocks, so they are read directly.
    """

    def __init__(self, fd: int = 0) -> None:
        self._fd = fd
        self._buffer = b""
        self._eof = False

    async def read_line(self) -> str | None:
        """The next line without its newline; None at end of input."""
        while b"\n" not in self._buffer and not self._eof:
            chunk = await self._read_chunk()
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True
        if not self._buffer:
            return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").rstrip("\r")

    async def _read_chunk(self) -> bytes:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            if not ready.done():
                ready.set_result(None)

        try:
            loop.add_reader(self._fd, wake)
        except (OSError, ValueError, NotImplementedError):
            return self._read()
        try:
            await ready
        finally:
            loop.remove_reader(self._fd)
        return self._read()

    def _read(self) -> bytes:
        try:
            return os.read(self._fd, _READ_CHUNK)
        except OSError as err:
            # EIO: the terminal went away (its master side closed); EBADF: no stdin.
            if err.errno in (errno.EIO, errno.EBADF):
                return b""
            raise
