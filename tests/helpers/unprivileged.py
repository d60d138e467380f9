"""Running a program without root's rights. PostgreSQL refuses to run as root, and a
permission check proves nothing as root, who may write anywhere; CI runs as root. So as
root a program runs as ``nobody`` (through util-linux's ``setpriv``, no supplementary
groups); as any other user, as that user."""

from __future__ import annotations

import os
import pwd


def nobody() -> pwd.struct_passwd:
    """The ``nobody`` account."""
    return pwd.getpwnam("nobody")


def unprivileged_argv() -> list[str]:
    """The argv prefix that runs a program as ``nobody`` when we are root; nothing
    otherwise."""
    if os.geteuid() != 0:
        return []
    user = nobody()
    return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups"]
