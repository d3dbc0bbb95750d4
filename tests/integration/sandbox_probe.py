"""Escape probes an agent runs with ``python3`` (copied into the test's workspace).

``python3 sandbox_probe.py all HEX`` runs the seven probes of issue 32 against the
targets named in HEX (JSON, hex-encoded so that no argument looks like a path to
run_command's guard: the sandbox, not the guard, is what is tested) and prints one line
each: ``PROBE name: BLOCKED why`` or ``PROBE name: ESCAPED what``. The other modes are
the limits: ``fork``, ``hog MB``, ``sleep``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time


def _env(t: dict[str, object]) -> str:
    name, value = str(t["canary_name"]), str(t["canary"])
    found = []
    if os.environ.get(name) == value:
        found.append("os.environ")
    try:
        with open(f"/proc/{t['worker_pid']}/environ", "rb") as f:
            data = f.read()
    except OSError as exc:
        environ = f"/proc/<worker>/environ unreadable ({type(exc).__name__})"
    else:
        environ = f"/proc/<worker>/environ read ({len(data)} bytes)"
        if value.encode() in data:
            found.append("/proc/<worker>/environ")
    if found:
        return f"ESCAPED canary in {' and '.join(found)}; {environ}"
    if "read (" in environ:
        return f"ESCAPED {environ}, canary not in it"
    return f"BLOCKED {environ}, canary not in os.environ"


def _write(t: dict[str, object]) -> str:
    try:
        with open(str(t["outside"]), "w") as f:
            f.write("escaped\n")
    except OSError as exc:
        return f"BLOCKED {type(exc).__name__}"
    return "ESCAPED wrote outside its tree"


def _connect(t: dict[str, object]) -> str:
    try:
        with socket.create_connection(("127.0.0.1", int(str(t["port"]))), timeout=3):
            return "ESCAPED connected to the provider's port"
    except OSError as exc:
        return f"BLOCKED {type(exc).__name__}"


def _read(path: object) -> str:
    try:
        with open(str(path), "rb") as f:
            return f"ESCAPED read {len(f.read())} bytes"
    except OSError as exc:
        return f"BLOCKED {type(exc).__name__}"


def _processes(t: dict[str, object]) -> str:
    pids = [p for p in os.listdir("/proc") if p.isdigit()]
    if str(t["worker_pid"]) in pids:
        return f"ESCAPED sees the worker's process among {len(pids)}"
    return f"BLOCKED sees {len(pids)} processes, not the worker"


def _home(t: dict[str, object]) -> str:
    try:
        names = os.listdir(str(t["home"]))
    except OSError as exc:
        return f"BLOCKED {type(exc).__name__}"
    return f"ESCAPED lists {len(names)} entries"


def probes(t: dict[str, object]) -> None:
    for name, probe in (
        ("env", _env),
        ("write", _write),
        ("connect", _connect),
        ("store", lambda t: _read(t["store"])),
        ("processes", _processes),
        ("other-tree", lambda t: _read(t["other_tree"])),
        ("home", _home),
    ):
        print(f"PROBE {name}: {probe(t)}", flush=True)


def fork() -> None:
    forked = 0
    for _ in range(300):
        try:
            pid = os.fork()
        except OSError:
            break
        if pid == 0:  # alive while the others fork, gone soon after (the guard waits)
            time.sleep(3)
            os._exit(0)
        forked += 1
    print(f"forked {forked}", flush=True)


def hog(mb: int) -> None:
    try:
        block = bytearray(mb * 1024 * 1024)
    except MemoryError:
        print("MemoryError: the memory limit held", flush=True)
        sys.exit(3)
    print(f"allocated {len(block) // (1024 * 1024)} MiB", flush=True)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "all":
        probes(json.loads(bytes.fromhex(sys.argv[2])))
    elif mode == "fork":
        fork()
    elif mode == "hog":
        hog(int(sys.argv[2]))
    elif mode == "sleep":
        print("sleeping", flush=True)
        time.sleep(600)
