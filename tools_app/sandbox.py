"""Running untrusted code: bubblewrap (Debian's ``bubblewrap``) as an unprivileged user.

Each call gets a fresh directory holding a copy of the run's workspace files,
bound at ``/work``; the rest of the sandbox is the host's ``/usr`` read-only,
a private ``/tmp``, ``/proc`` and ``/dev``, and nothing else — no ``/etc``,
no home, no project files. All namespaces are new (``--unshare-all``): no
network, no other processes; the environment is empty but for ``PATH``,
``HOME`` and ``LANG``. ``prlimit`` bounds memory (address space), processes
and file size; the wall clock is enforced from outside (the whole process
group is killed); output beyond the cap is dropped and marked. Files the code
created or changed (text, under the size cap) are reported back to be written
to the workspace.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from django.conf import settings

NOBODY = 65534
# Interpreters must live under /usr, the only part of the host the sandbox sees.
PYTHON = next((path for path in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(path)),
              "/usr/bin/python3")
LANGUAGES = {
    "python": ("main.py", [PYTHON, "-I", "main.py"]),
    "bash": ("main.sh", ["/usr/bin/bash", "--noprofile", "--norc", "main.sh"]),
}
SCRIPT_NAMES = {name for name, _ in LANGUAGES.values()}


class SandboxUnavailable(RuntimeError):
    """The machine cannot sandbox code (bubblewrap missing): nothing is run."""


@dataclass
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 256
    processes: int = 64
    max_output: int = 64 * 1024
    max_file_bytes: int = 1024 * 1024

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(timeout_s=settings.MAS_CODE_EXEC_TIMEOUT_S, memory_mb=settings.MAS_CODE_EXEC_MEMORY_MB,
                   processes=settings.MAS_CODE_EXEC_PROCESSES, max_output=settings.MAS_CODE_EXEC_MAX_OUTPUT,
                   max_file_bytes=settings.MAS_CODE_EXEC_MAX_FILE_BYTES)


@dataclass
class Result:
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    changed: dict[str, str] = field(default_factory=dict)  # path -> new content
    skipped: list[str] = field(default_factory=list)  # changed files not copied back, with why


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable("code_exec needs bubblewrap (apt-get install bubblewrap); no code was run")
    return found


def command(language: str, limits: Limits, workdir: Path) -> list[str]:
    script, argv = LANGUAGES[language]
    # Root is exempt from the process limit: a root worker drops to nobody first. An unprivileged
    # worker (the container's user) runs bubblewrap as itself.
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
    return [
        *drop,
        bwrap(), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
        "--bind", str(workdir), "/work", "--chdir", "/work",
        "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        "/usr/bin/prlimit", f"--as={limits.memory_mb * 1024 * 1024}", f"--nproc={limits.processes}",
        f"--fsize={limits.max_file_bytes * 4}", "--core=0", "--",
        *argv,
    ]


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    """Up to ``cap`` bytes, draining the rest (so the child never blocks on a full pipe); returns (kept, total)."""
    kept, total = bytearray(), 0
    while chunk := await stream.read(65536):
        total += len(chunk)
        if len(kept) < cap:
            kept += chunk[: cap - len(kept)]
    return bytes(kept), total


def _text(data: bytes, total: int, cap: int) -> str:
    text = data.decode("utf-8", "replace")
    if total > cap:
        text += f"\n[truncated: {total:,} bytes of output, the first {cap:,} shown]"
    return text


async def run(language: str, code: str, files: dict[str, str], limits: Limits) -> Result:
    """Run ``code`` with ``files`` (workspace path -> text) under /work; report what changed."""
    if language not in LANGUAGES:
        raise ValueError(f"unknown language {language!r}: use one of {', '.join(LANGUAGES)}")
    root = Path(tempfile.mkdtemp(prefix="mas-code-"))
    try:
        root.chmod(0o777)  # the sandbox runs as nobody
        before: dict[str, str] = {}
        for path, content in files.items():
            target = root / path
            _mkdirs(root, target.parent)
            target.write_text(content, encoding="utf-8")
            target.chmod(0o666)
            before[path] = content
        script = LANGUAGES[language][0]
        (root / script).write_text(code, encoding="utf-8")
        (root / script).chmod(0o444)
        started = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *command(language, limits, root), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, start_new_session=True, env={"PATH": "/usr/bin:/bin"})
        readers = asyncio.gather(_read_capped(process.stdout, limits.max_output),
                                 _read_capped(process.stderr, limits.max_output))
        timed_out = False
        try:
            await asyncio.wait_for(process.wait(), timeout=limits.timeout_s)
        except asyncio.TimeoutError:
            timed_out = True
            _kill(process.pid)
            await process.wait()
        except asyncio.CancelledError:
            _kill(process.pid)
            raise
        (out, out_total), (err, err_total) = await readers
        duration = round(time.monotonic() - started, 3)
        result = Result(exit_code=None if timed_out else process.returncode,
                        stdout=_text(out, out_total, limits.max_output), stderr=_text(err, err_total, limits.max_output),
                        duration_s=duration, timed_out=timed_out)
        _collect(root, before, limits, result, skip={script})
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _mkdirs(root: Path, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    while directory != root:
        directory.chmod(0o777)
        directory = directory.parent


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _collect(root: Path, before: dict[str, str], limits: Limits, result: Result, *, skip: set[str]) -> None:
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if relative in skip or path.is_symlink() or not path.is_file():
            if path.is_symlink():
                result.skipped.append(f"{relative} (a symbolic link)")
            continue
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            result.skipped.append(f"{relative} ({size:,} bytes, over {limits.max_file_bytes:,})")
            continue
        try:
            content = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            result.skipped.append(f"{relative} (not UTF-8 text)")
            continue
        if before.get(relative) != content:
            result.changed[relative] = content
