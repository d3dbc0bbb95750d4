"""FileJail file tools: confinement, limits and the exact text the model gets back."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from durable_plans.activities.file_jail import (
    MAX_FILE_BYTES,
    MAX_LIST_ENTRIES,
    MAX_OUTPUT_BYTES,
    FileJail,
    ToolRefused,
)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    d = tmp_path / "outside"
    d.mkdir()
    (d / "secret.txt").write_text("top secret\n")
    return d


@pytest.fixture
def ws(tmp_path: Path, outside: Path) -> FileJail:
    return FileJail(tmp_path / "ws")


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir()}


# --------------------------------------------------------------------------- resolve


def test_root_is_created_and_resolved(tmp_path: Path) -> None:
    ws = FileJail(tmp_path / "a" / "b")
    assert ws.root == (tmp_path / "a" / "b").resolve()
    assert ws.root.is_dir()


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("../../etc/passwd", "../../etc/passwd is outside the workspace"),
        ("src/../../x", "src/../../x is outside the workspace"),
        ("/etc/passwd", "/etc/passwd is an absolute path"),
        ("~/.ssh", "~/.ssh refers to a home directory"),
        ("~", "~ refers to a home directory"),
        ("~root/x", "~root/x refers to a home directory"),
        ("a\x00b", "path contains a NUL byte"),
        ("a" * 1025, "path is 1025 characters long; the limit is 1024"),
        ("bad\ud800", "path is not valid text"),
    ],
)
def test_resolve_refuses(ws: FileJail, path: str, message: str) -> None:
    with pytest.raises(ToolRefused) as info:
        ws.resolve(path)
    assert message in str(info.value)


def test_resolve_accepts_inner_paths(ws: FileJail) -> None:
    assert ws.resolve("src/main.py") == ws.root / "src" / "main.py"
    assert ws.resolve("./src/../README.md") == ws.root / "README.md"
    assert ws.resolve("") == ws.root
    assert ws.resolve("a" * 1024) == ws.root / ("a" * 1024)
    # A literal "~" later in a path is just a name, not a home directory.
    assert ws.resolve("notes/~draft") == ws.root / "notes" / "~draft"


def test_symlinked_directory_leading_outside_is_refused(ws: FileJail, outside: Path) -> None:
    (ws.root / "escape").symlink_to(outside, target_is_directory=True)
    for attempt in ("escape", "escape/secret.txt", "escape/new.txt", "escape/../x"):
        with pytest.raises(ToolRefused, match="leads outside the workspace through a symbolic"):
            ws.resolve(attempt)
    with pytest.raises(ToolRefused, match="symbolic link"):
        ws.read_file("escape/secret.txt")
    with pytest.raises(ToolRefused, match="symbolic link"):
        ws.list_dir("escape")
    with pytest.raises(ToolRefused, match="symbolic link"):
        ws.write_file("escape/new.txt", "pwned")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


def test_symlinked_file_leading_outside_is_refused_for_read_and_write(
    ws: FileJail, outside: Path
) -> None:
    (ws.root / "leak.txt").symlink_to(outside / "secret.txt")
    with pytest.raises(ToolRefused, match="symbolic link"):
        ws.read_file("leak.txt")
    with pytest.raises(ToolRefused, match="symbolic link"):
        ws.write_file("leak.txt", "overwritten")
    assert (outside / "secret.txt").read_text() == "top secret\n"


def test_dangling_symlink_to_outside_cannot_create_a_file_there(
    ws: FileJail, outside: Path
) -> None:
    (ws.root / "plant.txt").symlink_to(outside / "planted.txt")
    with pytest.raises(ToolRefused, match="symbolic link"):
        ws.write_file("plant.txt", "x")
    assert not (outside / "planted.txt").exists()


def test_symlink_loop_is_refused(ws: FileJail) -> None:
    (ws.root / "loop").symlink_to(ws.root / "loop")
    with pytest.raises(ToolRefused, match="symbolic link loop"):
        ws.read_file("loop/x")


def test_symlink_inside_the_workspace_is_followed(ws: FileJail) -> None:
    (ws.root / "real.txt").write_text("real\n")
    (ws.root / "alias.txt").symlink_to(ws.root / "real.txt")
    assert ws.read_file("alias.txt") == "real\n"
    ws.write_file("alias.txt", "changed\n")
    assert (ws.root / "alias.txt").is_symlink()
    assert (ws.root / "real.txt").read_text() == "changed\n"


_PIECES = st.sampled_from(
    ["..", ".", "", "a", "escape", "loop", "inner", "~", "/", "\x00", "é", "//", "\\", "-"]
)
_PATHS = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(_PIECES, st.text(max_size=8)), max_size=10).map("/".join),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=1020, max_size=1030),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=_PATHS, for_write=st.booleans())
def test_resolve_never_escapes_and_only_refuses(
    ws: FileJail, outside: Path, path: str, for_write: bool
) -> None:
    if not (ws.root / "escape").is_symlink():
        (ws.root / "escape").symlink_to(outside, target_is_directory=True)
        (ws.root / "loop").symlink_to(ws.root / "loop")
        (ws.root / "inner").mkdir()
    try:
        resolved = ws.resolve(path, for_write=for_write)
    except ToolRefused as exc:
        assert str(exc)
        return
    assert resolved.is_absolute()
    assert resolved.is_relative_to(ws.root)
    assert Path(os.path.realpath(resolved)).is_relative_to(ws.root)


# --------------------------------------------------------------------------- read_file


def test_read_whole_file(ws: FileJail) -> None:
    (ws.root / "src").mkdir()
    (ws.root / "src" / "a.py").write_text("print('hi')\nprint('bye')\n")
    assert ws.read_file("src/a.py") == "print('hi')\nprint('bye')\n"


def test_read_missing_file_says_so(ws: FileJail) -> None:
    with pytest.raises(ToolRefused) as info:
        ws.read_file("src/x.py")
    assert str(info.value) == "no such file: src/x.py"
    (ws.root / "plain.txt").write_text("x")
    with pytest.raises(ToolRefused, match=r"no such file: plain\.txt/y"):
        ws.read_file("plain.txt/y")


def test_read_directory_is_refused(ws: FileJail) -> None:
    (ws.root / "src").mkdir()
    with pytest.raises(ToolRefused, match="src is a directory, not a file; use list_dir"):
        ws.read_file("src")
    with pytest.raises(ToolRefused, match="is a directory"):
        ws.read_file("")


def test_read_binary_file_is_refused(ws: FileJail) -> None:
    (ws.root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ToolRefused, match=r"logo\.png looks like a binary file"):
        ws.read_file("logo.png")


def test_read_non_utf8_file_is_refused_with_the_line(ws: FileJail) -> None:
    (ws.root / "latin1.txt").write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(ToolRefused, match=r"latin1.txt is not valid UTF-8 text \(line 2"):
        ws.read_file("latin1.txt")


def test_read_fifo_is_refused_without_blocking(ws: FileJail) -> None:
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(ToolRefused, match="pipe is not a regular file"):
        ws.read_file("pipe")


def test_read_oversize_file_needs_a_window(ws: FileJail) -> None:
    line = "x" * 99 + "\n"
    (ws.root / "big.log").write_text(line * (MAX_FILE_BYTES // 100 + 1))
    with pytest.raises(ToolRefused, match=r"big.log is 1.0 MiB, larger than the 1.0 MiB"):
        ws.read_file("big.log")
    window = ws.read_file("big.log", offset_line=10_000, max_lines=2)
    assert window == line * 2 + "[more lines follow; continue with offset_line=10002]"


def test_read_window_and_its_notes(ws: FileJail) -> None:
    (ws.root / "ten.txt").write_text("".join(f"line{i}\n" for i in range(1, 11)))
    assert ws.read_file("ten.txt", offset_line=3, max_lines=2) == (
        "line3\nline4\n[more lines follow; continue with offset_line=5]"
    )
    assert ws.read_file("ten.txt", offset_line=9, max_lines=5) == "line9\nline10\n"
    assert ws.read_file("ten.txt", offset_line=10) == "line10\n"
    assert ws.read_file("ten.txt", offset_line=20) == (
        "[ten.txt has 10 lines; offset_line=20 is past the end]"
    )
    with pytest.raises(ToolRefused, match="offset_line must be 1 or more"):
        ws.read_file("ten.txt", offset_line=0)
    with pytest.raises(ToolRefused, match="max_lines must be 1 or more"):
        ws.read_file("ten.txt", max_lines=0)


def test_read_empty_file_says_it_is_empty(ws: FileJail) -> None:
    (ws.root / "empty.txt").write_text("")
    assert ws.read_file("empty.txt") == "[empty.txt is empty]"


def test_read_output_is_capped_and_resumable(ws: FileJail) -> None:
    lines = [f"{i:06d}" + "y" * 993 + "\n" for i in range(1, 401)]  # 1000 bytes each
    (ws.root / "wide.txt").write_text("".join(lines))
    first = ws.read_file("wide.txt")
    shown = MAX_OUTPUT_BYTES // 1000
    assert first.endswith(
        f"[truncated: output is capped at 256.0 KiB; continue with offset_line={shown + 1}]"
    )
    assert first.startswith("".join(lines[:shown]))
    assert len(first.encode()) < MAX_OUTPUT_BYTES + 200
    rest = ws.read_file("wide.txt", offset_line=shown + 1)
    assert rest == "".join(lines[shown:])


def test_read_single_huge_line_shows_its_start_only(ws: FileJail) -> None:
    # 2-byte characters make the 256 KiB cut land inside one; it must not break decoding.
    (ws.root / "min.js").write_text("é" * (MAX_FILE_BYTES) + "\nnext\n")
    out = ws.read_file("min.js", max_lines=5)
    head, note = out.rsplit("\n", 1)
    assert set(head) == {"é"}
    assert len(head.encode()) <= MAX_OUTPUT_BYTES
    assert note == (
        "[truncated: line 1 is longer than 256.0 KiB; only its start is shown; "
        "continue with offset_line=2]"
    )
    assert ws.read_file("min.js", offset_line=2) == "next\n"


# --------------------------------------------------------------------------- write_file


def test_write_creates_parents_and_confirms_bytes(ws: FileJail) -> None:
    assert ws.write_file("a/b/c.txt", "héllo") == "wrote 6 bytes to a/b/c.txt"
    assert (ws.root / "a" / "b" / "c.txt").read_text(encoding="utf-8") == "héllo"
    assert stat.S_IMODE((ws.root / "a" / "b" / "c.txt").stat().st_mode) == 0o644


def test_write_is_idempotent_and_overwrites(ws: FileJail) -> None:
    ws.write_file("f.txt", "one")
    assert (
        ws.write_file("f.txt", "one") == "f.txt already has this content (3 bytes); nothing changed"
    )
    assert ws.write_file("f.txt", "two!") == "wrote 4 bytes to f.txt"
    assert (ws.root / "f.txt").read_text() == "two!"


def test_write_keeps_the_existing_mode(ws: FileJail) -> None:
    (ws.root / "run.sh").write_text("old")
    (ws.root / "run.sh").chmod(0o755)
    ws.write_file("run.sh", "new")
    assert stat.S_IMODE((ws.root / "run.sh").stat().st_mode) == 0o755


def test_write_leaves_no_temp_files(ws: FileJail) -> None:
    for i in range(5):
        ws.write_file("d/f.txt", f"version {i}")
    assert files_under(ws.root) == {"d/f.txt"}


def test_failed_replace_keeps_the_old_file_and_cleans_up(
    ws: FileJail, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws.write_file("keep.txt", "old content")

    def crash(src: str, dst: str) -> None:
        raise OSError(5, "I/O error (simulated)")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated"):
        ws.write_file("keep.txt", "new content")
    monkeypatch.undo()
    assert (ws.root / "keep.txt").read_text() == "old content"
    assert files_under(ws.root) == {"keep.txt"}


@pytest.mark.parametrize("path", ["", "   ", "dir/", ".", "sub/.."])
def test_write_needs_a_file_path(ws: FileJail, path: str) -> None:
    (ws.root / "sub").mkdir()
    with pytest.raises(ToolRefused, match=r"path is empty|names a directory"):
        ws.write_file(path, "x")


def test_write_oversize_content_is_refused(ws: FileJail) -> None:
    with pytest.raises(ToolRefused, match=r"content is 1\.0 MiB, larger than the 1\.0 MiB write"):
        ws.write_file("big.txt", "x" * (MAX_FILE_BYTES + 1))
    assert not (ws.root / "big.txt").exists()
    assert (
        ws.write_file("max.txt", "x" * MAX_FILE_BYTES) == f"wrote {MAX_FILE_BYTES} bytes to max.txt"
    )


def test_write_over_a_directory_is_refused(ws: FileJail) -> None:
    (ws.root / "src").mkdir()
    with pytest.raises(ToolRefused, match="src is a directory; cannot write a file over it"):
        ws.write_file("src", "x")
    assert (ws.root / "src").is_dir()


def test_write_under_a_file_is_refused(ws: FileJail) -> None:
    (ws.root / "a.txt").write_text("x")
    with pytest.raises(ToolRefused, match=r"cannot write a\.txt/b/c\.txt: a\.txt is a file"):
        ws.write_file("a.txt/b/c.txt", "y")


def test_write_refuses_escapes(ws: FileJail, outside: Path) -> None:
    for path in ("../outside/new.txt", str(outside / "new.txt"), "~/new.txt"):
        with pytest.raises(ToolRefused):
            ws.write_file(path, "x")
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]


# --------------------------------------------------------------------------- list_dir


def test_list_dir_orders_dirs_first_with_sizes(ws: FileJail) -> None:
    (ws.root / "zeta").mkdir()
    (ws.root / ".git").mkdir()
    (ws.root / "alpha").mkdir()
    (ws.root / "b.txt").write_text("12345")
    (ws.root / ".env").write_text("K=V\n")
    (ws.root / "a.txt").write_text("")
    (ws.root / "dangling").symlink_to(ws.root / "nowhere")
    assert ws.list_dir() == "\n".join(
        [
            ".git/",
            "alpha/",
            "zeta/",
            ".env  4 bytes",
            "a.txt  0 bytes",
            "b.txt  5 bytes",
            "dangling  (broken symbolic link)",
        ]
    )


def test_list_dir_caps_entries(ws: FileJail) -> None:
    (ws.root / "many").mkdir()
    for i in range(MAX_LIST_ENTRIES + 10):
        (ws.root / "many" / f"f{i:04d}").write_text("")
    lines = ws.list_dir("many").split("\n")
    assert len(lines) == MAX_LIST_ENTRIES + 1
    assert lines[0] == "f0000  0 bytes"
    assert lines[MAX_LIST_ENTRIES - 1] == f"f{MAX_LIST_ENTRIES - 1:04d}  0 bytes"
    assert lines[-1] == "[10 more entries not shown]"


def test_list_dir_refusals_and_empty(ws: FileJail) -> None:
    with pytest.raises(ToolRefused, match=r"^no such directory: nope$"):
        ws.list_dir("nope")
    (ws.root / "f.txt").write_text("x")
    with pytest.raises(ToolRefused, match=r"f\.txt is a file, not a directory; use read_file"):
        ws.list_dir("f.txt")
    (ws.root / "empty").mkdir()
    assert ws.list_dir("empty") == "[empty is empty]"


# --------------------------------------------------------------------------- search_files


@pytest.fixture
def tree(ws: FileJail, outside: Path) -> FileJail:
    files = {
        "b.py": "import os\nTODO: b\n",
        "a/x.py": "TODO: first\nnothing\nTODO: second\r\n",
        "a/notes.md": "TODO in markdown\n",
        ".git/config": "TODO git internals\n",
        "img.bin": "TODO",  # rewritten as binary below
        "node/big.txt": "TODO\n" + "z" * MAX_FILE_BYTES,
    }
    for rel, text in files.items():
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws.root / rel).write_text(text)
    (ws.root / "img.bin").write_bytes(b"TODO\x00\x01")
    (ws.root / "leak.txt").symlink_to(outside / "secret.txt")
    (ws.root / "outdir").symlink_to(outside, target_is_directory=True)
    return ws


def test_search_literal_in_path_order(tree: FileJail) -> None:
    assert tree.search_files("TODO") == "\n".join(
        [
            "a/notes.md:1: TODO in markdown",
            "a/x.py:1: TODO: first",
            "a/x.py:3: TODO: second",
            "b.py:2: TODO: b",
            "[skipped 2 binary, non-UTF-8 or larger than 1 MiB files]",
        ]
    )


def test_search_never_reads_through_links_leading_outside(tree: FileJail) -> None:
    assert tree.search_files("secret") == (
        "no matches for 'secret' in .\n[skipped 2 binary, non-UTF-8 or larger than 1 MiB files]"
    )


def test_search_glob_path_and_single_file(tree: FileJail) -> None:
    assert tree.search_files("TODO", glob="*.py").split("\n") == [
        "a/x.py:1: TODO: first",
        "a/x.py:3: TODO: second",
        "b.py:2: TODO: b",
    ]
    assert tree.search_files("TODO", path="a", glob="a/*.md") == "a/notes.md:1: TODO in markdown"
    assert tree.search_files("import", path="b.py") == "b.py:1: import os"
    assert tree.search_files("zzz", path="a", glob="*.py") == (
        "no matches for 'zzz' in a (files matching '*.py')"
    )


def test_search_regex_and_invalid_regex(tree: FileJail) -> None:
    assert tree.search_files(r"second$", path="a", regex=True) == "a/x.py:3: TODO: second"
    assert tree.search_files("TODO: (first|b)", regex=True, glob="*.py").split("\n") == [
        "a/x.py:1: TODO: first",
        "b.py:2: TODO: b",
    ]
    with pytest.raises(ToolRefused) as info:
        tree.search_files("(unclosed", regex=True)
    assert str(info.value) == (
        "invalid regular expression '(unclosed': missing ), unterminated subpattern at position 0"
    )
    # The same text as a literal is fine.
    assert tree.search_files("(unclosed").startswith("no matches for '(unclosed' in .")


def test_search_limits_results_and_line_length(ws: FileJail) -> None:
    (ws.root / "m.txt").write_text("hit\n" * 5 + "hit " + "w" * 1000 + "\n")
    limited = ws.search_files("hit", max_results=3).split("\n")
    assert limited == [
        "m.txt:1: hit",
        "m.txt:2: hit",
        "m.txt:3: hit",
        "[more matches not shown: stopped after 3; narrow the pattern, path or glob, "
        "or raise max_results]",
    ]
    exact = ws.search_files("hit", max_results=6).split("\n")
    assert len(exact) == 6
    assert exact[-1] == "m.txt:6: hit " + "w" * 296 + " […]"


def test_search_refusals(ws: FileJail) -> None:
    with pytest.raises(ToolRefused, match="pattern is empty"):
        ws.search_files("")
    with pytest.raises(ToolRefused, match=r"^no such file or directory: gone$"):
        ws.search_files("x", path="gone")
    with pytest.raises(ToolRefused, match="max_results must be 1 or more"):
        ws.search_files("x", max_results=0)
    with pytest.raises(ToolRefused, match="outside the workspace"):
        ws.search_files("root", path="../..")


def test_a_killed_writes_leftover_is_hidden_and_swept_by_the_next_write(tmp_path: Path) -> None:
    ws = FileJail(tmp_path / "ws")
    # What SIGKILL in the middle of a write leaves: a torn temp file beside the target.
    leftover = ws.root / ".notes.md.abc123.dplan-tmp"
    leftover.write_bytes(b"half a fi")
    assert ".dplan-tmp" not in ws.list_dir(".")
    ws.write_file("notes.md", "whole file\n")
    assert (ws.root / "notes.md").read_text() == "whole file\n"
    assert not leftover.exists()
    assert list(ws.root.glob("*.dplan-tmp")) == []
