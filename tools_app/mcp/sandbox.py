"""The sandbox of stdio MCP servers: bubblewrap, as ``code_exec`` (:mod:`tools_app.sandbox`), with the network.

A stdio server is a command a team admin chose, run on the server. It gets
new namespaces (its own processes, hostname, IPC; the network is the host's
unless ``MAS_MCP_STDIO_NETWORK=0``), no capabilities, the host's ``/usr``
read-only and of ``/etc`` only what name resolution and TLS need, the
folders the operator lists in ``MAS_MCP_STDIO_READ_ONLY`` read-only (an
interpreter or servers installed elsewhere), and a memory-backed home
(``/home/mcp``, its working directory) and ``/tmp``; ``/`` and ``/dev`` are
read-only. It does not see ``var/`` (the definitions, workspaces and logs of
every team), the repository, the worker's home or other processes. Its
environment is the row's ``env`` (declared team secrets and stored values)
and ``PATH``/``HOME``, nothing of the worker's. A root worker runs it as
``nobody`` in a user namespace.
"""

from __future__ import annotations

import os
import re

from django.conf import settings

from tools_app.sandbox import NOBODY, SandboxUnavailable, bwrap, system_dirs

HOME = "/home/mcp"
PATH = "/usr/local/bin:/usr/bin:/bin"
# Of /etc, what resolving names and checking certificates needs (each bound only when the host has it).
ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf",
       "/etc/ssl/certs", "/etc/ca-certificates", "/etc/alternatives", "/etc/localtime", "/etc/ld.so.cache")
# Variables the C library and loader of bubblewrap itself honour (started before the sandbox exists, as the
# worker's user): never from a row. The server gets its env through bubblewrap's own environment, not its
# command line (which every local user can read in /proc).
LOADER_RE = re.compile(r"^(LD_.*|GCONV_PATH|GLIBC_TUNABLES|MALLOC_.*|LOCPATH|NLSPATH|HOSTALIASES|RESOLV_HOST_CONF"
                       r"|RES_OPTIONS|LOCALDOMAIN|GETCONF_DIR|NIS_PATH|TZDIR)$")


class SandboxRefused(ValueError):
    """The server cannot be started in the sandbox (its env names a loader variable)."""


def wrap(command: str, args: list[str], env: dict[str, str], inherited: list[str]) -> tuple[str, list[str], dict[str, str]]:
    """``(executable, arguments, environment)`` that run ``command args`` in the sandbox with exactly ``env``
    and ``PATH``/``HOME`` (the row's env may set them). ``inherited``: the variables the SDK adds from the
    worker's environment (its "safe" defaults): unset inside. Raises :class:`SandboxUnavailable` without
    bubblewrap, :class:`SandboxRefused` for a loader variable."""
    try:
        program = bwrap()
    except SandboxUnavailable:
        raise SandboxUnavailable("stdio MCP servers run in bubblewrap, which is not installed (apt-get install "
                                 "bubblewrap; `make sandbox`): not started") from None
    refused = sorted(name for name in env if LOADER_RE.match(name))
    if refused:
        raise SandboxRefused(f"env {', '.join(refused)}: a loader variable, not passed to a sandboxed server")
    environment = {"PATH": PATH, "HOME": HOME, **env}
    arguments = ["--unshare-all", *(["--share-net"] if settings.MAS_MCP_STDIO_NETWORK else []),
                 "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if os.geteuid() == 0:
        # Root would own the files the sandbox may read: it is nobody there (bubblewrap still binds, as root,
        # the folders the operator listed, wherever they are).
        arguments += ["--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY)]
    size = str(settings.MAS_MCP_STDIO_TMPFS_BYTES)
    arguments += [*system_dirs(), "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/home"]
    for path in [*ETC, *settings.MAS_MCP_STDIO_READ_ONLY]:
        arguments += ["--ro-bind-try", path, path]
    arguments += ["--dir", HOME, "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", HOME]
    for name in inherited:
        if name not in environment:
            arguments += ["--unsetenv", name]
    return program, [*arguments, "--", command, *args], environment
