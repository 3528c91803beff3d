"""A team's webhook, delivered by a real worker to a real local HTTP server: signed, retried, never blocking."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import pytest

from agents_app.execution.runs import run_start
from agents_app.models import ApprovalRequest
from tests.runs import agent, call, finish, wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


class Receiver:
    """An HTTP server on 127.0.0.1 that keeps every POST (headers and raw body) and answers ``status``."""

    def __init__(self, status: int = 200) -> None:
        self.status, self.received = status, []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                owner.received.append((dict(self.headers), body))
                self.send_response(owner.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/mas"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[str]:
        return [json.loads(body)["event"] for _, body in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def webhook_worker(django_db_setup, django_db_blocker):
    """A worker allowed to reach 127.0.0.1 as web_fetch would be (MAS_WEB_FETCH_ALLOW); its own queue."""
    from mas_project.celery import app
    from tests.workers import start_worker, stop_worker

    queue = f"webhooks-{os.getpid()}"
    before = app.conf.task_default_queue
    app.conf.task_default_queue = queue
    worker = start_worker(f"webhooks-{os.getpid()}", queue=queue, env={"MAS_WEB_FETCH_ALLOW": "127.0.0.1"})
    yield worker
    stop_worker(worker)
    app.conf.task_default_queue = before


def manual_verify():
    """The manual's signature check (docs/concepts/people-in-the-loop.md), run as written."""
    from tests.manual import example

    snippet = example("docs/concepts/people-in-the-loop.md", language="python", heading="Notifications").text
    namespace: dict = {}
    exec(snippet, namespace)  # noqa: S102 (the manual's own example)
    return namespace["verify"]


def test_the_webhook_hears_requests_questions_and_the_run_end_signed_with_the_teams_secret(
        team_a, webhook_worker, api_for, settings):
    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]
    receiver = Receiver()
    try:
        admin = api_for(team_a, "admin")
        response = admin.patch("/api/team", {"webhook_url": receiver.url, "webhook_secret": "s3cret-for-hooks"})
        assert response.status_code == 200, response.content
        assert response.json()["webhook_secret_set"] is True
        assert "s3cret-for-hooks" not in response.content.decode()
        agent(team_a, "Asker", "tools:\n- ask_human\n")
        run = run_start(team=team_a, agent="asker", input="x", script={
            "asker": [call("ask_human", question="Ship it?", choices=["yes", "no"]), {"text": "Shipped."}]})
        wait_until(lambda: ApprovalRequest.objects.filter(run=run, status="pending").exists(), 30, "the question")
        wait_until(lambda: receiver.events() == ["human_question"], 30, "the question's webhook")
        request = ApprovalRequest.objects.get(run=run)
        assert admin.post(f"/api/approvals/{request.id}", {"decision": "answer", "answer": "yes"}).status_code == 200
        assert finish(run).status == "succeeded"
        wait_until(lambda: receiver.events() == ["human_question", "run_end"], 30, "the run end's webhook")
    finally:
        receiver.close()

    verify = manual_verify()
    (headers, body), (end_headers, end_body) = receiver.received
    assert verify(body, headers["X-MAS-Signature"], "s3cret-for-hooks") is True
    assert verify(end_body, end_headers["X-MAS-Signature"], "s3cret-for-hooks") is True
    assert verify(body, headers["X-MAS-Signature"], "another secret") is False
    assert verify(body + b" ", headers["X-MAS-Signature"], "s3cret-for-hooks") is False
    sent = json.loads(body)
    assert (sent["event"], sent["team"]) == ("human_question", "alpha")
    assert sent["data"] == {"run": str(run.id), "request": str(request.id), "kind": "question", "agent": "asker",
                            "question": "Ship it?", "choices": ["yes", "no"], "reason": "the agent asks",
                            "deadline": request.deadline.isoformat(), "default": "reject"}
    ended = json.loads(end_body)
    assert (ended["event"], ended["data"]["run"], ended["data"]["status"], ended["data"]["result"]) == (
        "run_end", str(run.id), "succeeded", "Shipped.")


def test_a_failing_webhook_is_retried_and_never_blocks_the_run(team_a, webhook_worker, api_for, settings):
    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]
    receiver = Receiver(status=500)
    try:
        admin = api_for(team_a, "admin")
        assert admin.patch("/api/team", {"webhook_url": receiver.url}).status_code == 200
        agent(team_a, "Plain")
        run = finish(run_start(team=team_a, agent="plain", input="x", script={"plain": [{"text": "Done."}]}))
        assert (run.status, run.result) == ("succeeded", "Done.")
        # Retried with backoff (1 s, then 2 s, …) after the run has ended.
        wait_until(lambda: len(receiver.received) >= 2, 30, "a second delivery attempt")
    finally:
        receiver.close()
    assert receiver.events()[:2] == ["run_end", "run_end"]
    assert "X-MAS-Signature" not in receiver.received[0][0]  # no secret set: nothing to sign with


def test_webhook_urls_are_checked_like_web_fetch(team_a, api_for, settings):
    settings.MAS_WEB_FETCH_ALLOW = []
    admin = api_for(team_a, "admin")
    for url, why in [("http://169.254.169.254/latest", "is a private/loopback/link-local address"),
                     ("http://127.0.0.1:9/hook", "is a private/loopback/link-local address"),
                     ("ftp://example.com/hook", "must start with http:// or https://")]:
        response = admin.patch("/api/team", {"webhook_url": url})
        assert response.status_code == 422, url
        [problem] = response.json()["detail"]
        assert problem["loc"] == ["body", "webhook_url"]
        assert why in problem["msg"]
    team_a.refresh_from_db()
    assert team_a.webhook_url == ""
    # Operators decide, but the team's settings are an admin's.
    assert api_for(team_a, "operator").patch("/api/team", {"webhook_url": "https://example.com/h"}).status_code == 403


def test_a_delivery_builds_no_tls_context(settings, tls_contexts):
    """Its client shares the process's TLS context: building one per delivery held the worker's loop ~20 ms."""
    import asyncio

    from agents_app.approvals.webhooks import webhook_deliver

    settings.MAS_WEB_FETCH_ALLOW = ["127.0.0.1"]
    receiver = Receiver()
    try:
        status = asyncio.run(webhook_deliver(url=receiver.url, secret="s", body=b"{}"))
    finally:
        receiver.close()
    assert (status, [body for _, body in receiver.received], tls_contexts) == (200, [b"{}"], [])
