"""The workspace's git layer (``activities/git_workspace.py``) on real repositories.

Every case runs git itself, nothing mocked: a plain directory becomes a repository, a
plan's base resolves from HEAD, a branch, a tag or a commit, trees commit
deterministically and reset after a crash, a stale writer is refused, merges name their
conflicts, the result branch leaves conflicting work out by name, and the user's
checkout is left exactly as it was. The remote cases run two workers' caches against one
bare repository served by ``git daemon`` on loopback.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_plans._errors import WorkspaceBusy, WorkspaceConflict, WorkspaceUnavailable
from durable_plans.activities.git_run import redact_url
from durable_plans.activities.git_workspace import GitWorkspace, tool_commit_message
from durable_plans.domain.workspace_refs import (
    GitIdentity,
    WorkspaceMergeInput,
    WorkspacePublishInput,
    WorkspaceRef,
    resolution_ref,
    tree_ref,
)
from tests.gitrepos import files_at, free_port, git, git_daemon, user_repo, user_view

PLAN = "plan-1"
AGENT = GitIdentity(name="coder", email="coder@dplan.invalid")
AT = 1_800_000_000.0


def ref(head: str, tree: str = "a@0", plan: str = PLAN) -> WorkspaceRef:
    return WorkspaceRef(plan_id=plan, tree=tree, head=head, identity=AGENT)


def write(
    gw: GitWorkspace,
    at: WorkspaceRef,
    files: dict[str, str | None],
    *,
    turn: int = 1,
    at_s: float = AT,
) -> str | None:
    """One changing call: ``files`` written (None: deleted) in the tree, then committed."""
    with gw.checkout(at) as lease:
        lease.mark_changing()
        for name, text in files.items():
            target = lease.path / name
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        return lease.commit(tool_commit_message(at.tree, turn, 0, "write_file"), at_s)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return user_repo(tmp_path / "repo")


@pytest.fixture
def gw(repo: Path, tmp_path: Path) -> GitWorkspace:
    return GitWorkspace(repo, tmp_path / "state")


def git_dir(repo: Path) -> Path:
    return repo / ".git"


# --------------------------------------------------------------------------- the repository


def test_a_plain_directory_becomes_a_repository_with_its_content_as_first_commit(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    plain = tmp_path / "plain"
    (plain / "docs").mkdir(parents=True)
    (plain / "docs" / "a.md").write_text("a\n")
    (plain / ".gitignore").write_text("*.tmp\n")
    (plain / "scratch.tmp").write_text("ignored\n")
    state = plain / ".dplan"  # a state directory inside the workspace stays out of it
    gw = GitWorkspace(plain, state)
    with caplog.at_level(logging.INFO, logger="durable_plans.workspace"):
        base = gw.open_plan(PLAN, None)
        gw.open_plan("plan-2", None)
        write(gw, ref(base), {"x.txt": "x\n"})
    assert files_at(plain / ".git", base) == {".gitignore": "*.tmp", "docs/a.md": "a"}
    assert git(plain, "rev-parse", "HEAD") == base
    said = [r.getMessage() for r in caplog.records if "initialised" in r.getMessage()]
    assert len(said) == 1 and str(plain) in said[0], said
    # The person's checkout is clean at that commit; the plan's work is elsewhere.
    assert git(plain, "status", "--porcelain") == ""
    assert not (plain / "x.txt").exists()


def test_a_missing_directory_is_created_and_initialised(tmp_path: Path) -> None:
    gw = GitWorkspace(tmp_path / "new" / "ws", tmp_path / "state")
    base = gw.open_plan(PLAN, None)
    assert files_at(tmp_path / "new" / "ws" / ".git", base) == {}


def test_workers_meeting_one_plain_directory_at_once_make_one_repository(tmp_path: Path) -> None:
    """Processes of their own, each with its own state directory, all opening the same
    plain directory at once (two workers and `dplan run --embedded` starting together):
    one initialises it, the others find it, every one gets the same base."""
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("a\n")
    probe = (
        "import sys; from pathlib import Path\n"
        "from durable_plans.activities.git_workspace import GitWorkspace\n"
        "print(GitWorkspace(Path(sys.argv[1]), Path(sys.argv[2])).open_plan('p', None))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", probe, str(plain), str(tmp_path / f"state-{i}")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(6)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    bases = {out.strip() for out, _ in outs}
    assert bases == {git(plain, "rev-parse", "HEAD")}
    assert git(plain, "rev-list", "--count", "HEAD") == "1"


def test_a_directory_inside_another_repository_is_its_own_repository(
    repo: Path, tmp_path: Path
) -> None:
    inner = repo / "workspace"
    inner.mkdir()
    (inner / "w.txt").write_text("w\n")
    base = GitWorkspace(inner, tmp_path / "state").open_plan(PLAN, None)
    assert files_at(inner / ".git", base) == {"w.txt": "w"}
    assert git(repo, "rev-parse", "HEAD") != base


def test_the_base_resolves_from_head_a_branch_a_tag_or_a_commit(
    gw: GitWorkspace, repo: Path
) -> None:
    head = git(repo, "rev-parse", "HEAD")
    assert gw.open_plan(PLAN, None) == head
    assert gw.open_plan(PLAN, "feature") == git(repo, "rev-parse", "feature")
    assert gw.open_plan(PLAN, "v1") == git(repo, "rev-parse", "v1^{commit}")
    assert gw.open_plan(PLAN, head[:10]) == head
    assert gw.open_plan(PLAN, "main~1") == git(repo, "rev-parse", "v1^{commit}")
    # The base is kept under the plan's refs, so it stays when the branch moves.
    assert head in git(repo, "for-each-ref", f"refs/dplan/{PLAN}")


@pytest.mark.parametrize("name", ["no-such-branch", "0" * 40, "--output=/tmp/x", "v1..main"])
def test_an_unknown_base_is_one_clear_line(gw: GitWorkspace, name: str) -> None:
    with pytest.raises(WorkspaceUnavailable) as caught:
        gw.open_plan(PLAN, name)
    text = str(caught.value)
    assert name in text and "\n" not in text
    assert "branch, tag or commit" in text


def test_a_repository_without_commits_says_so(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(WorkspaceUnavailable, match="has no commit yet"):
        GitWorkspace(empty, tmp_path / "state").open_plan(PLAN, None)


# --------------------------------------------------------------------------- trees and commits


def test_a_commit_holds_untracked_files_and_leaves_ignored_ones_out(
    gw: GitWorkspace, repo: Path
) -> None:
    base = gw.open_plan(PLAN, None)
    commit = write(
        gw,
        ref(base),
        {
            "new/deep/file.txt": "new\n",
            "shared.txt": "one\nTWO\nthree\n",
            "README.md": None,
            "run.log": "ignored\n",
            "build/out.bin": "ignored\n",
        },
    )
    assert commit is not None
    files = files_at(git_dir(repo), commit)
    assert files["new/deep/file.txt"] == "new"
    assert files["shared.txt"] == "one\nTWO\nthree"
    assert "README.md" not in files and "run.log" not in files and "build/out.bin" not in files
    # The tree's ref names the attempt's latest commit; its parent is the call's head.
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0")) == commit
    assert git(repo, "rev-parse", f"{commit}^") == base
    assert git(repo, "log", "-1", "--format=%an <%ae> %at %cn %ct %s", commit) == (
        f"coder <coder@dplan.invalid> {int(AT)} coder {int(AT)} a@0 turn 1.0: write_file"
    )


def test_a_call_that_changes_nothing_makes_no_commit(gw: GitWorkspace, repo: Path) -> None:
    base = gw.open_plan(PLAN, None)
    assert write(gw, ref(base), {"shared.txt": "one\ntwo\nthree\n", "x.log": "ignored"}) is None
    assert git(repo, "rev-parse", "--verify", "--quiet", tree_ref(PLAN, "a@0"), check=False) == ""


def test_the_same_call_gives_the_same_commit_in_separate_state_dirs(tmp_path: Path) -> None:
    one = user_repo(tmp_path / "one")
    two = tmp_path / "two"
    git(tmp_path, "clone", "-q", str(one), str(two))
    made = []
    for repo, state in ((one, tmp_path / "s1"), (two, tmp_path / "s2")):
        gw = GitWorkspace(repo, state)
        base = gw.open_plan(PLAN, "main")
        first = write(gw, ref(base), {"a.txt": "a\n"})
        assert first is not None
        second = write(gw, ref(first), {"b.txt": "b\n"}, turn=2)
        # A retried call (same inputs) makes the same commit, not a second one.
        assert write(gw, ref(first), {"b.txt": "b\n"}, turn=2) == second
        made.append((first, second))
    assert made[0] == made[1]


def test_a_tree_left_dirty_by_a_crash_is_reset_to_the_call_head(
    gw: GitWorkspace, repo: Path
) -> None:
    base = gw.open_plan(PLAN, None)
    at = ref(base)
    with gw.checkout(at) as lease:
        lease.mark_changing()
        (lease.path / "shared.txt").write_text("half written")
        (lease.path / "README.md").unlink()
        (lease.path / "junk").mkdir()
        (lease.path / "junk" / "left.txt").write_text("left behind")
        (lease.path / "debug.log").write_text("ignored leftovers go too")
        # The worker dies here: no commit, the lease's lock goes with the process.
    with gw.checkout(at) as lease:
        on_disk = {
            p.relative_to(lease.path).as_posix(): p.read_text()
            for p in lease.path.rglob("*")
            if p.is_file()
        }
    expected = files_at(git_dir(repo), base)
    assert {k: v.rstrip("\n") for k, v in on_disk.items()} == expected


def test_a_clean_tree_is_reused_and_moves_to_a_new_head_without_a_full_reset(
    gw: GitWorkspace, repo: Path
) -> None:
    base = gw.open_plan(PLAN, None)
    first = write(gw, ref(base), {"a.txt": "a\n"})
    assert first is not None
    with gw.checkout(ref(first)) as lease:
        (lease.path / "kept.log").write_text("an ignored build output")
    second = write(gw, ref(first), {"b.txt": "b\n"}, turn=2)
    assert second is not None
    with gw.checkout(ref(second)) as lease:
        assert (lease.path / "a.txt").read_text() == "a\n"
        assert (lease.path / "b.txt").read_text() == "b\n"
        assert (lease.path / "kept.log").exists()  # clean trees are not wiped
    # Another host (or a retry elsewhere) asking for an older head gets exactly it.
    with gw.checkout(ref(base)) as lease:
        assert not (lease.path / "a.txt").exists()


def test_a_stale_writer_is_refused_and_never_wins(gw: GitWorkspace, repo: Path) -> None:
    base = gw.open_plan(PLAN, None)
    first = write(gw, ref(base), {"a.txt": "the workflow's\n"})
    assert first is not None
    second = write(gw, ref(first), {"b.txt": "b\n"}, turn=2)
    # An attempt still working from the old head (the workflow moved on) is refused.
    with pytest.raises(WorkspaceUnavailable, match="stale writer") as caught:
        write(gw, ref(base), {"a.txt": "a zombie's\n"}, turn=1, at_s=AT + 5)
    assert tree_ref(PLAN, "a@0") in str(caught.value)
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0")) == second


def test_a_retry_that_writes_differently_keeps_its_earlier_attempt_s_commit(
    gw: GitWorkspace, repo: Path
) -> None:
    """An earlier attempt of the same call committed (and may have been answered, its
    worker only slow): the retry returns that commit instead of making a second one, and
    the next call finds the tree reset to it."""
    base = gw.open_plan(PLAN, None)
    first = write(gw, ref(base), {"a.txt": "first attempt\n"})
    assert write(gw, ref(base), {"a.txt": "second attempt\n"}) == first
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0")) == first
    with gw.checkout(ref(first)) as lease:
        assert (lease.path / "a.txt").read_text() == "first attempt\n"


def test_another_execution_s_commit_is_never_taken_for_an_earlier_attempt(
    gw: GitWorkspace, repo: Path
) -> None:
    """Two executions of a plan that name a tree alike: the second's call is refused,
    loudly, instead of quietly returning the first execution's commit as its own."""
    base = gw.open_plan(PLAN, None)
    at = ref(base)
    for scope, text in (("plan-1.run1/a", "run 1\n"), ("plan-1.run2/a", "run 2\n")):
        message = tool_commit_message(at.tree, 1, 0, "write_file", scope)
        with gw.checkout(at) as lease:
            lease.mark_changing()
            (lease.path / "a.txt").write_text(text)
            if scope.endswith("run1/a"):
                first = lease.commit(message, AT)
                continue
            with pytest.raises(WorkspaceUnavailable, match="stale writer"):
                lease.commit(message, AT)
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0")) == first


def test_a_sub_agent_tree_and_its_parent_keep_their_refs_side_by_side(
    gw: GitWorkspace, repo: Path
) -> None:
    base = gw.open_plan(PLAN, None)
    parent = write(gw, ref(base), {"p.txt": "parent\n"})
    assert parent is not None
    child = write(gw, ref(parent, tree="a@0/agent-1-0"), {"c.txt": "child\n"})
    assert child is not None
    # The parent carries on from the sub-agent's commit (a fast-forward of its tree).
    after = write(gw, ref(child), {"p2.txt": "parent again\n"}, turn=3)
    assert after is not None
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0")) == after
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0/agent-1-0")) == child
    assert set(files_at(git_dir(repo), after)) >= {"p.txt", "c.txt", "p2.txt"}


def test_answered_commit_finds_the_commit_of_an_answered_call(gw: GitWorkspace, repo: Path) -> None:
    base = gw.open_plan(PLAN, None)
    message = tool_commit_message("a@0", 1, 0, "write_file")
    assert gw.answered_commit(ref(base), message) is None
    made = write(gw, ref(base), {"a.txt": "a\n"})
    assert gw.answered_commit(ref(base), message) == made
    assert gw.answered_commit(ref(base), "a@0 turn 9.0: write_file") is None


# --------------------------------------------------------------------------- merges


def merge_input(
    base: str, parents: list[tuple[str, str]], subtask: str = "join"
) -> WorkspaceMergeInput:
    return WorkspaceMergeInput(
        plan_id=PLAN, subtask=subtask, base=base, parents=tuple(parents), at_s=AT, identity=AGENT
    )


def test_non_overlapping_changes_merge_deterministically(gw: GitWorkspace, repo: Path) -> None:
    base = gw.open_plan(PLAN, None)
    a = write(gw, ref(base, "a@0"), {"a.txt": "a\n", "shared.txt": "ONE\ntwo\nthree\n"})
    b = write(gw, ref(base, "b@0"), {"b.txt": "b\n", "shared.txt": "one\ntwo\nTHREE\n"})
    assert a is not None and b is not None
    merged = gw.merge(merge_input(base, [("a", a), ("b", b)]))
    files = files_at(git_dir(repo), merged)
    assert files["a.txt"] == "a" and files["b.txt"] == "b"
    assert files["shared.txt"] == "ONE\ntwo\nTHREE"
    assert git(repo, "rev-list", "--parents", "-1", merged).split()[1:] == [a, b]
    assert gw.merge(merge_input(base, [("a", a), ("b", b)])) == merged
    # One dependency: its commit as is; none: the base; a parent already contained: skipped.
    assert gw.merge(merge_input(base, [("a", a)])) == a
    assert gw.merge(merge_input(base, [])) == base
    assert gw.merge(merge_input(base, [("m", merged), ("a", a)])) == merged


def test_changes_to_the_same_lines_are_a_conflict_naming_files_and_subtasks(
    gw: GitWorkspace,
) -> None:
    base = gw.open_plan(PLAN, None)
    a = write(gw, ref(base, "a@0"), {"shared.txt": "from a\n", "a.txt": "a\n"})
    b = write(gw, ref(base, "b@0"), {"shared.txt": "from b\n", "README.md": "b\n"})
    c = write(gw, ref(base, "c@0"), {"c.txt": "c\n"})
    assert a is not None and b is not None and c is not None
    with pytest.raises(WorkspaceConflict) as caught:
        gw.merge(merge_input(base, [("a", a), ("c", c), ("b", b)], subtask="d"))
    details = caught.value.details
    assert details.files == ("shared.txt",)
    assert details.subtasks == ("a", "b")
    assert details.resolution_ref == resolution_ref(PLAN, "d") == f"refs/dplan/{PLAN}/resolve/d"
    assert str(caught.value) == (
        "workspace conflict: shared.txt changed by subtasks a and b; resolve it by pushing a "
        f"commit that contains both to refs/dplan/{PLAN}/resolve/d, then dplan resume"
    )


def test_a_resolution_ref_that_contains_both_parents_is_the_start(
    gw: GitWorkspace, repo: Path
) -> None:
    base = gw.open_plan(PLAN, None)
    a = write(gw, ref(base, "a@0"), {"shared.txt": "from a\n"})
    b = write(gw, ref(base, "b@0"), {"shared.txt": "from b\n"})
    assert a is not None and b is not None
    where = resolution_ref(PLAN, "d")
    # A resolution that does not contain both is not taken (and the message says so).
    git(repo, "update-ref", where, a)
    with pytest.raises(WorkspaceConflict, match="does not contain both"):
        gw.merge(merge_input(base, [("a", a), ("b", b)], subtask="d"))
    # An operator's merge of both, pushed to the ref the message named.
    work = repo.parent / "resolve"
    git(repo.parent, "clone", "-q", str(repo), str(work))
    git(work, "fetch", "-q", "origin", f"{a}:refs/x/a", f"{b}:refs/x/b")
    git(work, "checkout", "-q", a)
    git(work, "merge", "-q", "--no-edit", b, check=False)
    (work / "shared.txt").write_text("from a\nfrom b\n")
    git(work, "commit", "-qam", "resolve")
    git(work, "push", "-q", "origin", f"HEAD:{where}")
    resolved = git(work, "rev-parse", "HEAD")
    assert gw.merge(merge_input(base, [("a", a), ("b", b)], subtask="d")) == resolved


def test_publish_leaves_a_conflicting_commit_out_by_name(gw: GitWorkspace, repo: Path) -> None:
    base = gw.open_plan(PLAN, None)
    a = write(gw, ref(base, "a@0"), {"shared.txt": "from a\n"})
    b = write(gw, ref(base, "b@0"), {"shared.txt": "from b\n"})
    c = write(gw, ref(base, "c@0"), {"c.txt": "c\n"})
    assert a is not None and b is not None and c is not None
    inp = WorkspacePublishInput(
        plan_id=PLAN, base=base, commits=(("a", a), ("b", b), ("c", c)), at_s=AT, identity=AGENT
    )
    summary = gw.publish(inp)
    assert summary.base == base and summary.branch == f"dplan/{PLAN}"
    assert summary.left_out == ("b",)
    assert summary.result is not None
    files = files_at(git_dir(repo), summary.result)
    assert files["shared.txt"] == "from a" and files["c.txt"] == "c"
    assert git(repo, "rev-parse", f"dplan/{PLAN}") == summary.result
    # Publishing again is a no-op; a retried plan's new result moves the branch.
    assert gw.publish(inp) == summary
    d = write(gw, ref(base, "d@0"), {"d.txt": "d\n"})
    assert d is not None
    later = gw.publish(inp.model_copy(update={"commits": (*inp.commits, ("d", d))}))
    assert later.result != summary.result
    assert git(repo, "rev-parse", f"dplan/{PLAN}") == later.result


def test_publish_refuses_a_branch_the_person_has_checked_out(gw: GitWorkspace, repo: Path) -> None:
    base = gw.open_plan(PLAN, None)
    git(repo, "branch", f"dplan/{PLAN}")
    git(repo, "checkout", "-q", f"dplan/{PLAN}")
    inp = WorkspacePublishInput(plan_id=PLAN, base=base, commits=(), at_s=AT, identity=AGENT)
    with pytest.raises(WorkspaceUnavailable, match="is checked out"):
        gw.publish(inp)


def test_the_person_s_checkout_index_head_and_branches_are_untouched(
    gw: GitWorkspace, repo: Path
) -> None:
    before = user_view(repo)
    base = gw.open_plan(PLAN, None)
    a = write(gw, ref(base, "a@0"), {"README.md": "plan's readme\n", "notes.txt": "plan\n"})
    b = write(gw, ref(base, "b@0"), {"src/app.py": "print('b')\n"})
    assert a is not None and b is not None
    with gw.checkout(ref(a, "a@0")) as lease:  # a reset, a clean
        lease.mark_changing()
        (lease.path / "junk").write_text("x")
    write(gw, ref(a, "a@0"), {"x.txt": "x\n"}, turn=2)
    merged = gw.merge(merge_input(base, [("a", a), ("b", b)]))
    gw.publish(
        WorkspacePublishInput(
            plan_id=PLAN, base=base, commits=(("j", merged),), at_s=AT, identity=AGENT
        )
    )
    after = user_view(repo)
    assert after.pop("refs") != before.pop("refs")  # only the result branch was added
    assert after == before
    branches = git(repo, "for-each-ref", "--format=%(refname)", "refs/heads")
    assert branches.splitlines() == [
        "refs/heads/dplan/plan-1",
        "refs/heads/feature",
        "refs/heads/main",
    ]


# --------------------------------------------------------------------------- a remote


@pytest.fixture
def served(tmp_path: Path, repo: Path) -> Iterator[str]:
    """A bare remote holding the user's branches, served by ``git daemon``."""
    served_dir = tmp_path / "served"
    served_dir.mkdir()
    git(tmp_path, "clone", "-q", "--bare", str(repo), str(served_dir / "work.git"))
    with git_daemon(served_dir) as url:
        yield f"{url}/work.git"


def test_two_workers_share_commits_through_a_git_daemon_remote(
    served: str, tmp_path: Path, repo: Path
) -> None:
    one = GitWorkspace(tmp_path / "unused", tmp_path / "host1", remote=served)
    two = GitWorkspace(tmp_path / "unused", tmp_path / "host2", remote=served)
    base = one.open_plan(PLAN, None)
    assert base == git(repo, "rev-parse", "main")
    assert two.open_plan(PLAN, "feature") == git(repo, "rev-parse", "feature")
    written = write(one, ref(base, "w@0"), {"w.txt": "from host 1\n"})
    assert written is not None
    # Host 2 lacks the commit: it fetches it to build the reader's tree.
    with two.checkout(ref(written, "r@0")) as lease:
        assert (lease.path / "w.txt").read_text() == "from host 1\n"
    # Host 2 carries the writer's tree on; host 1, whose cache still says the tree is
    # at ``written``, is refused when it writes from there: a stale push never wins.
    moved = write(two, ref(written, "w@0"), {"w.txt": "from host 2\n"}, turn=2)
    assert moved is not None
    with pytest.raises(WorkspaceUnavailable, match="stale writer"):
        write(one, ref(written, "w@0"), {"w.txt": "late from host 1\n"}, turn=3)
    # A slow attempt of host 2's very call, on host 1, keeps host 2's commit.
    assert write(one, ref(written, "w@0"), {"w.txt": "slow\n"}, turn=2, at_s=AT + 9) == moved
    remote_refs = git(tmp_path, "ls-remote", served)
    assert f"{moved}\t{tree_ref(PLAN, 'w@0')}" in remote_refs
    # A retried call on the other host (same inputs) finds its commit already there.
    assert write(one, ref(written, "w@0"), {"w.txt": "from host 2\n"}, turn=2) == moved
    # Merge and publish run on either host; the result branch lands on the remote.
    other = write(one, ref(base, "o@0"), {"o.txt": "o\n"})
    assert other is not None
    merged = two.merge(merge_input(base, [("w", moved), ("o", other)]))
    with one.checkout(ref(merged, "j@0")) as lease:
        assert (lease.path / "w.txt").read_text() == "from host 2\n"
        assert (lease.path / "o.txt").read_text() == "o\n"
    summary = one.publish(
        WorkspacePublishInput(
            plan_id=PLAN, base=base, commits=(("j", merged),), at_s=AT, identity=AGENT
        )
    )
    assert f"{summary.result}\trefs/heads/dplan/{PLAN}" in git(tmp_path, "ls-remote", served)


def test_a_remote_that_does_not_answer_is_worth_a_retry(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    url = f"https://bot:s3cret-token@127.0.0.1:{port}/work.git"
    gw = GitWorkspace(tmp_path / "unused", tmp_path / "state", remote=url)
    with pytest.raises(WorkspaceBusy) as caught:
        gw.open_plan(PLAN, None)
    text = str(caught.value)
    assert "s3cret" not in text and "\n" not in text
    assert f"https://127.0.0.1:{port}/work.git" in text
    gone = GitWorkspace(
        tmp_path / "unused", tmp_path / "state2", remote=f"git://127.0.0.1:{port}/work.git"
    )
    with pytest.raises(WorkspaceBusy, match="did not answer"):
        gone.open_plan(PLAN, None)


def test_a_remote_that_is_not_a_repository_is_unavailable(served: str, tmp_path: Path) -> None:
    wrong = served.replace("work.git", "nope.git")
    with pytest.raises(WorkspaceUnavailable, match="cannot be used"):
        GitWorkspace(tmp_path / "u", tmp_path / "s1", remote=wrong).open_plan(PLAN, None)
    with pytest.raises(WorkspaceUnavailable, match="does not appear to be a git repository"):
        GitWorkspace(tmp_path / "u", tmp_path / "s2", remote=str(tmp_path / "nothing")).open_plan(
            PLAN, None
        )


def test_urls_lose_their_credentials() -> None:
    assert redact_url("fatal: unable to access 'https://u:p4ss@h/x.git/'") == (
        "fatal: unable to access 'https://h/x.git/'"
    )
    assert redact_url("ssh://git@host/x") == "ssh://host/x"


def test_git_subprocesses_see_no_user_config(gw: GitWorkspace, tmp_path: Path) -> None:
    """A hook or a signing setting in the repository's own config cannot act on a plan's
    commits (the hook would write a file; signing would fail without a key)."""
    repo = gw.repository
    hook = repo / ".git" / "hooks" / "reference-transaction"
    marker = tmp_path / "hook-ran"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    git(repo, "config", "commit.gpgSign", "true")
    git(repo, "config", "user.signingKey", "NO-SUCH-KEY")
    base = gw.open_plan(PLAN, None)
    assert write(gw, ref(base), {"a.txt": "a\n"}) is not None
    assert not marker.exists()


# --------------------------------------------------------------------------- killed mid-command


def test_a_worker_killed_while_initialising_leaves_nothing_the_next_cannot_use(
    tmp_path: Path,
) -> None:
    """SIGKILL at moments inside the first opening of a plain directory (its files many,
    so the opening takes a while): the next worker always makes or finds a repository
    whose first commit is the directory's content, never a half-made one."""
    probe = (
        "import sys; from pathlib import Path\n"
        "from durable_plans.activities.git_workspace import GitWorkspace\n"
        "print(GitWorkspace(Path(sys.argv[1]), Path(sys.argv[2])).open_plan('p', None))"
    )
    for attempt, delay_s in enumerate((0.0, 0.005, 0.02, 0.05)):
        plain = tmp_path / f"plain-{attempt}"
        plain.mkdir()
        for i in range(1500):
            (plain / f"f{i}.txt").write_text(f"{i}\n")
        first = subprocess.Popen(
            [sys.executable, "-c", probe, str(plain), str(tmp_path / f"s{attempt}a")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # killed with its git children, as a host dies
        )
        deadline = time.monotonic() + 60
        while first.poll() is None and not any(plain.glob(".git*")):
            assert time.monotonic() < deadline, "the first opener never started"
            time.sleep(0.0005)
        time.sleep(delay_s)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        second = subprocess.run(
            [sys.executable, "-c", probe, str(plain), str(tmp_path / f"s{attempt}b")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode == 0, second.stderr
        base = second.stdout.strip()
        assert git(plain, "rev-parse", "HEAD") == base
        assert len(git(plain, "ls-tree", "-r", "--name-only", base).splitlines()) == 1500
        assert not list(plain.glob(".git-dplan-init-*"))


def test_lock_files_left_by_a_killed_git_do_not_block_the_next_call(
    gw: GitWorkspace, repo: Path
) -> None:
    """A process killed while git held a tree's index lock, or a tree ref's lock, left
    the lock file behind; the next call on that tree goes through."""
    base = gw.open_plan(PLAN, None)
    first = write(gw, ref(base), {"a.txt": "1\n"})
    assert first is not None
    index_lock = next((gw.state_dir / "trees").rglob("*.index")).with_suffix(".index.lock")
    index_lock.write_text("")
    ref_lock = git_dir(repo) / f"{tree_ref(PLAN, 'a@0')}.lock"
    ref_lock.write_text("")
    second = write(gw, ref(first), {"a.txt": "2\n"}, turn=2)
    assert second is not None
    assert git(repo, "rev-parse", tree_ref(PLAN, "a@0")) == second
    assert not index_lock.exists() and not ref_lock.exists()
