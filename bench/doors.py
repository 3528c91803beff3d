#!/usr/bin/env python3
"""The doors against MAS's own API: time to first token and per-run overhead, one run at a time.

One daphne and one Celery worker serve the bench database; the team's one agent (``expose: true``) calls a
model that is a local HTTP server speaking OpenAI's streaming wire format (a thread of this script, not a
recording of the doors): each call streams ``--chunks`` pieces of 200 characters, ``--chunk-ms`` apart
(default 5 x 20 ms: the model's own answer takes about 80 ms, its first piece comes at once). 200 characters
is the worker's stream flush, so each piece is a ``stream_chunk`` event of its own. The same run is asked for
in eight ways, ``--runs`` times each, one at a time, alternated in rounds (the order turning each round) so
machine noise falls on all of them:

- model: the model server itself, streamed with httpx (no run: the floor);
- api+ws (the baseline): ``POST /api/runs``, then ``/ws/runs/<id>/?after=0`` to the first ``stream_chunk``
  event (first token) and to ``run_complete`` (whole), timed from before the POST;
- chat stream: ``POST /v1/chat/completions`` with ``"stream": true`` (first content delta, ``[DONE]``);
- chat: the same without streaming (whole);
- responses stream: ``POST /v1/responses`` with ``"stream": true`` (first ``response.output_text.delta``,
  ``response.completed``);
- mcp: ``tools/call`` through the ``mcp`` SDK's client over streamable HTTP, one session for all calls
  (whole; MCP streams no text, so the first progress notification, "<agent> started", is timed apart);
- a2a stream: ``SendStreamingMessage`` through the ``a2a-sdk``'s client, its card read once (the first
  artifact chunk, the ``completed`` status);
- ag-ui: ``POST /ag-ui/agents/<agent>`` (the first ``TEXT_MESSAGE_CONTENT``, ``RUN_FINISHED``).

HTTP goes through one keep-alive httpx client; each baseline run opens its websocket, as a client following
one run does. Printed: p50/p95 per way, each door's p50 over the baseline's (first token and whole), its p50
whole minus the baseline's, and the CPU of daphne and of the worker per run of each way (from /proc: the
time from before a run to before the next, ``--pause-ms`` apart, so a run's tail counts to it). Checked:
every answer is the model's whole text, every run succeeded, and each made one model call.

    .venv/bin/python bench/doors.py [--runs 30] [--chunks 5] [--chunk-ms 20] [--pause-ms 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ["MAS_RUNS_PER_MIN"] = "1000000"  # the per-team start limit, raised (daphne reads it)
os.environ["MAS_PRIVATE_URL_ALLOW"] = "127.0.0.1"  # the team's provider is this script's model server

import _common as c  # noqa: E402

AGENT = "helper"
PIECE_CHARS = 200  # the worker's stream flush (SessionConfig.stream_flush_chars): one stream_chunk a piece


# -- the model: a local server speaking OpenAI's streaming wire format --------------------------------


def answer_pieces(chunks: int) -> list[str]:
    return [f"Piece {i} of the answer. ".ljust(PIECE_CHARS, "x") for i in range(chunks)]


def _sse(choices: list[dict], usage: dict | None = None) -> bytes:
    chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1700000000, "model": "m-medium",
             "choices": choices}
    if usage is not None:
        chunk["usage"] = usage
    return f"data: {json.dumps(chunk)}\n\n".encode()


class ModelServer:
    """Every POST answered with the same stream: the role, ``pieces`` ``delay_s`` apart, the finish, usage, [DONE]."""

    def __init__(self, pieces: list[str], delay_s: float) -> None:
        self.calls = 0
        server = self
        events = [_sse([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])]
        events += [_sse([{"index": 0, "delta": {"content": piece}, "finish_reason": None}]) for piece in pieces]
        tail = (_sse([{"index": 0, "delta": {}, "finish_reason": "stop"}])
                + _sse([], {"prompt_tokens": 20, "completion_tokens": 50 * len(pieces),
                            "total_tokens": 20 + 50 * len(pieces)}) + b"data: [DONE]\n\n")

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                server.calls += 1
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    self.wfile.write(events[0] + events[1])
                    self.wfile.flush()
                    for event in events[2:]:
                        time.sleep(delay_s)
                        self.wfile.write(event)
                        self.wfile.flush()
                    self.wfile.write(tail)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


# -- one run through each way: (first token or None, whole, the answer, the run's id or None) ------------


@dataclass
class Clients:
    base: str
    token: str
    http: object  # httpx.AsyncClient, keep-alive, the token in its headers
    mcp: object  # an initialized mcp ClientSession
    a2a: object  # the a2a-sdk's client of the agent (its card fetched once), streaming
    model_url: str
    progress: list[float] = field(default_factory=list)  # mcp: first progress notification of each call
    posted: list[float] = field(default_factory=list)  # api+ws: the POST answered
    joined: list[float] = field(default_factory=list)  # api+ws: the websocket open


Outcome = tuple[float | None, float, str, str | None]


async def via_model(cl: Clients, task: str) -> Outcome:
    started, first, texts = time.perf_counter(), None, []
    body = {"model": "m-medium", "messages": [{"role": "user", "content": task}], "stream": True}
    async with cl.http.stream("POST", f"{cl.model_url}/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    first = first or time.perf_counter() - started
                    texts.append(choices[0]["delta"]["content"])
    return first, time.perf_counter() - started, "".join(texts), None


async def via_api_ws(cl: Clients, task: str) -> Outcome:
    import websockets

    started, first, texts = time.perf_counter(), None, []
    response = await cl.http.post(f"{cl.base}/api/runs", json={"agent": AGENT, "input": task})
    run_id = response.raise_for_status().json()["id"]
    cl.posted.append(time.perf_counter() - started)
    async with websockets.connect(f"{cl.base.replace('http', 'ws')}/ws/runs/{run_id}/?after=0", max_size=None,
                                  additional_headers={"Authorization": f"Bearer {cl.token}"}) as ws:
        cl.joined.append(time.perf_counter() - started)
        while True:
            message = json.loads(await ws.recv())
            for event in message.get("events") or []:
                if event["type"] == "stream_chunk":
                    first = first or time.perf_counter() - started
                    texts.append(event["data"]["text"])
                elif event["type"] == "run_complete":
                    return first, time.perf_counter() - started, "".join(texts), run_id


async def via_chat_stream(cl: Clients, task: str) -> Outcome:
    started, first, texts = time.perf_counter(), None, []
    body = {"model": AGENT, "messages": [{"role": "user", "content": task}], "stream": True}
    async with cl.http.stream("POST", f"{cl.base}/v1/chat/completions", json=body) as response:
        run_id = response.raise_for_status().headers["x-mas-run"]
        async for line in response.aiter_lines():
            if line == "data: [DONE]":
                return first, time.perf_counter() - started, "".join(texts), run_id
            if line.startswith("data: "):
                choices = json.loads(line[6:])["choices"]
                if choices and choices[0]["delta"].get("content"):
                    first = first or time.perf_counter() - started
                    texts.append(choices[0]["delta"]["content"])
    raise SystemExit(f"chat stream of run {run_id} ended without [DONE]")


async def via_chat(cl: Clients, task: str) -> Outcome:
    started = time.perf_counter()
    response = await cl.http.post(f"{cl.base}/v1/chat/completions",
                                  json={"model": AGENT, "messages": [{"role": "user", "content": task}]})
    whole = time.perf_counter() - started
    completion = response.raise_for_status().json()
    return None, whole, completion["choices"][0]["message"]["content"], completion["id"].removeprefix("chatcmpl-")


async def via_responses_stream(cl: Clients, task: str) -> Outcome:
    started, first, texts = time.perf_counter(), None, []
    async with cl.http.stream("POST", f"{cl.base}/v1/responses",
                              json={"model": AGENT, "input": task, "stream": True}) as response:
        run_id = response.raise_for_status().headers["x-mas-run"]
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "response.output_text.delta":
                first = first or time.perf_counter() - started
                texts.append(event["delta"])
            elif event["type"] in ("response.completed", "response.failed"):
                return first, time.perf_counter() - started, "".join(texts), run_id
    raise SystemExit(f"response stream of run {run_id} ended without response.completed")


async def via_mcp(cl: Clients, task: str) -> Outcome:
    started, told = time.perf_counter(), []

    async def progress(value, total, message) -> None:
        told.append(time.perf_counter() - started)

    result = await cl.mcp.call_tool(AGENT, {"task": task}, progress_callback=progress)
    whole = time.perf_counter() - started
    if told:
        cl.progress.append(told[0])
    text = "" if result.is_error else result.content[0].text
    return None, whole, text, (result.meta or {}).get("mas/run")


async def via_a2a_stream(cl: Clients, task: str) -> Outcome:
    from a2a.types import Message, Part, Role, SendMessageRequest, TaskState

    started, first, run_id, answer = time.perf_counter(), None, None, ""
    said = Message(message_id=f"m-{started}", role=Role.ROLE_USER, parts=[Part(text=task)])
    async for update in cl.a2a.send_message(SendMessageRequest(message=said)):
        if update.HasField("task"):
            run_id = update.task.id
        elif update.HasField("artifact_update"):
            if update.artifact_update.last_chunk:  # the answer, whole
                answer = update.artifact_update.artifact.parts[0].text
            else:
                first = first or time.perf_counter() - started
        elif update.HasField("status_update") and update.status_update.status.state in (
                TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED):
            return first, time.perf_counter() - started, answer, run_id
    raise SystemExit(f"a2a stream of run {run_id} ended without its end")


async def via_agui(cl: Clients, task: str) -> Outcome:
    started, first, texts = time.perf_counter(), None, []
    said = {"threadId": "bench", "runId": f"r-{started}", "state": {}, "tools": [], "context": [],
            "forwardedProps": {}, "messages": [{"id": "m1", "role": "user", "content": task}]}
    async with cl.http.stream("POST", f"{cl.base}/ag-ui/agents/{AGENT}", json=said) as response:
        run_id = response.raise_for_status().headers["x-mas-run"]
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "TEXT_MESSAGE_CONTENT":
                first = first or time.perf_counter() - started
                texts.append(event["delta"])
            elif event["type"] in ("RUN_FINISHED", "RUN_ERROR"):
                return first, time.perf_counter() - started, "".join(texts), run_id
    raise SystemExit(f"AG-UI stream of run {run_id} ended without RUN_FINISHED")


WAYS: dict[str, Callable[[Clients, str], Awaitable[Outcome]]] = {
    "model": via_model, "api+ws": via_api_ws, "chat stream": via_chat_stream, "chat": via_chat,
    "responses stream": via_responses_stream, "mcp": via_mcp, "a2a stream": via_a2a_stream, "ag-ui": via_agui}
BASELINE = "api+ws"


# -- the rounds ------------------------------------------------------------------------------------------


@dataclass
class Figures:
    first: list[float] = field(default_factory=list)
    whole: list[float] = field(default_factory=list)
    web_cpu: float = 0.0
    worker_cpu: float = 0.0
    wrong: int = 0
    run_ids: list[str] = field(default_factory=list)


async def rounds(cl: Clients, *, runs: int, warm: int, pause_s: float, answer: str, cpu) -> dict[str, Figures]:
    """``warm`` unmeasured rounds, then ``runs``; in each round every way once, the order turning."""
    figures = {name: Figures() for name in WAYS}
    names = list(WAYS)
    for number in range(warm + runs):
        if number == warm:
            for warmed in (cl.progress, cl.posted, cl.joined):
                warmed.clear()  # the warm rounds' calls
        turn = number % len(names)
        for name in names[turn:] + names[:turn]:
            before = cpu()
            first, whole, text, run_id = await WAYS[name](cl, f"Round {number}: answer, please.")
            await asyncio.sleep(pause_s)  # the run's tail (its last writes) counts to it
            after = cpu()
            if number < warm:
                continue
            each = figures[name]
            each.whole.append(whole)
            each.first += [first] if first is not None else []
            each.web_cpu += after[0] - before[0]
            each.worker_cpu += after[1] - before[1]
            each.wrong += text != answer
            each.run_ids += [run_id] if run_id else []
        if number >= warm and (number - warm + 1) % 10 == 0:
            c.say(f"  {number - warm + 1} of {runs} rounds")
    return figures


async def measure(base: str, token: str, model_url: str, *, runs: int, warm: int, pause_s: float, answer: str,
                  cpu) -> tuple[dict[str, Figures], Clients]:
    import httpx
    import httpx2
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=120) as http, \
            httpx.AsyncClient(headers=headers, timeout=120) as a2a_http, \
            httpx2.AsyncClient(headers=headers, timeout=120) as mcp_http, \
            streamable_http_client(f"{base}/mcp/", http_client=mcp_http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        card = await A2ACardResolver(a2a_http, f"{base}/a2a/{AGENT}").get_agent_card()
        a2a = ClientFactory(ClientConfig(streaming=True, httpx_client=a2a_http)).create(card)
        cl = Clients(base=base, token=token, http=http, mcp=session, a2a=a2a, model_url=model_url)
        figures = await rounds(cl, runs=runs, warm=warm, pause_s=pause_s, answer=answer, cpu=cpu)
        return figures, cl


# -- printing ------------------------------------------------------------------------------------------


def ms(values: list[float], q: float) -> str:
    return f"{c.percentile(values, q) * 1000:.1f}" if values else "–"


def report(figures: dict[str, Figures], cl: Clients, runs: int) -> None:
    base = figures[BASELINE]
    c.say("")
    c.say("| way | first token p50 / p95 | whole p50 / p95 | first token / baseline | whole / baseline | "
          "whole - baseline | CPU per run, daphne + worker |")
    c.say("| --- | --- | --- | --- | --- | --- | --- |")
    for name, each in figures.items():
        first = f"{ms(each.first, 50)} / {ms(each.first, 95)} ms" if each.first else "–"
        ratio_first = (f"{c.percentile(each.first, 50) / c.percentile(base.first, 50):.2f}"
                       if each.first and name != BASELINE else "–")
        ratio_whole = f"{c.percentile(each.whole, 50) / c.percentile(base.whole, 50):.2f}" if name != BASELINE else "–"
        extra = (f"{(c.percentile(each.whole, 50) - c.percentile(base.whole, 50)) * 1000:+.1f} ms"
                 if name != BASELINE else "–")
        cpu = (f"{each.web_cpu / runs * 1000:.1f} + {each.worker_cpu / runs * 1000:.1f} ms"
               if name != "model" else "–")
        c.say(f"| {name}{' (baseline)' if name == BASELINE else ''} | {first} | "
              f"{ms(each.whole, 50)} / {ms(each.whole, 95)} ms | {ratio_first} | {ratio_whole} | {extra} | {cpu} |")
    c.say("")
    c.say(f"api+ws, from before the POST: its answer p50 {ms(cl.posted, 50)} ms (p95 {ms(cl.posted, 95)}), the "
          f"websocket open p50 {ms(cl.joined, 50)} ms (p95 {ms(cl.joined, 95)})")
    c.say(f"mcp, first progress notification (\"{AGENT} started\"; n={len(cl.progress)}): "
          f"p50 {ms(cl.progress, 50)} ms, p95 {ms(cl.progress, 95)} ms")


def check(figures: dict[str, Figures], model: ModelServer, runs: int, warm: int) -> list[str]:
    """What went wrong: answers not the model's text, runs not found or not succeeded, model calls not one a run."""
    from django.db.models import Count

    from agents_app.models import Run

    problems = [f"{name}: {each.wrong} answers not the model's text" for name, each in figures.items() if each.wrong]
    run_ids = [run_id for name, each in figures.items() if name != "model" for run_id in each.run_ids]
    measured = (len(WAYS) - 1) * runs
    if len(run_ids) != measured:
        problems.append(f"{len(run_ids)} run ids for {measured} runs")
    statuses = dict(Run.objects.filter(pk__in=run_ids).values_list("status").annotate(n=Count("id")).order_by())
    if statuses != {"succeeded": measured}:
        problems.append(f"the runs' statuses: {statuses}")
    expected_calls = len(WAYS) * (warm + runs)  # each run one call, and the model way's own
    if model.calls != expected_calls:
        problems.append(f"{model.calls} model calls for {expected_calls}")
    return problems


# -- main ---------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="measured runs per way")
    parser.add_argument("--warm", type=int, default=3, help="unmeasured rounds first")
    parser.add_argument("--chunks", type=int, default=5, help="pieces of 200 characters the model streams")
    parser.add_argument("--chunk-ms", type=float, default=20, help="between two pieces")
    parser.add_argument("--pause-ms", type=float, default=100, help="after each run, before the next")
    args = parser.parse_args()
    c.say(f"doors: {args.runs} runs per way, one at a time, alternated; the model streams {args.chunks} x "
          f"{PIECE_CHARS} characters, {args.chunk_ms:g} ms apart; 1 daphne, 1 worker")
    c.say(f"machine {c.machine()}, {c.now_utc()}, load average {os.getloadavg()[0]:.2f}")
    c.django_setup()
    c.say(f"database {c.BENCH_DB}: created and migrated in {c.database_create():.1f} s")
    c.redis_flush()
    (c.ROOT / "var" / "log").mkdir(parents=True, exist_ok=True)
    import psutil

    from agents_app.kinds import PROVIDER
    from mas_core.definitions.services import definition_parse, definition_save

    pieces = answer_pieces(args.chunks)
    model = ModelServer(pieces, args.chunk_ms / 1000)
    team = c.team_with_agent(slug="bench-doors", agent=AGENT, frontmatter="expose: true\ntier: medium\n")
    text = f"---\nname: Local\ntype: openai\nbase_url: {model.url}/v1\nmodels:\n- name: m-medium\n  tier: medium\n---\n"
    definition_save(kind=PROVIDER, team=team, parsed=definition_parse(kind=PROVIDER, team=team, text=text))
    token = c.member_token(team, username="bench-doors")
    port = c.free_port()
    web = c.start_daphne(port)
    worker = c.Worker(concurrency=4).start()
    web_process = psutil.Process(web.pid)

    def cpu() -> tuple[float, float]:
        times = web_process.cpu_times()
        return times.user + times.system, worker.cpu_seconds()

    try:
        figures, clients = asyncio.run(measure(f"http://127.0.0.1:{port}", token, model.url, runs=args.runs,
                                                warm=args.warm, pause_s=args.pause_ms / 1000, answer="".join(pieces),
                                                cpu=cpu))
    finally:
        worker.stop()
        web.terminate()
        web.wait(10)
        model.stop()
    report(figures, clients, args.runs)
    problems = check(figures, model, args.runs, args.warm)
    c.say("checks: " + ("; ".join(problems) if problems else
                        "every answer the model's text, every run succeeded, one model call a run"))
    c.say(f"daphne: python -m daphne mas_project.asgi:application; worker: {worker.command_line()}; "
          "MAS_RUNS_PER_MIN=1000000")
    c.database_drop()
    c.redis_flush()
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
