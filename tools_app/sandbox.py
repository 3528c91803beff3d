"""Running untrusted code: bubblewrap (Debian's ``bubblewrap``) as an unprivileged user.

The sandbox sees the host's ``/usr`` read-only, ``/proc``, a read-only
``/dev`` and root, and three memory-backed filesystems of a fixed size: its
working directory ``/work`` (the workspace copy plus ``write_bytes``),
``/tmp`` (``tmp_bytes``) and ``/dev/shm`` (1 MiB). Nothing of a call touches
the host's disk, and the host holds at most those sizes for it, in memory,
freed when the sandbox ends: the workspace copy goes in through the stdin of
a supervisor inside the sandbox (:mod:`tools_app.sandbox_launcher`), and the
changed files come out through a pipe, at most ``max_files`` of them, each
under ``max_file_bytes``, read here with those bounds. All namespaces are
new (``--unshare-all``): no network, no other processes; the environment is
empty but for ``PATH``, ``HOME`` and ``LANG``. Resource limits bound memory
(address space), processes and file size; the supervisor enforces the wall
clock and ends every process the program left; output beyond the cap is
dropped and marked. When a space fills up or too many files changed,
nothing comes back and :attr:`Result.exceeded` says why.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from tools_app.sandbox_launcher import SCAN_LIMIT, SKIPPED_SHOWN

NOBODY = 65534
# Interpreters must live under /usr, the only part of the host the sandbox sees.
PYTHON = next((path for path in ("/usr/bin/python3", "/usr/local/bin/python3") if os.path.exists(path)),
              "/usr/bin/python3")
LANGUAGES = {
    "python": ("main.py", [PYTHON, "-I", "main.py"]),
    "bash": ("main.sh", ["/usr/bin/bash", "--noprofile", "--norc", "main.sh"]),
}
SCRIPT_NAMES = {name for name, _ in LANGUAGES.values()}
LAUNCHER = Path(__file__).with_name("sandbox_launcher.py").read_text(encoding="utf-8")
SHM_BYTES = 1024 * 1024
PAGE = 4096
GRACE_S = 15.0  # copying the workspace in and the changed files out, on top of the program's own time
HEADER_CAP = 256 * 1024  # the report's first line: a bounded list of at most max_files entries


class SandboxUnavailable(RuntimeError):
    """The machine cannot sandbox code (bubblewrap missing): nothing is run."""


@dataclass
class Limits:
    timeout_s: float = 10.0
    memory_mb: int = 256
    processes: int = 64
    max_output: int = 64 * 1024
    max_file_bytes: int = 1024 * 1024
    write_bytes: int = 32 * 1024 * 1024
    tmp_bytes: int = 32 * 1024 * 1024
    max_files: int = 100

    @classmethod
    def from_settings(cls) -> Limits:
        return cls(timeout_s=settings.MAS_CODE_EXEC_TIMEOUT_S, memory_mb=settings.MAS_CODE_EXEC_MEMORY_MB,
                   processes=settings.MAS_CODE_EXEC_PROCESSES, max_output=settings.MAS_CODE_EXEC_MAX_OUTPUT,
                   max_file_bytes=settings.MAS_CODE_EXEC_MAX_FILE_BYTES,
                   write_bytes=settings.MAS_CODE_EXEC_WRITE_BYTES, tmp_bytes=settings.MAS_CODE_EXEC_TMP_BYTES,
                   max_files=settings.MAS_CODE_EXEC_MAX_FILES)


@dataclass
class Result:
    exit_code: int | None
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool
    changed: dict[str, str] = field(default_factory=dict)  # path -> new content
    skipped: list[str] = field(default_factory=list)  # changed files not copied back, with why
    exceeded: list[str] = field(default_factory=list)  # quotas the program went over: then nothing came back
    failure: str | None = None  # the sandbox did not report its files: nothing came back


def bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable("code_exec needs bubblewrap (apt-get install bubblewrap); no code was run")
    return found


def size_text(n: int) -> str:
    return f"{n // 2**20} MiB" if n and n % 2**20 == 0 else f"{n:,} bytes"


def system_dirs() -> list[str]:
    """bubblewrap arguments for what every sandbox sees of the host: ``/usr`` read-only (and the merged-/usr
    links to it), its own ``/proc`` and a minimal ``/dev``. Shared with stdio MCP servers (tools_app.mcp.sandbox)."""
    return ["--ro-bind", "/usr", "/usr", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--symlink", "usr/bin", "/bin", "--proc", "/proc", "--dev", "/dev"]


def command(limits: Limits, work_bytes: int) -> list[str]:
    # Root is exempt from the process limit: a root worker drops to nobody first. An unprivileged
    # worker (the container's user) runs bubblewrap as itself.
    drop = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"] if os.geteuid() == 0 else []
    return [
        *drop,
        bwrap(), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", *system_dirs(),
        # The only writable places, each a tmpfs of a fixed size; / and /dev (bubblewrap's own
        # tmpfs, as large as half the host's memory) are made read-only once all is mounted.
        "--size", str(SHM_BYTES), "--tmpfs", "/dev/shm", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp",
        "--size", str(work_bytes), "--tmpfs", "/work", "--remount-ro", "/dev", "--remount-ro", "/",
        "--chdir", "/work",
        "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8",
        PYTHON, "-I", "-c", LAUNCHER,
    ]


def _pages(n: int) -> int:
    return -(-n // PAGE) * PAGE


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
    script, argv = LANGUAGES[language]
    blobs = [(path, content.encode("utf-8")) for path, content in files.items()]
    program = code.encode("utf-8")
    # /work holds the copy (tmpfs counts whole pages) and what the program may add to it.
    work_bytes = sum(_pages(len(data)) for _, data in blobs) + _pages(len(program)) + limits.write_bytes
    report_out, report_in = os.pipe()
    config = {
        "files": [[path, len(data)] for path, data in blobs], "script": [script, len(program)], "argv": argv,
        "report_fd": report_in, "timeout_s": limits.timeout_s, "max_files": limits.max_files,
        "max_file_bytes": limits.max_file_bytes,
        # The tmpfs sizes bound what is stored; the file size limit only keeps a single file (a
        # memfd, say) from growing past the largest of them.
        "rlimits": {"RLIMIT_AS": limits.memory_mb * 2**20, "RLIMIT_NPROC": limits.processes,
                    "RLIMIT_FSIZE": max(limits.write_bytes, limits.tmp_bytes), "RLIMIT_CORE": 0},
    }
    report = asyncio.StreamReader(limit=HEADER_CAP)
    try:
        transport, _ = await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(report), os.fdopen(report_out, "rb", buffering=0))
        started = time.monotonic()
        try:
            process = await asyncio.create_subprocess_exec(
                *command(limits, work_bytes), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, pass_fds=(report_in,), start_new_session=True,
                env={"PATH": "/usr/bin:/bin"})
        except BaseException:
            transport.close()
            raise
    finally:
        os.close(report_in)  # the sandbox's copy is the only writer left: its end is our end of file
    tasks = [asyncio.ensure_future(work) for work in (
        _read_capped(process.stdout, limits.max_output), _read_capped(process.stderr, limits.max_output),
        _read_report(report, limits), _feed(process.stdin, config, blobs, program), process.wait())]
    try:
        _, pending = await asyncio.wait(tasks, timeout=limits.timeout_s + GRACE_S)
        if pending:  # the supervisor itself is stuck: end it all, keep the output read so far
            _kill(process.pid)
            await process.wait()
            await asyncio.wait(pending, timeout=2)
    except BaseException:
        _kill(process.pid)
        raise
    finally:
        transport.close()
        for task in tasks:
            task.cancel()
    host_timeout = bool(pending)
    (out, out_total), (err, err_total) = (_outcome(task, (b"", 0)) for task in tasks[:2])
    header, sent = _outcome(tasks[2], ({}, {}))
    result = Result(exit_code=header.get("exit_code"), stdout=_text(out, out_total, limits.max_output),
                    stderr=_text(err, err_total, limits.max_output),
                    duration_s=header.get("duration_s", round(time.monotonic() - started, 3)),
                    timed_out=header.get("timed_out", False) or host_timeout)
    if host_timeout:
        result.failure = (f"the sandbox did not finish within {limits.timeout_s + GRACE_S:g} s (the program's "
                          f"{limits.timeout_s:g} s and {GRACE_S:g} s to copy files)")
    elif "problem" in header:
        result.failure = header["problem"]
    else:
        _collect(header, sent, limits, result)
    return result


def _outcome(task: asyncio.Future, default: Any) -> Any:
    return task.result() if task.done() and not task.cancelled() and task.exception() is None else default


async def _feed(stdin: asyncio.StreamWriter, config: dict[str, Any], blobs: list[tuple[str, bytes]],
                program: bytes) -> None:
    """The config line, then each file's bytes and the program's: what the supervisor unpacks into /work."""
    try:
        stdin.write(json.dumps(config).encode() + b"\n")
        for _, data in [*blobs, ("", program)]:
            stdin.write(data)
            await stdin.drain()
        stdin.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the supervisor ended early: its report (or its absence) says why


class _BadReport(ValueError):
    pass


def _expect(condition: bool, what: str) -> None:
    if not condition:
        raise _BadReport(what)


async def _read_report(reader: asyncio.StreamReader, limits: Limits) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The supervisor's report, checked and bounded: its header (or ``{"problem": ...}``) and the files sent.

    The program could have killed the supervisor (the same user), so a report that ends early or
    does not match what it announced brings nothing back.
    """
    try:
        line = await reader.readline()
        _expect(line.endswith(b"\n"), "it ended before its first line")
        header = json.loads(line)
        _expect(isinstance(header, dict), "its first line is not an object")
        sent: dict[str, bytes] = {}
        if "error" in header:
            header = {"problem": f"the sandbox's supervisor failed: {str(header['error'])[:500]}"}
        else:
            _check_header(header, limits)
        for path, size, send in header.get("files", []):
            if not send:
                continue
            frame = json.loads(await reader.readline())
            _expect(isinstance(frame, list) and len(frame) == 2 and frame[0] == path and isinstance(frame[1], int)
                    and 0 <= frame[1] <= size, f"the frame of {path!r} does not match its entry")
            sent[path] = await reader.readexactly(frame[1])
    except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as error:
        header, sent = {"problem": f"the sandbox's supervisor gave no complete report of changed files "
                                   f"({error or type(error).__name__}); the program may have ended it"}, {}
    while await reader.read(65536):  # whatever else comes (nothing, if all went well): never block the writer
        pass
    return header, sent


def _check_header(header: dict[str, Any], limits: Limits) -> None:
    ints = ("changed_count", "skipped_count")
    _expect(all(isinstance(header.get(key), int) and not isinstance(header.get(key), bool) for key in ints),
            "its counts are not numbers")
    _expect(header.get("exit_code") is None or isinstance(header["exit_code"], int), "bad exit_code")
    _expect(isinstance(header.get("duration_s"), (int, float)), "bad duration_s")
    _expect(all(isinstance(header.get(key), bool) for key in ("timed_out", "scan_overflow")), "bad flags")
    full, files, skipped = header.get("full"), header.get("files"), header.get("skipped")
    _expect(isinstance(full, list) and set(full) <= {"work", "tmp", "shm"}, "bad full")
    _expect(isinstance(files, list) and len(files) <= limits.max_files, "too many files")
    _expect(all(isinstance(f, list) and len(f) == 3 and isinstance(f[0], str) and isinstance(f[1], int)
                and isinstance(f[2], bool) and (not f[2] or f[1] <= limits.max_file_bytes) for f in files),
            "bad file entries")
    _expect(isinstance(skipped, list) and len(skipped) <= SKIPPED_SHOWN
            and all(isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s) for s in skipped),
            "bad skipped entries")


def _collect(header: dict[str, Any], sent: dict[str, bytes], limits: Limits, result: Result) -> None:
    full = set(header["full"])
    if "work" in full:
        result.exceeded.append(
            f"the program filled its working directory: at most {size_text(limits.write_bytes)} may be added "
            "to it per call (MAS_CODE_EXEC_WRITE_BYTES; each file takes at least 4 KiB); writes beyond failed "
            "with 'No space left on device'")
    if "tmp" in full:
        result.exceeded.append(
            f"the program filled /tmp: at most {size_text(limits.tmp_bytes)} may be written there per call "
            "(MAS_CODE_EXEC_TMP_BYTES); writes beyond failed with 'No space left on device'")
    if "shm" in full:
        result.exceeded.append(f"the program filled /dev/shm: at most {size_text(SHM_BYTES)} may be written there")
    if header["scan_overflow"]:
        result.exceeded.append(
            f"the program left more than {SCAN_LIMIT:,} files and folders in its working directory; at most "
            f"{limits.max_files:,} files may come back from one call (MAS_CODE_EXEC_MAX_FILES)")
    elif header["changed_count"] > limits.max_files:
        result.exceeded.append(
            f"the program created or changed {header['changed_count']:,} files; at most {limits.max_files:,} "
            "may come back from one call (MAS_CODE_EXEC_MAX_FILES)")
    if result.exceeded:
        return
    for path, why in header["skipped"]:
        result.skipped.append(f"{_shown(path)} ({_shown(why)})")
    if header["skipped_count"] > len(header["skipped"]):
        result.skipped.append(f"{header['skipped_count'] - len(header['skipped']):,} more symbolic links")
    for path, size, send in header["files"]:
        if not _utf8(path):
            result.skipped.append(f"{_shown(path)} (its name is not UTF-8)")
        elif not send:
            result.skipped.append(f"{path} ({size:,} bytes, over {limits.max_file_bytes:,})")
        else:
            try:
                result.changed[path] = sent[path].decode("utf-8")
            except UnicodeDecodeError:
                result.skipped.append(f"{path} (not UTF-8 text)")


def _shown(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a name the program made of bytes that are not UTF-8 (surrogate escapes)
        return False
    return True


def _kill(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
