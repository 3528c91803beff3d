"""code_exec in its bubblewrap sandbox: what runs, what comes back, and escapes that fail."""

import asyncio
import json
import os
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tools_app.builtin import BUILTIN_TOOL_CLASSES
from tools_app.plugin import ToolContext
from tools_app.registry import registry_for_agent
from tools_app.workspace_memory import InMemoryWorkspace


def run_code(language, code, files=None, **settings_overrides):
    workspace = InMemoryWorkspace(files or {})
    registry = registry_for_agent(["code_exec"])
    ctx = ToolContext(run_id="r", agent="coder", session_id="s", workspace=workspace)
    outcome = asyncio.run(registry.call("code_exec", {"language": language, "code": code}, ctx))
    return outcome, workspace


def report(outcome):
    assert outcome.ok, outcome.content
    return json.loads(outcome.content)


def test_python_and_bash_run_with_the_workspace_and_changed_files_come_back():
    outcome, workspace = run_code("python", (
        "import pathlib\n"
        "data = pathlib.Path('data/in.csv').read_text()\n"
        "pathlib.Path('data/out.txt').write_text(str(sum(int(x) for x in data.split(','))))\n"
        "pathlib.Path('notes.md').write_text('same')\n"
        "print('summed')\n"), files={"data/in.csv": "1,2,3", "notes.md": "same"})
    result = report(outcome)
    assert (result["exit_code"], result["stdout"], result["stderr"], result["timed_out"]) == (0, "summed\n", "", False)
    assert result["files_written"] == ["data/out.txt"]  # notes.md did not change
    assert asyncio.run(workspace.read("data/out.txt")) == "6"
    result = report(run_code("bash", "echo hi; echo oops >&2; exit 3")[0])
    assert (result["exit_code"], result["stdout"], result["stderr"]) == (3, "hi\n", "oops\n")


def test_an_agent_file_written_by_code_is_not_copied_back():
    outcome, workspace = run_code("bash", "mkdir -p agents && echo '---' > agents/boss.md && echo ok > ok.txt")
    result = report(outcome)
    assert result["files_written"] == ["ok.txt"]
    assert result["files_not_written"] == ["agents/boss.md (agent files are written with vfs_write)"]
    assert asyncio.run(workspace.paths()) == ["ok.txt"]


def test_bad_arguments_are_clear_errors():
    outcome, _ = run_code("ruby", "puts 1")
    assert not outcome.ok and outcome.error_kind == "invalid_arguments" and "language" in outcome.content
    outcome, _ = run_code("python", "")
    assert not outcome.ok and "code" in outcome.content


def test_no_network_even_to_the_hosts_loopback():
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"reached")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        with socket.create_connection(("127.0.0.1", port)):  # reachable from the host
            pass
        result = report(run_code("python", (
            "import urllib.request\n"
            f"print(urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=3).read())\n"))[0])
        assert result["exit_code"] == 1 and "Connection refused" in result["stderr"]
        result = report(run_code("bash", "getent hosts pypi.org || echo no-dns; cat /etc/resolv.conf")[0])
        assert "no-dns" in result["stdout"] and "No such file" in result["stderr"]
    finally:
        server.shutdown()


def test_host_files_and_secrets_are_out_of_reach(monkeypatch):
    monkeypatch.setenv("MAS_SECRET_CANARY", "canary-7731")
    result = report(run_code("bash", (
        "cat /etc/shadow; ls /work/main 2>&1; ls /root 2>&1; env; cat /proc/1/environ 2>&1 | tr '\\0' ' ';"
        " echo x > /usr/evil 2>&1; ls /"))[0])
    output = result["stdout"] + result["stderr"]
    assert "canary-7731" not in output
    assert "/etc/shadow: No such file or directory" in result["stderr"]
    assert "ls: cannot access '/work/main': No such file or directory" in output
    assert "Read-only file system" in output
    assert sorted(result["stdout"].split()[-8:]) == ["bin", "dev", "lib", "lib64", "proc", "tmp", "usr", "work"]
    env = [line for line in result["stdout"].splitlines() if "=" in line and line.split("=")[0].isupper()]
    assert {line.split("=")[0] for line in env} <= {"PATH", "HOME", "LANG", "PWD", "SHLVL", "_", "OLDPWD"}
    assert not os.path.exists("/usr/evil")


def test_an_infinite_loop_is_killed_at_the_time_limit(settings):
    settings.MAS_CODE_EXEC_TIMEOUT_S = 1.5
    result = report(run_code("python", "while True: pass")[0])
    assert (result["exit_code"], result["timed_out"]) == (None, True)
    assert 1.5 <= result["duration_s"] < 5
    assert result["stderr"].endswith("[killed: the program ran longer than 1.5 s]")


def test_a_fork_bomb_hits_the_process_limit(settings):
    settings.MAS_CODE_EXEC_TIMEOUT_S = 5
    settings.MAS_CODE_EXEC_PROCESSES = 16
    result = report(run_code("python", (
        "import os, time\n"
        "children = 0\n"
        "try:\n"
        "    while True:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(3); os._exit(0)\n"
        "        children += 1\n"
        "except OSError as error:\n"
        "    print('refused after', children, error.errno)\n"))[0])
    refused = result["stdout"].split()
    assert refused[:2] == ["refused", "after"] and int(refused[2]) < 16 and refused[3] == "11"


def test_a_memory_hog_is_refused(settings):
    settings.MAS_CODE_EXEC_MEMORY_MB = 128
    result = report(run_code("python", "x = bytearray(512 * 1024 * 1024)\nprint('allocated')")[0])
    assert result["exit_code"] == 1 and "MemoryError" in result["stderr"] and "allocated" not in result["stdout"]


def test_huge_output_is_capped_and_marked(settings):
    settings.MAS_CODE_EXEC_MAX_OUTPUT = 1000
    result = report(run_code("python", "import sys\nsys.stdout.write('y' * 5_000_000)")[0])
    assert result["exit_code"] == 0
    assert result["stdout"] == "y" * 1000 + "\n[truncated: 5,000,000 bytes of output, the first 1,000 shown]"


def test_the_tool_is_off_unless_listed():
    from tools_app.catalog import SAFE_DEFAULT_TOOLS

    assert "code_exec" in BUILTIN_TOOL_CLASSES and "code_exec" not in SAFE_DEFAULT_TOOLS
    assert "code_exec" not in registry_for_agent(None).names


@pytest.mark.django_db(transaction=True)
@pytest.mark.worker
def test_in_a_real_run_the_programs_file_lands_in_the_workspace(team_a, celery_worker_process):
    from agents_app.execution.runs import run_start
    from agents_app.models import WorkspaceFile
    from tests.runs import agent, call, events, finish

    agent(team_a, "Coder", "tools:\n- code_exec\n- vfs_write\n")
    agent(team_a, "Plain")
    script = {
        "coder": [call("vfs_write", path="in.txt", content="21"),
                  call("code_exec", language="python",
                       code="open('out.txt', 'w').write(str(2 * int(open('in.txt').read())))"),
                  {"text": "doubled"}],
        "plain": [call("code_exec", language="bash", code="id"), {"text": "could not"}],
    }
    run = finish(run_start(team=team_a, agent="coder", input="Double it", script=script))
    assert (run.status, run.result) == ("succeeded", "doubled")
    assert dict(WorkspaceFile.objects.filter(run=run).values_list("path", "content")) == {"in.txt": "21",
                                                                                         "out.txt": "42"}
    [result] = [e.data for e in events(run, "tool_result") if e.data["name"] == "code_exec"]
    assert json.loads(result["content"])["files_written"] == ["out.txt"]
    assert [e.data["path"] for e in events(run, "file_change")] == ["in.txt", "out.txt"]

    plain = finish(run_start(team=team_a, agent="plain", input="x", script=script))
    [refused] = [e.data for e in events(plain, "tool_result")]
    assert (refused["ok"], refused["content"].split(".")[0]) == (False, "Unknown tool 'code_exec'")


# -- quotas: what one call may store, and what comes back ---------------------------------------------------

MiB = 1024 * 1024


class DirectoryWatch:
    """Samples the bytes and entries under ``root`` every few milliseconds while a call runs (the largest seen)."""

    def __init__(self, root):
        self.root, self.bytes, self.entries, self.samples = root, 0, 0, 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self):
        while not self.stop.is_set():
            sizes = []
            for folder, dirs, files in os.walk(self.root):
                sizes += [0] * len(dirs)
                for name in files:
                    try:
                        sizes.append(os.lstat(os.path.join(folder, name)).st_size)
                    except FileNotFoundError:
                        pass
            self.bytes, self.entries = max(self.bytes, sum(sizes)), max(self.entries, len(sizes))
            self.samples += 1
            self.stop.wait(0.005)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()


@pytest.fixture
def host_tmp(monkeypatch):
    """A fresh host temporary directory for this test (code_exec's working copy used to go there), to watch.

    Made with the real temporary directory's permissions (the sandbox's user could reach a working
    copy in it), unlike pytest's private ``tmp_path``.
    """
    import shutil
    import tempfile

    root = tempfile.mkdtemp(prefix="mas-host-tmp-")
    os.chmod(root, 0o1777)
    monkeypatch.setattr(tempfile, "tempdir", root)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def refused(outcome):
    assert not outcome.ok and outcome.error_kind == "policy_denied", outcome
    return json.loads(outcome.content)


WRITE_200_MB = (
    "import os, sys\n"
    "print(os.statvfs('{where}').f_blocks * os.statvfs('{where}').f_frsize, flush=True)\n"
    "os.makedirs('{where}/blobs', exist_ok=True)\n"
    "open('marker.txt', 'w').write('written before the flood')\n"
    "for i in range(200):\n"
    "    with open(f'{where}/blobs/{{i:03}}.bin', 'wb') as out:\n"
    "        out.write(b'x' * 1024 * 1024)\n"
    "print('all 200 MB written')\n")


def test_a_program_writing_200_mb_to_tmp_is_stopped_at_the_tmp_quota(settings, host_tmp):
    settings.MAS_CODE_EXEC_TMP_BYTES = 8 * MiB
    with DirectoryWatch(host_tmp) as watch:
        outcome, workspace = run_code("python", WRITE_200_MB.format(where="/tmp"), files={"in.txt": "kept"})
    result = refused(outcome)
    assert result["error"] == (
        "code_exec: the program filled /tmp: at most 8 MiB may be written there per call (MAS_CODE_EXEC_TMP_BYTES);"
        " writes beyond failed with 'No space left on device'. No files were copied back to the workspace.")
    assert result["stdout"] == f"{8 * MiB}\n"  # /tmp is a tmpfs of exactly the quota
    assert result["exit_code"] == 1 and result["stderr"].endswith("OSError: [Errno 28] No space left on device\n")
    assert result["files_written"] == [] and asyncio.run(workspace.paths()) == ["in.txt"]  # marker.txt not copied
    assert watch.samples > 0 and (watch.bytes, watch.entries) == (0, 0)  # nothing on the host's temporary disk


def test_a_program_writing_200_mb_into_the_workspace_is_stopped_at_the_write_quota(settings, host_tmp):
    settings.MAS_CODE_EXEC_WRITE_BYTES = 8 * MiB
    with DirectoryWatch(host_tmp) as watch:
        outcome, workspace = run_code("python", WRITE_200_MB.format(where="/work"), files={"in.txt": "kept"})
    assert watch.samples > 0 and (watch.bytes, watch.entries) == (0, 0)  # the working copy is not on the host's disk
    result = refused(outcome)
    assert result["error"] == (
        "code_exec: the program filled its working directory: at most 8 MiB may be added to it per call "
        "(MAS_CODE_EXEC_WRITE_BYTES; each file takes at least 4 KiB); writes beyond failed with 'No space left on "
        "device'. No files were copied back to the workspace.")
    # The copy of the workspace (one page for in.txt, one for main.py) plus the quota, all in memory.
    assert result["stdout"] == f"{8 * MiB + 2 * 4096}\n"
    assert result["exit_code"] == 1 and result["stderr"].endswith("OSError: [Errno 28] No space left on device\n")
    assert result["files_written"] == [] and asyncio.run(workspace.paths()) == ["in.txt"]
    assert asyncio.run(workspace.read("in.txt")) == "kept"


def test_a_program_creating_3000_files_gets_none_back(settings, host_tmp):
    code = "for i in range(3000):\n    open(f'f{i:04}.txt', 'w').write(str(i))\nprint('made 3000')\n"
    with DirectoryWatch(host_tmp) as watch:
        outcome, workspace = run_code("python", code, files={"in.txt": "kept"})
    result = refused(outcome)
    assert result["error"] == ("code_exec: the program created or changed 3,000 files; at most 100 may come back "
                               "from one call (MAS_CODE_EXEC_MAX_FILES). No files were copied back to the workspace.")
    assert (result["exit_code"], result["stdout"], result["files_written"]) == (0, "made 3000\n", [])
    assert asyncio.run(workspace.paths()) == ["in.txt"]
    assert watch.samples > 0 and (watch.bytes, watch.entries) == (0, 0)


def test_up_to_the_file_cap_every_file_comes_back_and_one_more_brings_none(settings):
    settings.MAS_CODE_EXEC_MAX_FILES = 5
    outcome, workspace = run_code("bash", "mkdir -p out; for i in 0 1 2 3; do echo $i > out/$i.txt; done; "
                                          "echo changed > in.txt", files={"in.txt": "kept"})
    result = report(outcome)
    assert result["files_written"] == ["in.txt", "out/0.txt", "out/1.txt", "out/2.txt", "out/3.txt"]
    assert asyncio.run(workspace.read("in.txt")) == "changed\n"
    outcome, workspace = run_code("bash", "mkdir -p out; for i in 0 1 2 3 4; do echo $i > out/$i.txt; done; "
                                          "echo changed > in.txt", files={"in.txt": "kept"})
    result = refused(outcome)
    assert result["error"] == ("code_exec: the program created or changed 6 files; at most 5 may come back from one "
                               "call (MAS_CODE_EXEC_MAX_FILES). No files were copied back to the workspace.")
    assert asyncio.run(workspace.paths()) == ["in.txt"] and asyncio.run(workspace.read("in.txt")) == "kept"


def test_only_the_sized_spaces_are_writable(settings):
    settings.MAS_CODE_EXEC_WRITE_BYTES = 2 * MiB
    settings.MAS_CODE_EXEC_TMP_BYTES = 3 * MiB
    result = report(run_code("python", (
        "import os\n"
        "for where in ['/', '/dev', '/dev/shm', '/tmp', '/work', '/usr', '/proc', '/dev/pts']:\n"
        "    try:\n"
        "        open(os.path.join(where, 'probe'), 'w').close()\n"
        "        stat = os.statvfs(where)\n"
        "        print(where, stat.f_blocks * stat.f_frsize)\n"
        "    except OSError as error:\n"
        "        print(where, error.strerror)\n"))[0])
    assert result["stdout"].splitlines() == [
        "/ Read-only file system", "/dev Read-only file system", f"/dev/shm {MiB}", f"/tmp {3 * MiB}",
        f"/work {2 * MiB + 4096}", "/usr Read-only file system", "/proc No such file or directory",
        "/dev/pts Permission denied"]
    assert result["files_written"] == ["probe"]


def test_a_program_that_ends_its_supervisor_gets_no_files_back():
    outcome, workspace = run_code("bash", "echo lost > lost.txt; kill -9 $PPID; sleep 1", files={"in.txt": "kept"})
    assert not outcome.ok and outcome.error_kind == "tool_error"
    result = json.loads(outcome.content)
    assert result["error"] == (
        "code_exec: the sandbox's supervisor gave no complete report of changed files (it ended before its first "
        "line); the program may have ended it. No files were copied back to the workspace.")
    assert asyncio.run(workspace.paths()) == ["in.txt"]


def test_files_that_would_take_the_workspace_past_its_limit_are_not_copied_back(settings):
    settings.MAS_WORKSPACE_MAX_BYTES = 1000
    files = {"a.txt": "a" * 300, "b.txt": "b" * 300}
    outcome, workspace = run_code("python", "open('more.txt', 'w').write('m' * 500)", files=files)
    result = refused(outcome)
    assert result["error"] == ("code_exec: its files would bring the run's workspace to 1,100 bytes, over its limit "
                               "of 1,000 bytes (MAS_WORKSPACE_MAX_BYTES). No files were copied back to the workspace.")
    assert result["files_written"] == [] and asyncio.run(workspace.paths()) == ["a.txt", "b.txt"]
    # What the program shrinks counts too: 300 + 0 + 500 fits.
    outcome, workspace = run_code("python", "open('more.txt', 'w').write('m' * 500)\nopen('a.txt', 'w').write('')",
                                  files=files)
    assert report(outcome)["files_written"] == ["a.txt", "more.txt"]
    assert asyncio.run(workspace.read("a.txt")) == "" and asyncio.run(workspace.read("more.txt")) == "m" * 500
    outcome, _ = run_code("bash", "echo never > ran.txt", files={**files, "c.txt": "c" * 500})
    assert not outcome.ok and outcome.content == (
        "code_exec: the workspace holds more than its limit of 1,000 bytes (MAS_WORKSPACE_MAX_BYTES); nothing was run")


class ReadsCounted(InMemoryWorkspace):
    """A workspace that counts its reads: one file at a time, or all at once."""

    def __init__(self, files):
        super().__init__(files)
        self.reads = {"one": 0, "all": 0}

    async def read(self, path):
        self.reads["one"] += 1
        return await super().read(path)

    async def contents(self):
        self.reads["all"] += 1
        return await super().contents()


def test_the_workspace_is_copied_into_the_sandbox_in_one_read():
    files = {f"part/{i:03}.txt": str(i) for i in range(50)}
    workspace = ReadsCounted(files)
    ctx = ToolContext(run_id="r", agent="coder", session_id="s", workspace=workspace)
    code = "import pathlib; print(sum(int(p.read_text()) for p in pathlib.Path('part').iterdir()))"
    outcome = asyncio.run(registry_for_agent(["code_exec"]).call("code_exec", {"language": "python", "code": code},
                                                                 ctx))
    assert report(outcome)["stdout"] == f"{sum(range(50))}\n"
    assert workspace.reads == {"one": 0, "all": 1}
