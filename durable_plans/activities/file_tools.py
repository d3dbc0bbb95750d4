"""The four file tools every worker has: their arguments, what the model is told, and
how a call runs against a :class:`~activities.file_jail.FileJail`.

The workspace itself (confinement, limits, the text a call returns) is
:mod:`activities.file_jail`; this module only declares the tools to a registry, so a
registry with a richer context (sub-agents) can offer the same file tools.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import Field

from durable_plans.activities.file_jail import MAX_PATH_CHARS, FileJail
from durable_plans.activities.tool_registry import ToolArgs, ToolRegistry, ToolResult, ToolSpec

ContextT = TypeVar("ContextT")

_PATH_HELP = "Path relative to the workspace root, e.g. 'src/main.py'. No absolute paths."


class ReadFileArgs(ToolArgs):
    path: str = Field(description=_PATH_HELP, max_length=MAX_PATH_CHARS)
    offset_line: int = Field(default=1, ge=1, description="First line to return (1-based).")
    max_lines: int | None = Field(
        default=None, ge=1, description="How many lines to return; omit for the rest."
    )


class WriteFileArgs(ToolArgs):
    path: str = Field(description=_PATH_HELP, min_length=1, max_length=MAX_PATH_CHARS)
    content: str = Field(description="The complete new text of the file (UTF-8).")


class ListDirArgs(ToolArgs):
    path: str = Field(
        default=".",
        max_length=MAX_PATH_CHARS,
        description="Directory relative to the workspace root; '.' is the root.",
    )


class SearchFilesArgs(ToolArgs):
    pattern: str = Field(
        min_length=1, max_length=1000, description="Text to find (or a regex if regex=true)."
    )
    path: str = Field(
        default=".", max_length=MAX_PATH_CHARS, description="Directory or file to search in."
    )
    glob: str = Field(
        default="*",
        max_length=200,
        description="Only files whose relative path or name matches, e.g. '*.py'.",
    )
    regex: bool = Field(default=False, description="Treat pattern as a Python regex.")
    max_results: int = Field(default=200, ge=1, le=1000, description="Most matches returned.")


_READ_FILE_DOC = (
    "Read a UTF-8 text file from the workspace. Files over 1 MiB must be read in parts "
    "with offset_line and max_lines; output is capped at 256 KiB with a note saying where "
    "to continue. Binary files are refused."
)
_WRITE_FILE_DOC = (
    "Create or completely replace a text file in the workspace (at most 1 MiB); missing "
    "parent directories are created. Returns the number of bytes written."
)
_LIST_DIR_DOC = (
    "List a workspace directory: subdirectories first (ending in '/'), then files with "
    "their sizes in bytes; hidden entries included; at most 500 entries."
)
_SEARCH_FILES_DOC = (
    "Search text files under a workspace path for a literal string (or a regex) and "
    "return matching lines as 'path:line: text'. Skips .git, binary files and files over "
    "1 MiB."
)


def register_workspace_tools(
    registry: ToolRegistry[ContextT], workspace_of: Callable[[ContextT], FileJail]
) -> None:
    """Add the four file tools to ``registry``, whose context must lead to a FileJail.

    Registries with a richer context (sub-agent tools) reuse the file tools this way.
    """

    def read_file(args: ReadFileArgs, ctx: ContextT) -> ToolResult:
        ws = workspace_of(ctx)
        return ToolResult(True, ws.read_file(args.path, args.offset_line, args.max_lines))

    def write_file(args: WriteFileArgs, ctx: ContextT) -> ToolResult:
        return ToolResult(True, workspace_of(ctx).write_file(args.path, args.content))

    def list_dir(args: ListDirArgs, ctx: ContextT) -> ToolResult:
        return ToolResult(True, workspace_of(ctx).list_dir(args.path))

    def search_files(args: SearchFilesArgs, ctx: ContextT) -> ToolResult:
        ws = workspace_of(ctx)
        text = ws.search_files(args.pattern, args.path, args.glob, args.regex, args.max_results)
        return ToolResult(True, text)

    registry.register("read_file", _READ_FILE_DOC, ReadFileArgs, read_file, read_only=True)
    registry.register("write_file", _WRITE_FILE_DOC, WriteFileArgs, write_file)
    registry.register("list_dir", _LIST_DIR_DOC, ListDirArgs, list_dir, read_only=True)
    registry.register(
        "search_files", _SEARCH_FILES_DOC, SearchFilesArgs, search_files, read_only=True
    )


def _workspace_itself(workspace: FileJail) -> FileJail:
    return workspace


_WORKSPACE_REGISTRY: ToolRegistry[FileJail] = ToolRegistry()
register_workspace_tools(_WORKSPACE_REGISTRY, _workspace_itself)

WORKSPACE_TOOLS: dict[str, ToolSpec] = {spec.name: spec for spec in _WORKSPACE_REGISTRY.specs()}


def execute_workspace_tool(name: str, arguments: str, workspace: FileJail) -> ToolResult:
    """Run one file-tool call from a model against ``workspace``; never raises for input."""
    return _WORKSPACE_REGISTRY.execute_sync(name, arguments, workspace)
