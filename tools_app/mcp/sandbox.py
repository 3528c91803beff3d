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
and ``PATH``/``HOME``, nothing of the worker's. Under a root worker it runs as
``nobody`` (``setpriv``, once bubblewrap has set up the sandbox as root), with
no capabilities and none to gain.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import PurePosixPath

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


def wrap(command: str, args: list[str], env: dict[str, str],
         inherited: list[str]) -> tuple[str, list[str], dict[str, str]]:
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
    network = settings.MAS_MCP_STDIO_NETWORK
    if os.geteuid() == 0:
        # A root worker's bubblewrap sets up the sandbox as root (it binds the operator's folders wherever they
        # are); the server then becomes nobody for real (no capabilities, none to gain), as code_exec does.
        # A user namespace would keep it root on the host's files.
        arguments = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try",
                     *([] if network else ["--unshare-net"]), "--die-with-parent", "--new-session",
                     "--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                     "--cap-add", "CAP_SETPCAP"]
        become = [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}",
                  "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]
    else:
        arguments = ["--unshare-all", *(["--share-net"] if network else []), "--die-with-parent", "--new-session",
                     "--cap-drop", "ALL"]
        become = []
    size = str(settings.MAS_MCP_STDIO_TMPFS_BYTES)
    arguments += [*system_dirs(), "--symlink", "usr/sbin", "/sbin",
                  "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
                  "--size", size, "--tmpfs", "/home", "--perms", "0777", "--dir", HOME]
    made: set[str] = set()
    for path in [*ETC, *settings.MAS_MCP_STDIO_READ_ONLY]:
        # The folders leading to it are the sandbox's own, empty but for it, and open to walk through.
        for parent in list(reversed(PurePosixPath(path).parents))[1:]:
            if str(parent) not in made and str(parent) not in ("/tmp", "/home", HOME) and not str(parent).startswith(
                    ("/usr", "/proc", "/dev")):
                made.add(str(parent))
                arguments += ["--perms", "0755", "--dir", str(parent)]
        arguments += ["--ro-bind-try", path, path]
    arguments += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", HOME]
    for name in inherited:
        if name not in environment:
            arguments += ["--unsetenv", name]
    return program, [*arguments, "--", *become, command, *args], environment
