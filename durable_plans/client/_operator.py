"""Who is asking: the name the workflows record beside every operator's decision."""

from __future__ import annotations

import getpass
import socket

__all__ = ["default_operator"]


def default_operator() -> str:
    """``user@host``, for a person at a terminal; a service names itself instead."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without one): still say the host
        user = "unknown"
    return f"{user}@{socket.gethostname()}"
