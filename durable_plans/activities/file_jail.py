"""The workspace an agent's file tools may touch, and nothing outside it.

Every path arrives from a model, so it is untrusted text: ``FileJail.resolve`` is the one
gate between it and the file system, and it checks the path twice, lexically (``..``) and
after following symlinks, because either alone can be fooled. Size limits keep each tool
result small enough to go back to the model and through a Temporal payload (2 MiB hard
limit), and no operation can block forever (FIFOs and devices are refused).

Refusals raise ``ToolRefused`` with a sentence written for the model, so it can correct
itself on its next turn; the tool registry turns them into ``error: ...`` tool results.
The code is synchronous on purpose: the activity layer runs it in a worker thread.
"""

from __future__ import annotations

import codecs
import contextlib
import fnmatch
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterator
from glob import escape as glob_escape
from pathlib import Path
from typing import BinaryIO

MAX_PATH_CHARS = 1024
MAX_FILE_BYTES = 1024 * 1024  # largest file read whole, searched, or written
MAX_OUTPUT_BYTES = 256 * 1024  # largest tool result we hand back to the model
BINARY_SNIFF_BYTES = 8 * 1024
MAX_LIST_ENTRIES = 500
MAX_MATCH_LINE_CHARS = 300
SKIPPED_DIRS = frozenset({".git"})
NEW_FILE_MODE = 0o644
_TEMP_SUFFIX = ".dplan-tmp"


class ToolRefused(Exception):
    """A request the workspace will not carry out; ``str(exc)`` is meant for the model."""


def _show(text: str, limit: int = 200) -> str:
    """A path as it can safely appear in one line of a message (no raw control chars)."""
    shown = text if text.isprintable() else repr(text)[1:-1]
    return shown if len(shown) <= limit else shown[:limit] + "…"


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def _cut_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` whose UTF-8 form fits, never splitting a character."""
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def _decode_utf8(raw: bytes, complete: bool) -> str:
    """Strict UTF-8, except that a character cut in half at a kept line's end is dropped."""
    return codecs.getincrementaldecoder("utf-8")("strict").decode(raw, final=complete)


def _raw_lines(f: BinaryIO) -> Iterator[tuple[bytes, bool]]:
    """Lines split on ``\\n`` only, as ``(bytes, complete)``.

    A line longer than the output cap can never be shown whole, so only its start is kept
    and the rest is skipped unread into memory: a huge minified file streams in bounded
    memory whatever window is asked for.
    """
    limit = MAX_OUTPUT_BYTES + 1
    while line := f.readline(limit):
        complete = len(line) < limit or line.endswith(b"\n")
        if not complete:
            while (rest := f.readline(limit)) and not rest.endswith(b"\n"):
                pass
        yield line, complete


class FileJail:
    """File operations confined to ``root`` (``DPLAN_WORKSPACE``)."""

    def __init__(self, root: Path) -> None:
        root = Path(root).expanduser()
        root.mkdir(parents=True, exist_ok=True)  # FileExistsError if a file is in the way
        self.root = root.resolve(strict=True)

    # ------------------------------------------------------------------ paths

    def resolve(self, path: str, *, for_write: bool = False) -> Path:
        """The real (symlink-free) absolute path for ``path``, guaranteed inside the root.

        An empty path means the root itself, except when writing.
        """
        if "\x00" in path:
            raise ToolRefused("path contains a NUL byte; give a plain relative path")
        if len(path) > MAX_PATH_CHARS:
            raise ToolRefused(f"path is {len(path)} characters long; the limit is {MAX_PATH_CHARS}")
        try:
            path.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolRefused("path is not valid text (it contains a lone surrogate)") from None
        shown = _show(path)
        if for_write and not path.strip():
            raise ToolRefused(
                "path is empty; give the path of the file to write, relative to the "
                "workspace root (e.g. 'src/main.py')"
            )
        if path.startswith("/"):
            raise ToolRefused(
                f"{shown} is an absolute path; use a path relative to the workspace root "
                "(e.g. 'src/main.py')"
            )
        if path.split("/", 1)[0].startswith("~"):
            raise ToolRefused(
                f"{shown} refers to a home directory; only paths relative to the workspace "
                "root are allowed"
            )
        joined = self.root / path
        if not Path(os.path.normpath(joined)).is_relative_to(self.root):
            raise ToolRefused(
                f"{shown} is outside the workspace; only paths inside the workspace root "
                "are allowed"
            )
        real = self._real(joined, shown)
        if not real.is_relative_to(self.root):
            raise ToolRefused(
                f"{shown} leads outside the workspace through a symbolic link; only paths "
                "inside the workspace root are allowed"
            )
        if for_write and (real == self.root or path.split("/")[-1] in ("", ".", "..")):
            raise ToolRefused(f"{shown} names a directory; give the path of a file to write")
        return real

    def _real(self, joined: Path, shown: str) -> Path:
        """``joined`` with every symbolic link followed (``Path.resolve``)."""
        try:
            return joined.resolve()
        except RuntimeError:  # Python 3.11 reports a symlink loop this way
            raise ToolRefused(f"{shown} goes through a symbolic link loop") from None
        except (OSError, ValueError) as exc:
            raise ToolRefused(f"cannot resolve {shown}: {exc}") from None

    def relative(self, real: Path) -> str:
        """How a resolved path is shown to the model: relative, with ``/``."""
        return real.relative_to(self.root).as_posix()

    # ------------------------------------------------------------------ read

    def read_file(self, path: str, offset_line: int = 1, max_lines: int | None = None) -> str:
        """Text of a file, or of a window of its lines (1-based ``offset_line``)."""
        if offset_line < 1:
            raise ToolRefused(f"offset_line must be 1 or more (got {offset_line})")
        if max_lines is not None and max_lines < 1:
            raise ToolRefused(f"max_lines must be 1 or more (got {max_lines})")
        target = self.resolve(path)
        shown = _show(path)
        size = self._file_size(target, shown)
        windowed = offset_line != 1 or max_lines is not None
        if size > MAX_FILE_BYTES and not windowed:
            raise ToolRefused(
                f"{shown} is {_size(size)}, larger than the {_size(MAX_FILE_BYTES)} limit "
                "for a whole-file read; read it in parts with offset_line and max_lines "
                "(e.g. offset_line=1, max_lines=500)"
            )
        try:
            with self._open_file(target) as f:
                if b"\x00" in f.read(BINARY_SNIFF_BYTES):
                    raise ToolRefused(
                        f"{shown} looks like a binary file (it contains NUL bytes); only "
                        "text files can be read"
                    )
                f.seek(0)
                return self._window(f, shown, offset_line, max_lines)
        except PermissionError:
            raise ToolRefused(f"permission denied: {shown}") from None

    def _file_size(self, target: Path, shown: str) -> int:
        """The size of the regular file ``target``; ``ToolRefused`` for anything else."""
        return self._regular_file(target, shown).st_size

    def _open_file(self, target: Path) -> BinaryIO:
        return open(target, "rb")

    def _regular_file(self, target: Path, shown: str) -> os.stat_result:
        try:
            st = target.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise ToolRefused(f"no such file: {shown}") from None
        except PermissionError:
            raise ToolRefused(f"permission denied: {shown}") from None
        if stat.S_ISDIR(st.st_mode):
            raise ToolRefused(
                f"{shown} is a directory, not a file; use list_dir to see its entries"
            )
        if not stat.S_ISREG(st.st_mode):
            raise ToolRefused(f"{shown} is not a regular file (a device, socket or pipe)")
        return st

    @staticmethod
    def _window(f: BinaryIO, shown: str, offset_line: int, max_lines: int | None) -> str:
        parts: list[str] = []
        used = 0
        note = ""
        lineno = 0
        for lineno, (raw, complete) in enumerate(_raw_lines(f), start=1):
            if lineno < offset_line:
                continue
            if max_lines is not None and lineno >= offset_line + max_lines:
                note = f"[more lines follow; continue with offset_line={lineno}]"
                break
            try:
                line = _decode_utf8(raw, complete)
            except UnicodeDecodeError as exc:
                raise ToolRefused(
                    f"{shown} is not valid UTF-8 text (line {lineno}: {exc.reason}); only "
                    "text files can be read"
                ) from None
            size = len(raw)
            if used + size > MAX_OUTPUT_BYTES or not complete:
                if not parts:
                    parts.append(_cut_utf8(line, MAX_OUTPUT_BYTES))
                    note = (
                        f"[truncated: line {lineno} is longer than {_size(MAX_OUTPUT_BYTES)}; "
                        f"only its start is shown; continue with offset_line={lineno + 1}]"
                    )
                else:
                    note = (
                        f"[truncated: output is capped at {_size(MAX_OUTPUT_BYTES)}; "
                        f"continue with offset_line={lineno}]"
                    )
                break
            parts.append(line)
            used += size
        if not parts and not note:
            if lineno == 0:
                return f"[{shown} is empty]"
            return f"[{shown} has {lineno} lines; offset_line={offset_line} is past the end]"
        text = "".join(parts)
        if note:
            text += ("" if text.endswith("\n") else "\n") + note
        return text

    # ------------------------------------------------------------------ write

    def write_file(self, path: str, content: str) -> str:
        """Replace (or create) a file atomically: readers see the old or the new text."""
        target = self.resolve(path, for_write=True)
        shown = _show(path)
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolRefused("content is not valid text (it contains a lone surrogate)") from None
        if len(data) > MAX_FILE_BYTES:
            raise ToolRefused(
                f"content is {_size(len(data))}, larger than the {_size(MAX_FILE_BYTES)} "
                "write limit; split it into several smaller files"
            )
        mode = NEW_FILE_MODE
        try:
            st = target.stat()
        except (FileNotFoundError, NotADirectoryError):
            pass
        else:
            if stat.S_ISDIR(st.st_mode):
                raise ToolRefused(f"{shown} is a directory; cannot write a file over it")
            if not stat.S_ISREG(st.st_mode):
                raise ToolRefused(f"{shown} is not a regular file (a device, socket or pipe)")
            mode = stat.S_IMODE(st.st_mode)
            if st.st_size == len(data) and target.read_bytes() == data:
                return f"{shown} already has this content ({len(data)} bytes); nothing changed"
        self._make_parents(target, shown)
        try:
            _atomic_write(target, data, mode)
        except PermissionError:
            raise ToolRefused(f"permission denied: {shown}") from None
        return f"wrote {len(data)} bytes to {shown}"

    def _make_parents(self, target: Path, shown: str) -> None:
        current = self.root
        for part in target.parent.relative_to(self.root).parts:
            current = current / part
            if current.is_dir():
                continue
            if os.path.lexists(current):
                raise ToolRefused(
                    f"cannot write {shown}: {self.relative(current)} is a file, not a directory"
                )
            current.mkdir(exist_ok=True)

    # ------------------------------------------------------------------ list

    def list_dir(self, path: str = ".") -> str:
        """Entries of a directory: subdirectories first (``name/``), then files with sizes."""
        target = self.resolve(path)
        shown = _show(path) or "."
        dirs, others = self._dir_entries(target, shown)
        entries = sorted(dirs) + sorted(others)
        if not entries:
            return f"[{shown} is empty]"
        shown_entries = entries[:MAX_LIST_ENTRIES]
        omitted = len(entries) - len(shown_entries)
        if omitted:
            shown_entries.append(f"[{omitted} more entries not shown]")
        return "\n".join(shown_entries)

    def _dir_entries(self, target: Path, shown: str) -> tuple[list[str], list[str]]:
        """A directory's subdirectories (``name/``) and other entries, as listed."""
        try:
            st = target.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise ToolRefused(f"no such directory: {shown}") from None
        if not stat.S_ISDIR(st.st_mode):
            raise ToolRefused(f"{shown} is a file, not a directory; use read_file to read it")
        dirs: list[str] = []
        others: list[str] = []
        try:
            with os.scandir(target) as it:
                for entry in it:
                    if entry.name.endswith(_TEMP_SUFFIX):
                        continue  # an interrupted write's leftover, not the agent's file
                    name = _show(entry.name, limit=MAX_PATH_CHARS)
                    try:
                        if entry.is_dir():
                            dirs.append(f"{name}/")
                        elif entry.is_file():
                            others.append(f"{name}  {entry.stat().st_size} bytes")
                        elif entry.is_symlink():
                            others.append(f"{name}  (broken symbolic link)")
                        else:
                            others.append(f"{name}  (not a regular file)")
                    except OSError:
                        others.append(f"{name}  (unreadable)")
        except PermissionError:
            raise ToolRefused(f"permission denied: {shown}") from None
        return dirs, others

    # ------------------------------------------------------------------ search

    def search_files(
        self,
        pattern: str,
        path: str = ".",
        glob: str = "*",
        regex: bool = False,
        max_results: int = 200,
    ) -> str:
        """Matching lines as ``relative/path:line: text`` across text files under ``path``.

        ``glob`` is matched against the path relative to the workspace root and against
        the bare file name, so ``*.py`` finds Python files at any depth.
        """
        if not pattern:
            raise ToolRefused("pattern is empty; give the text to search for")
        if max_results < 1:
            raise ToolRefused(f"max_results must be 1 or more (got {max_results})")
        matches = self._matcher(pattern, regex)
        start = self.resolve(path)
        shown = _show(path) or "."
        if not self._exists(start):
            raise ToolRefused(f"no such file or directory: {shown}")
        files = [start] if self._is_file(start) else self._walk(start, glob)
        results: list[str] = []
        used = 0
        skipped = 0
        note = ""
        for file in files:
            lines = self._searchable_lines(file)
            if lines is None:
                skipped += 1
                continue
            rel = _show(self.relative(file), limit=MAX_PATH_CHARS)
            for lineno, line in enumerate(lines, start=1):
                if not matches(line):
                    continue
                if len(results) == max_results:
                    note = (
                        f"[more matches not shown: stopped after {max_results}; narrow the "
                        "pattern, path or glob, or raise max_results]"
                    )
                    break
                text = (
                    line
                    if len(line) <= MAX_MATCH_LINE_CHARS
                    else line[:MAX_MATCH_LINE_CHARS] + " […]"
                )
                result = f"{rel}:{lineno}: {text}"
                used += len(result.encode("utf-8", "replace")) + 1
                if used > MAX_OUTPUT_BYTES:
                    note = (
                        f"[more matches not shown: output is capped at "
                        f"{_size(MAX_OUTPUT_BYTES)}; narrow the pattern, path or glob]"
                    )
                    break
                results.append(result)
            if note:
                break
        if skipped:
            skip_note = f"[skipped {skipped} binary, non-UTF-8 or larger than 1 MiB files]"
            note = f"{note}\n{skip_note}" if note else skip_note
        if not results:
            where = shown if glob == "*" else f"{shown} (files matching '{_show(glob)}')"
            head = f"no matches for '{_show(pattern)}' in {where}"
            return f"{head}\n{note}" if note else head
        return "\n".join([*results, note]) if note else "\n".join(results)

    @staticmethod
    def _matcher(pattern: str, regex: bool) -> Callable[[str], bool]:
        if not regex:
            return lambda line: pattern in line
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise ToolRefused(f"invalid regular expression '{_show(pattern)}': {exc}") from None
        except (RecursionError, OverflowError, ValueError) as exc:
            raise ToolRefused(
                f"regular expression '{_show(pattern)}' is too complex: {exc}"
            ) from None
        return lambda line: compiled.search(line) is not None

    def _exists(self, target: Path) -> bool:
        return target.exists()

    def _is_file(self, target: Path) -> bool:
        return target.is_file()

    def _walk(self, start: Path, glob: str) -> Iterator[Path]:
        """Files under ``start`` in path order (``a/x`` before ``b``), without recursion.

        Symlinked directories are not entered (they could lead outside or loop) and
        ``.git`` is skipped; a stack of iterators keeps deep trees off the call stack.
        """
        stack = [iter(_sorted_entries(start))]
        while stack:
            entry = next(stack[-1], None)
            if entry is None:
                stack.pop()
                continue
            if entry.is_dir(follow_symlinks=False):
                if entry.name not in SKIPPED_DIRS:
                    stack.append(iter(_sorted_entries(Path(entry.path))))
                continue
            rel = self.relative(Path(entry.path))
            if fnmatch.fnmatchcase(rel, glob) or fnmatch.fnmatchcase(entry.name, glob):
                yield Path(entry.path)

    def _searchable_lines(self, file: Path) -> list[str] | None:
        """The lines of a text file, ``[]`` for what is not a file we may read at all
        (links leading outside or to directories, pipes), None for a skipped file
        (binary, not UTF-8, too large) so the caller can say how many it skipped.
        """
        try:
            if not file.resolve().is_relative_to(self.root):
                return []
            st = file.stat()
            if not stat.S_ISREG(st.st_mode):
                return []
            if st.st_size > MAX_FILE_BYTES:
                return None
            data = file.read_bytes()
        except (OSError, RuntimeError):
            return []
        return _text_lines(data)


def _text_lines(data: bytes) -> list[str] | None:
    """A file's lines for a search; None for a binary or non-UTF-8 one."""
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _sorted_entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as it:
            return sorted(it, key=lambda entry: entry.name)
    except OSError:
        return []


def _atomic_write(target: Path, data: bytes, mode: int) -> None:
    """Write via a temp file in the same directory, fsync, then ``os.replace``.

    ``os.replace`` is atomic within one file system, so a worker killed at any instant
    leaves either the old file or the new one, never a torn mix; the activity's retry then
    simply writes again.
    """
    prefix = f".{target.name[:40]}."
    # A worker killed mid-write (SIGKILL skips the cleanup below) leaves its temp file;
    # the retried write of the same target sweeps it up.
    with contextlib.suppress(OSError):
        for stale in target.parent.glob(f"{glob_escape(prefix)}*{_TEMP_SUFFIX}"):
            stale.unlink()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=_TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(target.parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
