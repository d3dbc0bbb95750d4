"""The read-only file tools on a commit, without a tree: ``read_file``, ``list_dir`` and
``search_files`` answered from git's objects, as they would be from the commit's checkout.

A subtask that only looks at the workspace (most do: ``list_dir``, ``read_file``) then
costs no tree on disk (no checkout, index, state or lock file) and no git process: the
objects come through the workspace's long-lived ``git cat-file`` (``git_run.ObjectReader``).

``CommitFiles`` is a :class:`~activities.file_jail.FileJail` whose file-system steps read
the commit instead, so every check, limit and message is the same code. Where the
checkout could differ from the objects, it does not guess: ``NeedsTree`` is raised and the
caller runs the call on the materialised tree as before. That is a path through a symbolic
link or a submodule, a directory listing or a search that meets one, a ``.gitattributes``
(or the repository's ``info/attributes``) that may convert files on checkout (``eol``,
``crlf``, ``filter``, ``ident``, an encoding, a macro), a repository configured to convert
line ends (``core.autocrlf``, ``core.eol``), a very long name, and a reader that cannot
answer.
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from durable_plans.activities.file_jail import (
    _TEMP_SUFFIX,
    MAX_FILE_BYTES,
    MAX_PATH_CHARS,
    SKIPPED_DIRS,
    FileJail,
    ToolRefused,
    _show,
    _text_lines,
)
from durable_plans.activities.git_run import GitFailed, ObjectReader

__all__ = ["CONVERTING", "CommitFiles", "NeedsTree"]

_TREE = "40000"
_SYMLINK = "120000"
_GITLINK = "160000"
# What in an attributes file may make a checkout's bytes differ from the blob's.
CONVERTING = re.compile(rb"eol|crlf|filter|ident|encoding|\[attr\]", re.IGNORECASE)
# A blob larger than this is read from the tree, streamed, not into memory whole.
_LARGEST_BLOB = 64 * 1024 * 1024
_NAME_MAX = 255
_PATH_BYTES = 2048
# Where the entries' paths appear to live; never touched on disk.
_ROOT = Path("/dplan-commit")

_Entry = tuple[str, str]  # (mode, object id)


class NeedsTree(Exception):
    """This call must run on the materialised tree: the commit's objects alone might not
    give the checkout's answer (the reason, for a log)."""


class CommitFiles(FileJail):
    """The read-only file tools on ``commit``, through ``objects``."""

    def __init__(self, objects: ObjectReader, commit: str) -> None:
        # No directory: FileJail.__init__ would make one.
        self.root = _ROOT
        self._objects = objects
        found = self._info(f"{commit}^{{tree}}")
        if found is None or found[1] != "tree":
            raise NeedsTree(f"commit {commit[:12]} cannot be read")
        self._root_tree = found[0]
        self._trees: dict[str, dict[str, _Entry]] = {}

    # ------------------------------------------------------------------ objects

    def _info(self, spec: str) -> tuple[str, str, int] | None:
        try:
            return self._objects.info(spec)
        except GitFailed as err:
            raise NeedsTree(str(err)) from None

    def _blob(self, oid: str) -> bytes:
        try:
            found = self._objects.contents(oid)
        except GitFailed as err:
            raise NeedsTree(str(err)) from None
        if found is None or found[0] != "blob":
            raise NeedsTree(f"object {oid[:12]} is not a blob")
        return found[1]

    def _size(self, oid: str) -> int:
        found = self._info(oid)
        if found is None or found[1] != "blob":
            raise NeedsTree(f"object {oid[:12]} is not a blob")
        return found[2]

    def _tree(self, oid: str) -> dict[str, _Entry]:
        """A tree's entries by name (decoded as ``os.scandir`` decodes them)."""
        cached = self._trees.get(oid)
        if cached is not None:
            return cached
        try:
            found = self._objects.contents(oid)
        except GitFailed as err:
            raise NeedsTree(str(err)) from None
        if found is None or found[0] != "tree":
            raise NeedsTree(f"object {oid[:12]} is not a tree")
        data = found[1]
        width = len(oid) // 2
        entries: dict[str, _Entry] = {}
        at = 0
        while at < len(data):
            space = data.index(b" ", at)
            nul = data.index(b"\0", space)
            mode = data[at:space].decode("ascii")
            raw_name = data[space + 1 : nul]
            entries[os.fsdecode(raw_name)] = (mode, data[nul + 1 : nul + 1 + width].hex())
            at = nul + 1 + width
        attributes = entries.get(".gitattributes")
        if attributes is not None:
            if attributes[0] != "100644" and attributes[0] != "100755":
                raise NeedsTree(".gitattributes is not a plain file")
            if CONVERTING.search(self._blob(attributes[1])):
                raise NeedsTree(".gitattributes may convert files on checkout")
        self._trees[oid] = entries
        return entries

    def _lookup(self, parts: tuple[str, ...]) -> _Entry | None:
        """The entry at ``parts`` below the root (the root itself for none), None when
        there is none (a missing name, or a name below a file)."""
        entry: _Entry = (_TREE, self._root_tree)
        for part in parts:
            if entry[0] != _TREE:
                if entry[0] in (_SYMLINK, _GITLINK):
                    raise NeedsTree("a path through a symbolic link or a submodule")
                return None
            found = self._tree(entry[1]).get(part)
            if found is None:
                return None
            entry = found
        return entry

    def _entry(self, target: Path) -> _Entry | None:
        entry = self._lookup(target.relative_to(self.root).parts)
        if entry is not None and entry[0] in (_SYMLINK, _GITLINK):
            raise NeedsTree("a symbolic link or a submodule")
        return entry

    # ------------------------------------------------------------------ FileJail's steps

    def _real(self, joined: Path, shown: str) -> Path:
        """``Path.resolve``'s walk, component by component: without a symbolic link on the
        way (those need the tree), it is the lexical path."""
        parts: list[str] = []
        for part in joined.relative_to(self.root).parts:
            if len(os.fsencode(part)) > _NAME_MAX:
                raise NeedsTree("a name longer than a file system allows")
            if part == "..":
                if not parts:
                    raise NeedsTree("a path that leaves the root on its way")
                parts.pop()
                continue
            parts.append(part)
            found = self._lookup(tuple(parts))
            if found is not None and found[0] in (_SYMLINK, _GITLINK):
                raise NeedsTree("a path through a symbolic link or a submodule")
        if len(os.fsencode("/".join(parts))) > _PATH_BYTES:
            raise NeedsTree("a path longer than the tree's directory may allow")
        return self.root.joinpath(*parts)

    def _file_size(self, target: Path, shown: str) -> int:
        entry = self._entry(target)
        if entry is None:
            raise ToolRefused(f"no such file: {shown}")
        if entry[0] == _TREE:
            raise ToolRefused(
                f"{shown} is a directory, not a file; use list_dir to see its entries"
            )
        size = self._size(entry[1])
        if size > _LARGEST_BLOB:
            raise NeedsTree("a file too large to read into memory")
        return size

    def _open_file(self, target: Path) -> BinaryIO:
        entry = self._entry(target)
        assert entry is not None and entry[0] != _TREE  # _file_size said so
        return io.BytesIO(self._blob(entry[1]))

    def _dir_entries(self, target: Path, shown: str) -> tuple[list[str], list[str]]:
        entry = self._entry(target)
        if entry is None:
            raise ToolRefused(f"no such directory: {shown}")
        if entry[0] != _TREE:
            raise ToolRefused(f"{shown} is a file, not a directory; use read_file to read it")
        dirs: list[str] = []
        others: list[str] = []
        for name, (mode, oid) in self._tree(entry[1]).items():
            if name.endswith(_TEMP_SUFFIX):
                continue  # as the tree's listing leaves it out
            if mode in (_SYMLINK, _GITLINK):
                raise NeedsTree("a directory holding a symbolic link or a submodule")
            shown_name = _show(name, limit=MAX_PATH_CHARS)
            if mode == _TREE:
                dirs.append(f"{shown_name}/")
            else:
                others.append(f"{shown_name}  {self._size(oid)} bytes")
        return dirs, others

    def _exists(self, target: Path) -> bool:
        return self._entry(target) is not None

    def _is_file(self, target: Path) -> bool:
        entry = self._entry(target)
        return entry is not None and entry[0] != _TREE

    def _walk(self, start: Path, glob: str) -> Iterator[Path]:
        entry = self._entry(start)
        assert entry is not None and entry[0] == _TREE  # search_files checked
        stack = [iter(self._sorted(entry[1], start))]
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
                continue
            path, (mode, oid) = item
            if mode in (_SYMLINK, _GITLINK):
                raise NeedsTree("a search meeting a symbolic link or a submodule")
            if mode == _TREE:
                if path.name not in SKIPPED_DIRS:
                    stack.append(iter(self._sorted(oid, path)))
                continue
            rel = self.relative(path)
            if fnmatch.fnmatchcase(rel, glob) or fnmatch.fnmatchcase(path.name, glob):
                yield path

    def _sorted(self, tree: str, at: Path) -> list[tuple[Path, _Entry]]:
        return [(at / name, entry) for name, entry in sorted(self._tree(tree).items())]

    def _searchable_lines(self, file: Path) -> list[str] | None:
        entry = self._entry(file)
        if entry is None or entry[0] == _TREE:
            return []
        if self._size(entry[1]) > MAX_FILE_BYTES:
            return None
        return _text_lines(self._blob(entry[1]))

    def write_file(self, path: str, content: str) -> str:
        raise NeedsTree("a write needs the tree")
