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
    from agents_app.execution.services import run_start
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
