"""The supervisor inside the code_exec sandbox, run there as ``python3 -I -c <this source>``: stdlib only.

It unpacks the workspace copy the host streams on stdin into ``/work`` (a
size-limited tmpfs), runs the program under its resource and time limits,
ends every process the program left behind, and reports on a pipe: one JSON
line (exit code, duration, which tmpfs filled up, the changed files), then
each file it sends back as a line ``[path, length]`` and its bytes. The
program runs as the same user and could kill this supervisor, so the host
bounds and checks everything it reads here; this process only keeps honest
programs' reports complete.
"""

import ctypes
import hashlib
import json
import os
import resource
import signal
import subprocess
import sys
import time

WORK = "/work"
# The sandbox's writable places; "full" means a write there failed for lack of space.
SPACES = {"work": WORK, "tmp": "/tmp", "shm": "/dev/shm"}
SCAN_LIMIT = 100_000  # directory entries looked at after the run, so a flood of files ends the scan
SKIPPED_SHOWN = 20
CHUNK = 1 << 20
PR_SET_DUMPABLE = 4


def main():
    # Not dumpable: the program (the same user) cannot open this process's report pipe through /proc.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    config = json.loads(sys.stdin.buffer.readline())
    report = os.fdopen(config["report_fd"], "wb")
    try:
        header, payload = supervise(config)
    except Exception as error:  # reported, so the host says why no files came back
        header, payload = {"error": f"{type(error).__name__}: {error}"}, []
    report.write(json.dumps(header).encode() + b"\n")
    for path in payload:  # each file as a line [path, length] and its bytes, read whole (under the size cap)
        with open(os.path.join(WORK, path), "rb") as source:
            data = source.read()
        report.write(json.dumps([path, len(data)]).encode() + b"\n" + data)
    report.close()


def supervise(config):
    source = sys.stdin.buffer
    originals = {path: unpack(source, path, size) for path, size in config["files"]}
    script, size = config["script"]
    unpack(source, script, size)
    os.chmod(os.path.join(WORK, script), 0o444)
    started = time.monotonic()
    child = subprocess.Popen(config["argv"], cwd=WORK, stdin=subprocess.DEVNULL, start_new_session=True,
                             preexec_fn=lambda: limit(config["rlimits"]))
    try:
        exit_code, timed_out = child.wait(timeout=config["timeout_s"]), False
    except subprocess.TimeoutExpired:
        exit_code, timed_out = None, True
    duration = time.monotonic() - started
    end_all_others()
    child.wait()
    full = sorted(name for name, path in SPACES.items() if os.statvfs(path).f_bavail == 0)
    changed, skipped, scanned = scan(script, originals)
    header = {"exit_code": exit_code, "timed_out": timed_out, "duration_s": round(duration, 3), "full": full,
              "changed_count": len(changed), "scan_overflow": scanned > SCAN_LIMIT,
              "skipped": skipped[:SKIPPED_SHOWN], "skipped_count": len(skipped), "files": []}
    if full or scanned > SCAN_LIMIT or len(changed) > config["max_files"]:
        return header, []  # nothing comes back: the host says why
    payload = []
    for path, size in changed:
        send = size <= config["max_file_bytes"]
        header["files"].append([path, size, send])
        if send:
            payload.append(path)
    return header, payload


def unpack(source, path, size):
    """Copy ``size`` bytes of stdin to /work/<path>; returns (size, sha256) to tell changes apart later."""
    target = os.path.join(WORK, path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    digest, left = hashlib.sha256(), size
    with open(target, "wb") as out:
        while left:
            chunk = source.read(min(left, CHUNK))
            if not chunk:
                raise EOFError(f"the workspace copy ended inside {path}")
            digest.update(chunk)
            out.write(chunk)
            left -= len(chunk)
    return size, digest.hexdigest()


def limit(rlimits):
    for name, value in rlimits.items():
        resource.setrlimit(getattr(resource, name), (value, value))


def end_all_others():
    """SIGKILL every process but this one and the namespace's init, until none is left (at most 2 s).

    The program may have detached children (its own session): they end too, so nothing writes
    while /work is read.
    """
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if not [pid for pid in os.listdir("/proc") if pid.isdigit() and int(pid) not in (1, os.getpid())
                and not zombie(pid)]:
            return
        time.sleep(0.01)


def zombie(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
    except (OSError, IndexError):
        return True  # gone


def scan(script, originals):
    """Files created or changed under /work (sorted), symbolic links skipped, and entries looked at."""
    changed, skipped, scanned, stack = [], [], 0, [""]
    while stack and scanned <= SCAN_LIMIT:
        folder = stack.pop()
        with os.scandir(os.path.join(WORK, folder)) as entries:
            for entry in entries:
                scanned += 1
                if scanned > SCAN_LIMIT:
                    break
                path = f"{folder}/{entry.name}" if folder else entry.name
                if entry.is_symlink():
                    skipped.append([path, "a symbolic link"])
                elif entry.is_dir(follow_symlinks=False):
                    stack.append(path)
                elif entry.is_file(follow_symlinks=False) and path != script:
                    size = entry.stat(follow_symlinks=False).st_size
                    if not unchanged(entry.path, size, originals.get(path)):
                        changed.append([path, size])
    return sorted(changed), sorted(skipped), scanned


def unchanged(path, size, original):
    if original is None or original[0] != size:
        return False
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while chunk := source.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest() == original[1]


if __name__ == "__main__":
    main()
