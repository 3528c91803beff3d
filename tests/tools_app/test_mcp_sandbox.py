"""stdio MCP servers: only a team the operator granted may have them, and they run in the sandbox (issue 23, point 2).

The probe of issue 23 made a stdio server whose command printed another team's
private prompt to stderr, then pressed Test: the error quoted it. Here the
same command (and a look at its environment, the file system and the
network) goes through the real Test endpoint and a real connection.
"""

from __future__ import annotations

import os
import socket
import threading

import pytest
from django.conf import settings
from django.core.management import call_command

from agents_app.kinds import AGENT
from agents_app.models import Team
from mas_core.definitions.services import definition_parse, definition_save, stdio_not_granted
from mas_core.definitions.storage import team_defs_dir
from mas_core.definitions.sync import markdown_sync
from tools_app.kinds import MCP
from tools_app.mcp.services import CLOSE_GRACE_S, mcp_server_test
from tools_app.models import MCPServer

PRIVATE_PROMPT = "beta-private-prompt-7c1e: never outside team beta"
ROW_SECRET = "row-env-secret-52ad"


@pytest.fixture
def beta_file(team_b) -> str:
    """Another team's private agent, on disk where the server keeps it."""
    text = f"---\nname: X\ndescription: private\n---\n\n{PRIVATE_PROMPT}\n"
    definition_save(kind=AGENT, team=team_b, parsed=definition_parse(kind=AGENT, team=team_b, text=text), slug="x")
    path = team_defs_dir(team_b) / "agents" / "x.md"
    assert PRIVATE_PROMPT in path.read_text()
    return str(path)


def stdio_body(name: str, script: str, *, shell: str = "sh", timeout_s: int = 10) -> dict:
    return {"name": name, "transport": "stdio", "command": shell, "args": ["-c", script],
            "env": {"PROBE_TOKEN": ROW_SECRET}, "timeout_s": timeout_s}


def granted(team) -> None:
    Team.objects.filter(pk=team.pk).update(stdio_mcp_allowed=True)
    team.refresh_from_db()


# -- who may create one --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_team_admin_without_the_operators_grant_gets_403_and_nothing_is_saved(team_a, api_for):
    admin = api_for(team_a, "admin")
    assert admin.get("/api/me").json()["can_manage_stdio"] is False

    response = admin.post("/api/mcp-servers", stdio_body("Probe", "exit 1"))

    assert (response.status_code, response.json()) == (403, {"detail": stdio_not_granted("alpha")})
    assert not MCPServer.objects.filter(team=team_a).exists()
    assert not (team_defs_dir(team_a) / "mcp" / "probe.md").exists()


@pytest.mark.django_db
def test_with_the_grant_the_team_admin_creates_one_and_an_editor_still_may_not(team_a, api_for):
    call_command("create_team", "alpha", "--admin", "alpha-admin", "--allow-stdio", stdout=open("/dev/null", "w"))
    team_a.refresh_from_db()
    assert team_a.stdio_mcp_allowed is True
    admin, editor = api_for(team_a, "admin"), api_for(team_a, "editor")

    assert admin.post("/api/mcp-servers", stdio_body("Probe", "exit 1")).status_code == 201
    assert editor.post("/api/mcp-servers", stdio_body("Other", "exit 1")).status_code == 403
    assert list(MCPServer.objects.filter(team=team_a).values_list("slug", flat=True)) == ["probe"]

    call_command("create_team", "alpha", "--admin", "alpha-admin", "--deny-stdio", stdout=open("/dev/null", "w"))
    assert Team.objects.get(pk=team_a.pk).stdio_mcp_allowed is False


@pytest.mark.django_db
def test_the_admin_form_refuses_a_team_admin_without_the_grant(team_a, make_member):
    from tests.agents_app.test_admin_definitions import admin_url, client_for

    client = client_for(make_member(team_a, "admin"))
    response = client.post(admin_url(MCP, "add"), {"team": team_a.pk, "markdown": "---\nname: probe\n"
                                                   "transport: stdio\ncommand: sh\nargs: [-c, exit 1]\n---\n"})

    assert response.status_code == 200
    assert response.context["adminform"].form.errors["markdown"] == [f"Field transport: {stdio_not_granted('alpha')}."]
    assert not MCPServer.objects.filter(team=team_a).exists()


@pytest.mark.django_db
def test_markdown_sync_refuses_a_stdio_server_of_a_team_without_the_grant(team_a):
    folder = team_defs_dir(team_a) / "mcp"
    folder.mkdir(parents=True)
    (folder / "probe.md").write_text("---\nname: probe\ntransport: stdio\ncommand: sh\nargs: [-c, exit 1]\n---\n")

    report = markdown_sync(team=team_a, mode="import")

    assert [(e.path, e.detail) for e in report.errors] == [("mcp/probe.md", stdio_not_granted("alpha"))]
    assert not MCPServer.objects.filter(team=team_a).exists()


@pytest.mark.django_db
def test_a_stdio_server_of_a_team_whose_grant_was_taken_back_is_not_started(team_a, caplog):
    granted(team_a)
    definition_save(kind=MCP, team=team_a, slug="probe", parsed=definition_parse(
        kind=MCP, team=team_a, text="---\nname: probe\ntransport: stdio\ncommand: sh\n"
                                    "args: [-c, 'echo started >&2; exit 1']\n---\n"))
    Team.objects.filter(pk=team_a.pk).update(stdio_mcp_allowed=False)

    result = mcp_server_test(row=MCPServer.objects.select_related("team").get(team=team_a, slug="probe"))

    assert result == {"ok": False, "error": f"MCP server probe: {stdio_not_granted('alpha')}; not started",
                      "timings_ms": {}, "tools": []}
    assert not [r for r in caplog.records if r.getMessage() == "mcp server stderr"]


@pytest.mark.django_db
def test_without_the_grant_a_stdio_server_can_still_be_deleted_but_not_changed(team_a, api_for):
    granted(team_a)
    admin = api_for(team_a, "admin")
    assert admin.post("/api/mcp-servers", stdio_body("Probe", "exit 1")).status_code == 201
    Team.objects.filter(pk=team_a.pk).update(stdio_mcp_allowed=False)

    changed = admin.patch("/api/mcp-servers/probe", {"args": ["-c", "exit 2"]})
    assert changed.status_code == 403
    assert MCPServer.objects.get(team=team_a, slug="probe").spec["args"] == ["-c", "exit 1"]
    assert api_for(team_a, "editor").delete("/api/mcp-servers/probe").status_code in (200, 204)
    assert not MCPServer.objects.filter(team=team_a).exists()


@pytest.mark.django_db
def test_only_a_superuser_changes_the_grant_in_the_admin(team_a, make_member, client):
    from django.contrib.auth import get_user_model

    admin = make_member(team_a, "admin")
    client.force_login(admin)
    page = client.get(f"/admin/agents_app/team/{team_a.pk}/change/")
    assert page.status_code == 200 and 'name="stdio_mcp_allowed"' not in page.content.decode()
    client.post(f"/admin/agents_app/team/{team_a.pk}/change/",
                {"name": "Alpha", "tool_result_max_bytes": "", "stdio_mcp_allowed": "on"})
    assert Team.objects.get(pk=team_a.pk).stdio_mcp_allowed is False

    root = get_user_model().objects.create_superuser("root-user", password="pw-for-tests-1")
    client.force_login(root)
    assert 'name="stdio_mcp_allowed"' in client.get(f"/admin/agents_app/team/{team_a.pk}/change/").content.decode()
    response = client.post(f"/admin/agents_app/team/{team_a.pk}/change/",
                           {"name": "Alpha", "defs_dir": team_a.defs_dir, "tool_result_max_bytes": "",
                            "stdio_mcp_allowed": "on", "approval_deadline_s": "86400"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert Team.objects.get(pk=team_a.pk).stdio_mcp_allowed is True


def test_the_env_goes_through_bubblewraps_environment_not_its_command_line():
    from tools_app.mcp.sandbox import SandboxRefused, wrap

    program, arguments, environment = wrap("sh", ["-c", "exit 1"], {"TOKEN": ROW_SECRET}, ["HOME", "USER"])

    assert program.endswith("/bwrap") and arguments[-3:] == ["sh", "-c", "exit 1"]
    assert ROW_SECRET not in " ".join(arguments)
    assert environment == {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/home/mcp", "TOKEN": ROW_SECRET}
    assert arguments[arguments.index("--unsetenv") + 1] == "USER" and arguments.count("--unsetenv") == 1
    with pytest.raises(SandboxRefused, match="^env GLIBC_TUNABLES, LD_PRELOAD: a loader variable"):
        wrap("sh", [], {"LD_PRELOAD": "/tmp/x.so", "GLIBC_TUNABLES": "x", "OK": "1"}, [])


# -- what it sees ------------------------------------------------------------------------------------------


def probe_lines(answer: dict) -> dict[str, str]:
    """The probe's stderr lines, as quoted in the Test's error: ``label: text``."""
    error = answer["error"]
    assert answer["ok"] is False and " (stderr: " in error, error
    lines = error.split(" (stderr: ", 1)[1].rstrip(")").split(" | ")
    return dict(line.split(": ", 1) for line in lines if ": " in line)


@pytest.mark.django_db
def test_the_probes_command_reads_nothing_outside_its_sandbox(team_a, beta_file, api_for, monkeypatch):
    granted(team_a)
    monkeypatch.setenv("MCP_WORKER_ONLY", "worker-env-canary-9b0d")  # the worker's own environment
    repo, var = settings.BASE_DIR, settings.VAR_DIR
    script = (f"head -c 200 {beta_file} >/dev/null 2>&1 && echo 'other: read' >&2 || echo 'other: refused' >&2; "
              f"echo \"env: $(cat /proc/self/environ | tr '\\0' ' ')\" >&2; "
              f"echo \"repo: $(ls -A {repo} 2>&1 | tr '\\n' ' ')\" >&2; "
              f"echo \"var: $(ls -A {var} 2>&1 | tr '\\n' ' ')\" >&2; "
              f"echo \"who: $(id -u) $(pwd) $(ls -A / | tr '\\n' ' ')\" >&2; exit 1")
    admin = api_for(team_a, "admin")
    assert admin.post("/api/mcp-servers", stdio_body("Probe", script)).status_code == 201

    answer = admin.post("/api/mcp-servers/probe/test").json()

    assert PRIVATE_PROMPT not in str(answer) and ROW_SECRET not in str(answer)
    lines = probe_lines(answer)
    assert lines["other"] == "refused"
    # Only the row's env (redacted here) and PATH and HOME: none of the worker's (HOME=/root, USER, ...).
    assert sorted(lines["env"].split()) == ["HOME=/home/mcp", "PATH=/usr/local/bin:/usr/bin:/bin",
                                            "PROBE_TOKEN=[redacted]", "PWD=/home/mcp"]
    # Of the repository, only what the suite's operator setting shows (the interpreter and its servers).
    assert lines["repo"].split() == sorted(
        p.split("/")[len(str(repo).split("/"))] for p in settings.MAS_MCP_STDIO_READ_ONLY if p.startswith(f"{repo}/"))
    assert "No such file or directory" in lines["var"]
    uid, cwd, *root = lines["who"].split()
    assert (uid, cwd) == ("65534", "/home/mcp")
    assert "root" not in root or str(repo).startswith("/root") or any(
        p.startswith("/root/") for p in settings.MAS_MCP_STDIO_READ_ONLY)
    assert {"usr", "etc", "tmp", "home", "proc", "dev"} <= set(root)


@pytest.mark.django_db
def test_under_a_root_worker_the_server_is_nobody_on_the_hosts_files(team_a, api_for, settings, tmp_path):
    """A folder the operator shows it may hold a file only root reads: the server, nobody, does not read it.
    (A worker that is not root runs its servers as itself: the file is its own.)"""
    root = os.geteuid() == 0
    shown = tmp_path / "shown"
    shown.mkdir()
    shown.chmod(0o755)
    (shown / "public.txt").write_text("public-7e2")
    (shown / "private.txt").write_text("root-only-3c9")
    (shown / "private.txt").chmod(0o600)
    settings.MAS_MCP_STDIO_READ_ONLY = [*settings.MAS_MCP_STDIO_READ_ONLY, str(shown)]
    granted(team_a)
    script = (f"echo \"public: $(cat {shown}/public.txt 2>&1)\" >&2; "
              f"echo \"private: $(cat {shown}/private.txt 2>&1)\" >&2; "
              "echo \"caps: $(grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status | tr -s '\\t\\n' '  ')\" >&2; "
              "exit 1")
    admin = api_for(team_a, "admin")
    assert admin.post("/api/mcp-servers", stdio_body("Root", script)).status_code == 201

    lines = probe_lines(admin.post("/api/mcp-servers/root/test").json())

    assert lines["public"] == "public-7e2"
    assert lines["private"] == (f"cat: {shown}/private.txt: Permission denied" if root else "root-only-3c9")
    assert lines["caps"].split()[:2] == ["CapEff:", "0000000000000000"]
    if root:
        assert lines["caps"].split()[2:] == ["CapBnd:", "0000000000000000", "NoNewPrivs:", "1"]


class Listener:
    """A TCP port on the host's 127.0.0.1 that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            connection.close()


@pytest.mark.django_db
@pytest.mark.parametrize("network, reached", [(True, "connected"), (False, "refused")])
def test_the_network_is_on_unless_the_operator_turns_it_off(team_a, api_for, settings, network, reached):
    settings.MAS_MCP_STDIO_NETWORK = network
    granted(team_a)
    listener = Listener()
    script = (f"if (exec 3<>/dev/tcp/127.0.0.1/{listener.port}) 2>/dev/null; then echo 'net: connected' >&2; "
              "else echo 'net: refused' >&2; fi; exit 1")
    admin = api_for(team_a, "admin")
    assert admin.post("/api/mcp-servers", stdio_body("Net", script, shell="bash")).status_code == 201

    lines = probe_lines(admin.post("/api/mcp-servers/net/test").json())

    assert lines["net"] == reached
    assert listener.accepted == (1 if network else 0)
    listener.sock.close()


# -- testing a slow server (point 7) -------------------------------------------------------------------------


SLEEP = "29.7731"  # `sleep 30`, told apart from any other process by its argument


def hanging_server(team) -> MCPServer:
    """The team's stdio server ``slow``: a `sleep 30` that never answers, with a connect timeout of 2 s."""
    definition_save(kind=MCP, team=team, slug="slow", parsed=definition_parse(
        kind=MCP, team=team,
        text=f"---\nname: slow\ntransport: stdio\ncommand: sleep\nargs: ['{SLEEP}']\ntimeout_s: 2\n---\n"))
    return MCPServer.objects.get(team=team, slug="slow")


def sleepers() -> list[int]:
    from pathlib import Path

    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes() == f"sleep\0{SLEEP}\0".encode():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


@pytest.mark.alone  # times the answers: 2 s of timeout and under 1.9 s for the rest
@pytest.mark.django_db(transaction=True)
def test_testing_a_hanging_server_answers_within_its_timeout_and_holds_no_web_place(team_a, make_member, make_token):
    """The probe's `sleep 30` held a web request for 12 s. Two Tests at once, and requests meanwhile, over a
    real daphne that works on one request at a time: each Test answers the connect timeout's error in about
    that timeout and gives its place up while it waits, so a plain request meanwhile is answered at once; a
    third Test of the team is refused at once (429: two at a time); the server's process is ended after the
    answer."""
    import time

    from tests.web import WebServer

    granted(team_a)
    token = make_token(team_a, make_member(team_a, "admin"))
    hanging_server(team_a)
    web = WebServer(label="mcp-test", env={"MAS_WEB_CONCURRENCY": "1"})
    web.start()
    answers: dict[int, object] = {}
    try:
        web.request("GET", "/api/me", token=token)  # warm
        tests = [threading.Thread(target=lambda i=i: answers.__setitem__(
            i, web.request("POST", "/api/mcp-servers/slow/test", token=token, timeout=60))) for i in range(2)]
        started = time.monotonic()
        for thread in tests:
            thread.start()
        time.sleep(0.5)
        meanwhile = web.request("GET", "/api/me", token=token)
        third = web.request("POST", "/api/mcp-servers/slow/test", token=token)
        for thread in tests:
            thread.join(60)
        both = time.monotonic() - started
        seen = sleepers()  # still running: the SDK gives it 2 s once its stdin is closed
        # Answered, the server's process is ended all the same (in the background, within a few seconds).
        deadline = time.monotonic() + 15
        while sleepers() and time.monotonic() < deadline:
            time.sleep(0.2)
        left = sleepers()
    finally:
        web.stop()

    import json

    for answer in answers.values():
        body = json.loads(answer.body)
        assert (answer.status, body["ok"], body["tools"]) == (200, False, [])
        assert body["error"] == "MCP server slow did not answer within 2 s (connect)"
    # The 2-s timeout and the sandboxed process's start (~1.3 s of CPU each, two at once: 3.55 s seen once):
    # neither sleep's 30 s, nor the SDK's 2 s or more to end the process (left in the background), nor one Test
    # waiting for the other's timeout (2 + 2 s); a plain request meanwhile waits for neither.
    assert all(answer.seconds < 3.9 for answer in answers.values()), [a.seconds for a in answers.values()]
    assert both < 3.9, both
    assert meanwhile.status == 200 and meanwhile.seconds < 1, meanwhile
    assert (third.status, json.loads(third.body)) == (429, {"detail": (
        "this team's MCP server tests under way: 2, its most at once (MAS_MCP_TESTS_PER_TEAM); "
        "test again when one has ended")})
    assert third.seconds < 1, third
    assert len(seen) == 2 and left == []


@pytest.mark.alone  # times the answers: 2 s of timeout, under 1 s for the request meanwhile
@pytest.mark.django_db(transaction=True)
def test_the_admins_test_action_gives_its_web_place_up_while_the_server_hangs(team_a, make_member, make_token):
    """The admin's Test action waits for the server in its request (the connect timeout, 2 s here): over a
    real daphne that works on one request at a time, another request meanwhile is answered at once."""
    import time
    from urllib.parse import urlencode

    from django.test import Client

    from tests.agents_app.test_admin_definitions import admin_url
    from tests.web import WebServer

    granted(team_a)
    member = make_member(team_a, "admin")
    token = make_token(team_a, member)
    row = hanging_server(team_a)
    browser = Client()
    browser.force_login(member)
    csrf = "k" * 32
    cookie = f"sessionid={browser.cookies['sessionid'].value}; csrftoken={csrf}"
    url = admin_url(MCP, "changelist")
    web = WebServer(label="mcp-admin-test", env={"MAS_WEB_CONCURRENCY": "1"})
    web.start()
    answers: dict[str, object] = {}
    try:
        web.request("GET", "/api/me", token=token)  # warm
        action = threading.Thread(target=lambda: answers.__setitem__("action", web.request(
            "POST", url, urlencode({"action": "test_and_discover", "_selected_action": row.pk,
                                    "csrfmiddlewaretoken": csrf}),
            content_type="application/x-www-form-urlencoded", headers={"Cookie": cookie}, timeout=60)))
        action.start()
        time.sleep(0.5)
        meanwhile = web.request("GET", "/api/me", token=token)
        action.join(60)
        said = answers["action"].headers["set-cookie"].split(";")[0]  # the admin's messages, kept in a cookie
        page = web.request("GET", url, headers={"Cookie": f"{cookie}; {said}"})
    finally:
        web.stop()

    assert (answers["action"].status, answers["action"].headers["location"]) == (302, url)
    # The timeout, then the stdio process's end, which the action waits for (CLOSE_GRACE_S at most).
    assert 2 <= answers["action"].seconds < 2 + CLOSE_GRACE_S + 1.9, answers["action"]
    assert meanwhile.status == 200 and meanwhile.seconds < 1, meanwhile
    assert '<li class="error">Slow: MCP server slow did not answer within 2 s (connect)</li>' in page.body.decode()


@pytest.mark.django_db
def test_a_team_tests_two_servers_at_once_and_another_team_is_not_counted(team_a, team_b, make_member, api_for):
    """Past the team's Tests at once the API answers 429 and the admin action says which server it left;
    another team's Test goes on."""
    from django.contrib.messages import get_messages

    from tests.agents_app.test_admin_definitions import admin_url, client_for
    from tools_app.mcp.services import mcp_test_slot

    gone = "---\nname: gone\ntransport: streamable-http\nurl: http://127.0.0.1:9/mcp\n---\n"
    for team in (team_a, team_b):
        definition_save(kind=MCP, team=team, slug="gone", parsed=definition_parse(kind=MCP, team=team, text=gone))
    row = MCPServer.objects.get(team=team_a, slug="gone")
    with mcp_test_slot(team_a.id), mcp_test_slot(team_a.id):
        refused = api_for(team_a, "editor").post("/api/mcp-servers/gone/test", {})
        response = client_for(make_member(team_a, "editor")).post(
            admin_url(MCP, "changelist"), {"action": "test_and_discover", "_selected_action": [row.pk]})
        other = api_for(team_b, "editor").post("/api/mcp-servers/gone/test", {})
    after = api_for(team_a, "editor").post("/api/mcp-servers/gone/test", {})

    assert (refused.status_code, refused.json()) == (429, {"detail": (
        "this team's MCP server tests under way: 2, its most at once (MAS_MCP_TESTS_PER_TEAM); "
        "test again when one has ended")})
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        "gone: not tested: this team's MCP server tests under way: 2, its most at once (MAS_MCP_TESTS_PER_TEAM); "
        "test again when one has ended"]
    assert other.status_code == 200 and other.json()["error"].startswith("MCP server gone could not be reached")
    assert after.status_code == 200 and after.json()["ok"] is False
    assert MCPServer.objects.get(pk=row.pk).discovered_at is None
