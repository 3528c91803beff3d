"""A remote agent's session: MAS as an A2A client (issue 25, point 3).

A delegate call or a workflow step that names a remote agent (``agents_app.specs.RemoteAgentSpec``) gets an
activation and a session like any agent's; the session, instead of the kernel's loop, sends its task to the
remote agent as an A2A message and follows the task to its end:

- its agent card is read from ``card_url`` (at most ``MAX_CARD_BYTES``), with the headers the definition names
  (their ``${NAME}`` taken from the server's environment, as declared for the team), through web_fetch's
  address policy — which the card's own endpoint meets too, on every connection;
- the task's states arrive as ``remote_status`` events and its text as ``stream_chunk`` events of the session
  (a server that does not stream is asked for the task every ``POLL_S`` seconds);
- the answer is the completed task's text artifacts (else its last message), its file artifacts are written
  to the workspace under ``remote/<agent>/``;
- a task that asks for input (``input-required``) asks a person in MAS (a question, as ``ask_human`` does):
  the session suspends holding nothing, and the answer goes back to the remote agent as a message of the task;
- the run's cancellation cancels the remote task (``CancelTask``), and so does ``timeout_s`` without an end.

The remote task's id is kept on the session (``Session.state``) as soon as it is known, so a session resumed
on another worker, or after a person answered, follows the same task instead of sending the task again.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from dataclasses import asdict, dataclass
from typing import Any

from django.db import connection

from agents_app.approvals.gate import ApprovalFailed, Gate
from agents_app.execution.guardrail_calls import RemoteChecks
from agents_app.execution.guardrails import SessionGuard, guardrails_sql, rows_read, session_guard
from agents_app.execution.lifecycle import SessionStart, session_settle, session_suspend
from agents_app.execution.store import DatabaseStore, SessionTakenOver, monitor
from agents_app.kernel.loop import GuardrailTripped
from agents_app.llm.scripted import MemoryCursor
from agents_app.models import Team
from mas_core import lanes, telemetry
from mas_core.runner import db
from mas_core.secrets import Redactor, SecretUnavailable, declared_values, redacting, references_expanded
from tools_app.paths import normalise_path
from tools_app.registry import DATABASE_ERRORS

logger = logging.getLogger(__name__)

MAX_CARD_BYTES = 256 * 1024
MAX_TASK_CHARS = 200_000  # the message sent: the task with its context
MAX_ANSWER_CHARS = 200_000  # the answer kept: the task's text, cut beyond
MAX_FILES, MAX_FILE_BYTES = 20, 1024 * 1024  # file artifacts written to the workspace
MAX_UPDATES = 100_000  # stream items followed for one message
MAX_ARTIFACTS = 100  # artifacts whose text is kept (of those the task streams)
STREAM_FLUSH_CHARS = 200  # streamed text is told in stream_chunk events of this many characters (or at a status)
MAX_CHUNK_CHARS = 8_000  # and of no more than this many (a message answered whole is told in several)
POLL_S = 2.0
CANCEL_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 30.0


class RemoteAgentFailed(Exception):
    """The remote agent could not be reached, refused the task or failed it: the session fails with ``kind``."""

    def __init__(self, message: str, *, kind: str = "provider_error", retry: bool = False) -> None:
        super().__init__(message)
        self.kind, self.retry = kind, retry


@dataclass
class Conversation:
    """What the session keeps of its remote task (``Session.state["remote"]``): resumed, it follows that task."""

    task: str = ""
    context: str = ""
    answered: int = 0  # the remote's questions answered so far (each asked a person once)

    @classmethod
    def of(cls, state: dict[str, Any] | None) -> "Conversation":
        kept = (state or {}).get("remote") or {}
        return cls(task=str(kept.get("task", "")), context=str(kept.get("context", "")),
                   answered=int(kept.get("answered", 0)))


async def remote_session(start: SessionStart) -> None:
    """Run the remote agent's session ``start`` to its end (or its suspension), watched like any session."""
    run, session = start.run, start.session
    store = DatabaseStore(run_id=run.id, session_id=session.id, agent=start.agent.slug, tier="",
                          cursor=MemoryCursor(dict(run.script_cursor)), budget=run.budget, team_id=run.team_id,
                          claim=session.claim, writes=session.writes)
    talk = RemoteTalk(start, store)
    talk.span = await telemetry.session_span(run_id=run.id, session_id=session.id, agent=start.agent.slug,
                                             attempt=session.attempt, provider="a2a", model="")
    task = asyncio.create_task(talk.run())
    monitor.watch(session.id, run.id, store, task)
    ending: dict[str, Any] | None
    try:
        ending = await task
    except (SessionTakenOver, *DATABASE_ERRORS) as error:  # resumed later, or by the worker that took it over
        logger.warning("remote session stopped: left to be resumed", extra={"error": str(error)[:500]})
        ending = None
    except asyncio.CancelledError:  # the run was cancelled: the remote task was cancelled too (RemoteTalk.run)
        ending = talk.ending("cancelled", result=talk.partial())
    except Exception as error:  # a bug must not leave the session running forever
        logger.exception("remote session crashed")
        ending = talk.ending("failed", failure=talk.failure("unknown", f"{type(error).__name__}: {error}", retry=True))
    finally:
        monitor.forget(session.id)
        try:
            await store.close()
        except (SessionTakenOver, *DATABASE_ERRORS):
            ending = None
    telemetry.end(talk.span, error=None if ending is None or ending["status"] == "ok" else ending["status"],
                  attributes={"mas.session.status": ending["status"] if ending else "interrupted",
                              "mas.remote.task": talk.conversation.task or None})
    if ending is None:
        return
    if ending["status"] == "suspended":
        await db(session_suspend)(run_id=run.id, session_id=session.id, result=ending["result"], meta={})
    else:
        await db(session_settle)(run_id=run.id, session_id=session.id, ladder=[], **ending)


class RemoteTalk:
    """One session's conversation with its remote agent."""

    def __init__(self, start: SessionStart, store: DatabaseStore) -> None:
        self.start, self.store = start, store
        self.agent = start.agent.slug
        self.remote = start.agent.remote
        self.conversation = Conversation.of(start.session.state)
        self.gate = Gate(rules=[], run_id=start.run.id, session_id=start.session.id, agent=self.agent)
        self.text: dict[str, str] = {}  # artifact id → text streamed so far (the answer when the task is not read)
        self.unsaid = ""  # streamed text not yet told in a stream_chunk event
        self.last_status: tuple[str, str, str] | None = None  # the last remote_status told: (task, state, message)
        self.redact = Redactor(declared_values())
        self.client: Any = None
        self.guard: SessionGuard | None = None
        self.span: Any = None  # the session's invoke_agent span (None: tracing is off); the remote's trace goes on

    # -- how it ends

    def ending(self, status: str, *, result: str = "", failure: dict[str, Any] | None = None) -> dict[str, Any]:
        return {"status": status, "result": result, "meta": {"remote_task": self.conversation.task}, "failure": failure}

    def failure(self, kind: str, message: str, *, retry: bool = False) -> dict[str, Any]:
        return {"kind": kind, "message": self.redact(message)[:2000], "last_tool_calls": [], "suggested_retry": retry}

    def partial(self) -> str:
        return "\n\n".join(self.text.values())[:MAX_ANSWER_CHARS]

    async def run(self) -> dict[str, Any]:
        """Talk to the remote agent until its task ends or waits for a person: the session's ending."""
        import httpx
        from a2a.client import ClientConfig, ClientFactory

        from mas_core.netpolicy import web_url_transport
        from mas_core.tls import tls_off_loop

        run = self.start.run
        team, rows = await db(_team_and_guardrails)(team_id=run.team_id, slugs=[
            *(self.start.activation.ctx.step_guardrails or []), *run.guardrails])
        self.guard = session_guard(rows=rows, team=team, system_prompt="", emit=self.store.emit, gate=self.gate,
                                   flush=self.store.flush,
                                   ask=lambda: RemoteChecks(run=run, cursor=self.store.cursor, store=self.store,
                                                            team=team))
        try:
            headers = references_expanded(self.remote.headers, what="header", team=team)
        except SecretUnavailable as error:
            return self.ending("failed", failure=self.failure("policy_denied", f"remote agent {self.agent}: {error}"))
        self.redact = Redactor([*headers.values(), *declared_values()])
        traceparent = telemetry.traceparent_of(self.span)
        if traceparent:  # the remote agent's work continues this session's trace (W3C Trace Context)
            headers = {**headers, "traceparent": traceparent}
        await tls_off_loop()
        timeout = httpx.Timeout(CONNECT_TIMEOUT_S, read=float(self.remote.timeout_s))
        try:
            with redacting(headers.values()):
                async with httpx.AsyncClient(transport=web_url_transport(httpx), headers=headers, timeout=timeout,
                                             trust_env=False, follow_redirects=False) as http:
                    card = await self._card(http)
                    factory = ClientFactory(ClientConfig(streaming=card.capabilities.streaming, httpx_client=http,
                                                         supported_protocol_bindings=["JSONRPC", "HTTP+JSON"]))
                    async with factory.create(card) as self.client:
                        return await self._converse_in_time(streaming=card.capabilities.streaming)
        except RemoteAgentFailed as error:
            return self.ending("failed", result=self.partial(), failure=self.failure(error.kind, str(error),
                                                                                    retry=error.retry))
        except ApprovalFailed as error:
            return self.ending("failed", result=self.partial(), failure=self.failure("policy_denied", str(error)))
        except GuardrailTripped as tripped:  # what it was to be sent, or what it answered, was blocked
            return self.ending("failed", failure=self.failure("guardrail", str(tripped)))
        except (SessionTakenOver, *DATABASE_ERRORS):
            raise
        except Exception as error:  # the network, the SDK: a clear failure, tried again by the run's retries
            from mas_core.netpolicy import blocked_cause

            blocked = blocked_cause(error)
            if blocked is not None:
                return self.ending("failed", failure=self.failure(
                    "policy_denied", f"remote agent {self.agent}: {blocked}"))
            return self.ending("failed", result=self.partial(), failure=self.failure(
                "provider_error", f"remote agent {self.agent}: {type(error).__name__}: {error}", retry=True))

    async def _converse_in_time(self, *, streaming: bool) -> dict[str, Any]:
        """:meth:`_converse` within ``timeout_s``; the remote task cancelled when the time is up or the run is
        cancelled."""
        try:
            async with asyncio.timeout(self.remote.timeout_s):
                return await self._converse(streaming=streaming)
        except TimeoutError:
            await self._cancel_remote()
            return self.ending("failed", result=self.partial(), failure=self.failure(
                "timeout", f"remote agent {self.agent} did not finish within {self.remote.timeout_s} s "
                           f"(its timeout_s); its task was cancelled"))
        except asyncio.CancelledError:
            await self._cancel_remote()
            raise

    # -- the card

    async def _card(self, http) -> Any:
        """The remote agent's card, read within MAX_CARD_BYTES (RemoteAgentFailed saying what is wrong with it)."""
        from a2a.client.card_resolver import parse_agent_card

        url = self.remote.card_url
        async with lanes.away(), http.stream("GET", url, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise RemoteAgentFailed(f"remote agent {self.agent}: its card at {url} answered HTTP "
                                   f"{response.status_code}", retry=response.status_code >= 500)
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise RemoteAgentFailed(f"remote agent {self.agent}: its card at {url} is larger than "
                                       f"{MAX_CARD_BYTES // 1024} KB")
        from google.protobuf.json_format import ParseError

        try:
            card = parse_agent_card(json.loads(body))
        except (ValueError, TypeError, ParseError) as error:
            raise RemoteAgentFailed(f"remote agent {self.agent}: {url} is not an A2A agent card ({error})") from None
        if not card.supported_interfaces:
            raise RemoteAgentFailed(f"remote agent {self.agent}: its card at {url} names no endpoint")
        return card

    # -- the task

    async def _converse(self, *, streaming: bool) -> dict[str, Any]:
        from a2a.types import GetTaskRequest, SendMessageRequest, SubscribeToTaskRequest

        conversation = self.conversation
        if not conversation.task:
            reply = await self._follow(self.client.send_message(SendMessageRequest(message=self._message(
                await self._checked_out(self._task_text(), task=True), number=0))))
        else:  # resumed: the task it sent before, as it is now
            reply = await self._net(self.client.get_task(GetTaskRequest(id=conversation.task)))
            await self._status(reply.status, task=reply.id)
            if not _settled(reply.status.state):
                follow = (self.client.subscribe(SubscribeToTaskRequest(id=conversation.task)) if streaming
                          else None)
                reply = await (self._follow(follow) if follow is not None else self._poll())
        while True:
            if reply is None:  # the remote answered with a message, not a task
                return self.ending("ok", result=self.partial())
            outcome = await self._ended(reply)
            if outcome is not None:
                return outcome
            # It waits for input: a person answers it in MAS, once per question.
            question = _text_of(reply.status.message.parts) or "The remote agent needs more input to go on."
            waiting, answer = await self.gate.ask(call_id=f"remote:{conversation.task}:{conversation.answered}",
                                                  question=f"{self.agent} asks: {question}"[:4000], choices=[])
            if waiting:
                return self.ending("suspended", result=self.partial())
            answer = await self._checked_out(answer)
            conversation.answered += 1
            await self._keep()  # before it is sent: a resumed session never sends one answer twice
            reply = await self._follow(self.client.send_message(SendMessageRequest(message=self._message(
                answer, number=conversation.answered))))

    async def _ended(self, task) -> dict[str, Any] | None:
        """How the session ends with ``task`` in its state now; None while it waits for input."""
        from a2a.types import TaskState

        state = task.status.state
        said = _text_of(task.status.message.parts)
        if state == TaskState.TASK_STATE_COMPLETED:
            answer = await self._answer(task)
            if self.guard is not None:
                answer = await self.guard.check("model_answer", answer)
            return self.ending("ok", result=answer)
        if state == TaskState.TASK_STATE_INPUT_REQUIRED:
            return None
        if state == TaskState.TASK_STATE_CANCELED:
            return self.ending("cancelled", result=self.partial())
        what = {TaskState.TASK_STATE_FAILED: "failed its task",
                TaskState.TASK_STATE_REJECTED: "rejected the task",
                TaskState.TASK_STATE_AUTH_REQUIRED: "asks for authentication MAS cannot give (check its headers)"}
        message = f"remote agent {self.agent} {what.get(state, 'ended its task in an unknown state')}"
        return self.ending("failed", result=self.partial(), failure=self.failure(
            "provider_error", message + (f": {said}" if said else "")))

    async def _checked_out(self, text: str, *, task: bool = False) -> str:
        """What leaves for the remote agent, as the session's guardrails let it: the task as a delegated task's
        (``run_input``), and all of it as a model request's (``model_request``) — it goes to another party."""
        if self.guard is None:
            return text
        if task:
            text = await self.guard.check("run_input", text)
        return await self.guard.check("model_request", text)

    def _message(self, text: str, *, number: int):
        from a2a.types import Message, Part, Role

        conversation = self.conversation
        return Message(message_id=f"mas-{self.start.session.id}-{number}", role=Role.ROLE_USER,
                       task_id=conversation.task, context_id=conversation.context, parts=[Part(text=text)])

    def _task_text(self) -> str:
        """The activation's task with what its session would be told besides: the delegating agent's context,
        the results of the workflow steps it depends on."""
        context = self.start.activation.ctx
        text = self.start.activation.input
        if context.parent_context is not None:
            given = context.parent_context
            text += "\n\n## Context\n\n" + (given if isinstance(given, str) else json.dumps(given, ensure_ascii=False))
        if context.dependencies:
            text += "\n\n## Results of the steps before this one\n\n" + "\n\n".join(
                f"### {step}\n\n{result}" for step, result in context.dependencies.items())
        if len(text) > MAX_TASK_CHARS:
            text = text[:MAX_TASK_CHARS] + "\n\n[… cut]"
        return text

    async def _follow(self, updates) -> Any:
        """Follow a stream of the remote's updates to its end: the task as it is then (None: it answered with a
        message)."""
        from a2a.types import GetTaskRequest

        last = None
        count = 0
        iterator = updates.__aiter__()
        while True:
            try:
                async with lanes.away():
                    update = await iterator.__anext__()
            except StopAsyncIteration:
                break
            count += 1
            if count > MAX_UPDATES:
                raise RemoteAgentFailed(f"remote agent {self.agent} sent more than {MAX_UPDATES} updates for one message")
            if update.HasField("task"):
                last = update.task
                await self._known(last.id, last.context_id)
                await self._status(last.status, task=last.id)
            elif update.HasField("status_update"):
                if last is not None:
                    last.status.CopyFrom(update.status_update.status)
                await self._known(update.status_update.task_id, update.status_update.context_id)
                await self._status(update.status_update.status, task=update.status_update.task_id)
            elif update.HasField("artifact_update"):
                await self._artifact(update.artifact_update)
            elif update.HasField("message"):
                self.text["message"] = _text_of(update.message.parts)[:MAX_ANSWER_CHARS]
                if not self._answers_checked():
                    self.unsaid += self.text["message"]
        await self._tell_streamed()
        if not self.conversation.task:
            return None
        if last is not None and not _settled(last.status.state):
            return await self._poll()  # the stream ended before the task did (a non-streaming send, say)
        try:  # the task as the remote keeps it: its artifacts whole
            return await self._net(self.client.get_task(GetTaskRequest(id=self.conversation.task)))
        except (SessionTakenOver, *DATABASE_ERRORS):
            raise
        except Exception:  # noqa: BLE001 - a server that forgets ended tasks: what it streamed stands
            if last is None:
                raise
            return last

    async def _poll(self) -> Any:
        """Ask for the task every POLL_S seconds until it ends or waits for input."""
        from a2a.types import GetTaskRequest

        seen = None
        while True:
            task = await self._net(self.client.get_task(GetTaskRequest(id=self.conversation.task)))
            if task.status.state != seen:
                seen = task.status.state
                await self._status(task.status, task=task.id)
            if _settled(task.status.state):
                return task
            async with lanes.away():
                await asyncio.sleep(POLL_S)

    async def _known(self, task: str, context: str) -> None:
        """The remote task's id, kept on the session the first time it is seen."""
        if task and not self.conversation.task:
            self.conversation.task, self.conversation.context = task, context
            await self.store.emit("remote_task", {"agent": self.agent, "task": task, "context": context,
                                                  "card_url": self.remote.card_url})
            await self._keep()

    async def _keep(self) -> None:
        self.store.stage_state({"remote": asdict(self.conversation)})
        await self.store.flush()

    async def _status(self, status, *, task: str) -> None:
        from a2a.types import TaskState

        said = self.redact(_text_of(status.message.parts))[:2000]
        state = TaskState.Name(status.state).removeprefix("TASK_STATE_").lower().replace("_", "-")
        await self._tell_streamed()
        if (task, state, said) == self.last_status:  # told already (a server that repeats itself)
            return
        self.last_status = (task, state, said)
        await self.store.emit("remote_status", {"task": task, "state": state, "message": said})
        await self.store.flush()

    async def _artifact(self, update) -> None:
        artifact = update.artifact
        text = _text_of(artifact.parts)
        key = artifact.artifact_id or artifact.name or "answer"
        if not text or (key not in self.text and len(self.text) >= MAX_ARTIFACTS):
            return
        before = self.text.get(key, "")
        room = MAX_ANSWER_CHARS - sum(len(kept) for other, kept in self.text.items() if other != key)
        whole = (before + text if update.append else text)[:max(room, len(before))]
        self.text[key] = whole
        # A chunk adds to the text; an artifact sent whole again (its last chunk, say) adds what is new.
        new = whole[len(before):] if whole.startswith(before) else whole
        if new and not self._answers_checked():
            self.unsaid += new
            if len(self.unsaid) >= STREAM_FLUSH_CHARS:
                await self._tell_streamed()

    async def _tell_streamed(self) -> None:
        """The streamed text not told yet, as one ``stream_chunk`` event."""
        text, self.unsaid = self.unsaid, ""
        for start in range(0, len(text), MAX_CHUNK_CHARS):
            await self.store.emit("stream_chunk", {"text": text[start:start + MAX_CHUNK_CHARS]})

    def _answers_checked(self) -> bool:
        """A guardrail judges the answer: it is not streamed, and shows whole once judged (as the session's)."""
        return self.guard is not None and any("model_answer" in rule.where for rule in self.guard.rules)

    async def _answer(self, task) -> str:
        """The completed task's text artifacts (else what it streamed, else its last message); its file
        artifacts written to the workspace."""
        texts, written = [], 0
        for artifact in task.artifacts:
            text = _text_of(artifact.parts)
            if text:
                texts.append(text)
            for index, part in enumerate(artifact.parts):
                if not _is_file(part):
                    continue
                if written >= MAX_FILES:
                    break
                written += await self._file(part, name=part.filename or artifact.name or
                                            f"{artifact.artifact_id}-{index}")
        answer = "\n\n".join(texts) or self.partial() or _text_of(task.status.message.parts)
        return answer[:MAX_ANSWER_CHARS]

    async def _file(self, part, *, name: str) -> int:
        """Write a file the remote agent handed back under ``remote/<agent>/`` (1, or 0 when it is too large)."""
        data = part.text.encode("utf-8") if part.WhichOneof("content") == "text" else bytes(part.raw)
        if len(data) > MAX_FILE_BYTES:
            await self.store.emit("error", {"where": "remote", "kind": "tool_error", "message": (
                f"file {name} of remote agent {self.agent} is larger than {MAX_FILE_BYTES // 1024} KB: not kept")})
            return 0
        path = normalise_path(f"remote/{self.agent}/{name.rsplit('/', 1)[-1]}")
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            content, path = base64.b64encode(data).decode("ascii"), path + ".base64"
        await self.store.file_write(path, content)
        return 1

    async def _cancel_remote(self) -> None:
        """Cancel the remote task (the run was cancelled, or its time is up), bounded: it may not answer."""
        from a2a.types import CancelTaskRequest

        if not self.conversation.task or self.client is None:
            return
        try:
            async with asyncio.timeout(CANCEL_TIMEOUT_S):
                await self.client.cancel_task(CancelTaskRequest(id=self.conversation.task))
            await self.store.emit("remote_status", {"task": self.conversation.task, "state": "canceled",
                                                    "message": "cancelled by MAS"})
        except Exception as error:  # noqa: BLE001 - told, not raised: the session ends anyway
            await self.store.emit("error", {"where": "remote", "kind": "provider_error", "message": self.redact(
                f"remote agent {self.agent}: its task {self.conversation.task} could not be cancelled: "
                f"{type(error).__name__}: {error}")[:2000]})

    async def _net(self, awaitable) -> Any:
        async with lanes.away():
            return await awaitable


def _team_and_guardrails(*, team_id: int, slugs: list[str]) -> tuple[str, list[dict[str, Any]]]:
    """The team's slug and the guardrails the session applies (the team's defaults, those the workflow step and
    the run name), in one statement."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT t.slug, {guardrails_sql(team='team', slugs='slugs')} FROM {Team._meta.db_table} t "
                       f"WHERE t.id = %(team)s", {"team": team_id, "slugs": slugs})
        team, rows = cursor.fetchone()
    return team, rows_read(rows)


def _settled(state) -> bool:
    """The task ended, or waits for input: following it stops there."""
    from a2a.types import TaskState

    return state in {TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_CANCELED,
                     TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_INPUT_REQUIRED,
                     TaskState.TASK_STATE_AUTH_REQUIRED}


def _is_file(part) -> bool:
    """A part that is a file: named, or bytes (a file by URL is named in the text)."""
    return part.WhichOneof("content") in {"text", "raw"} and (bool(part.filename) or part.WhichOneof("content") == "raw")


def _text_of(parts) -> str:
    """The text of a message's or an artifact's parts (data parts as JSON, files by URL as their URL; files
    handed over whole are not text)."""
    from google.protobuf.json_format import MessageToDict

    texts = []
    for part in parts:
        kind = part.WhichOneof("content")
        if _is_file(part):
            continue
        if kind == "url":
            texts.append(f"{part.filename or 'file'}: {part.url}")
        elif kind == "text":
            texts.append(part.text)
        elif kind == "data":
            texts.append(json.dumps(MessageToDict(part.data), ensure_ascii=False))
    return "\n".join(texts)
