"""Stands between the worker and a real MCP server, to kill the server mid-call.

    python -m tests.integration.mcp_killer FLAG STARTS -- COMMAND ARGS...

Runs COMMAND with its stdout as ours (answers go straight to the client) and forwards our
stdin to it line by line. Each start appends a line to STARTS. While the file FLAG
exists, the first ``tools/call`` request removes FLAG and SIGKILLs the server and this
process before the server can answer: the client sees the connection die mid-call.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys


def main() -> None:
    flag, starts = sys.argv[1], sys.argv[2]
    command = sys.argv[sys.argv.index("--") + 1 :]
    with open(starts, "a") as f:
        f.write("start\n")
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=sys.stdout.fileno())
    assert server.stdin is not None
    for line in sys.stdin.buffer:
        try:
            method = json.loads(line).get("method")
        except ValueError:
            method = None
        if method == "tools/call" and os.path.exists(flag):
            os.remove(flag)
            server.kill()
            os.kill(os.getpid(), signal.SIGKILL)
        server.stdin.write(line)
        server.stdin.flush()
    server.stdin.close()
    server.wait()


if __name__ == "__main__":
    main()
