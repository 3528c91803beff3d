"""MCP servers as tools: connect with the ``mcp`` SDK, discover, bridge tools, call them — never hang.

Each connection lives in a task of its own, which enters the SDK's transport
and ``ClientSession`` and leaves them when told to close: the SDK's anyio
scopes stay in one task, and a connect that takes too long is simply
cancelled. Calls go through the session from any task of the same loop, each
with its own timeout; a server that hangs, crashes, errors or floods gives a
clear tool error, and after ``BREAKER_FAILURES`` failures in a row a server
is not tried again for ``BREAKER_OPEN_S`` (per worker process).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from django.conf import settings

from mas_core import netpolicy
from mas_core.secrets import Redactor, SecretUnavailable, declared_values, exception_text
from mas_core.secrets import redact_loggers, redacting, references, references_expanded
from mas_core.definitions.services import stdio_not_granted
from mas_core.tls import tls
from tools_app.mcp import sandbox
from tools_app.mcp.stderr import StderrReader
from tools_app.specs import MCPServerSpec

logger = logging.getLogger(__name__)
NAME_RE = re.compile(r"[^a-zA-Z0-9_-]+")
BREAKER_FAILURES = 3
BREAKER_OPEN_S = 30.0

Emit = Callable[[str, dict[str, Any]], Awaitable[None]]


class MCPError(Exception):
    """A server could not be reached or answered with an error; the message is for the model and the admin."""


def bridged_name(server: str, tool: str) -> str:
    """``mcp__<server>__<tool>``, valid for every provider (``^[a-zA-Z0-9_-]{1,64}$``)."""
    name = f"mcp__{NAME_RE.sub('_', server)}__{NAME_RE.sub('_', tool)}"
    if len(name) > 64:
        digest = hashlib.sha256(name.encode()).hexdigest()[:8]
        name = f"{name[:55]}_{digest}"
    return name


def tool_hash(description: str, input_schema: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps([description, input_schema], sort_keys=True).encode()).hexdigest()


def resolve(values: dict[str, str], secrets: dict[str, str], *, what: str, team: str = "") -> dict[str, str]:
    """The row's values with ``${NAME}`` taken from the server's environment, and its stored secrets.

    Each name must be declared for ``team`` (a slug) in MAS_TEAM_SECRETS as the
    operator's list stands now: a row saved before it changed is refused here,
    before anything is started or sent.
    """
    try:
        return {**references_expanded(values, what=what, team=team), **secrets}
    except SecretUnavailable as error:
        raise MCPError(str(error)) from None


@dataclass
class ServerConfig:
    """What connecting needs, read from an ``MCPServer`` row (secrets included: never sent anywhere else)."""

    slug: str
    spec: MCPServerSpec
    secret_env: dict[str, str] = field(default_factory=dict)
    secret_headers: dict[str, str] = field(default_factory=dict)
    team_id: int | None = None
    team: str = ""  # the slug: MAS_TEAM_SECRETS may pin a variable to some teams
    stdio_allowed: bool = False  # the operator's grant (Team.stdio_mcp_allowed): a stdio server starts only with it

    @classmethod
    def of(cls, row, spec: dict[str, Any] | None = None) -> ServerConfig:
        """``row``'s config; ``spec``: the version of it a run pinned, in place of the row's
        (the secrets are always the row's: versions never hold them)."""
        return cls(slug=row.slug, spec=MCPServerSpec.model_validate(row.spec if spec is None else spec),
                   secret_env=dict(row.secret_env or {}), secret_headers=dict(row.secret_headers or {}),
                   team_id=row.team_id, team=row.team.slug, stdio_allowed=row.team.stdio_mcp_allowed)


@dataclass
class DiscoveredTool:
    name: str
    description: str
    input_schema: dict[str, Any]
    # The server's annotation readOnlyHint (not part of the hash an admin approves: a hint, not a contract).
    read_only: bool = False

    @property
    def hash(self) -> str:
        return tool_hash(self.description, self.input_schema)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema,
                "hash": self.hash}


def _read_only(tool) -> bool:
    """The tool's ``readOnlyHint`` annotation (``read_only_hint`` in the SDK's own model)."""
    annotations = getattr(tool, "annotations", None)
    return bool(getattr(annotations, "read_only_hint", None) or getattr(annotations, "readOnlyHint", None))


# -- circuit breaker (per worker process) ---------------------------------------------------------

_failures: dict[tuple, tuple[int, float]] = {}


def _breaker_key(config: ServerConfig) -> tuple:
    return (config.team_id, config.slug)


def breaker_check(config: ServerConfig) -> None:
    count, since = _failures.get(_breaker_key(config), (0, 0.0))
    if count >= BREAKER_FAILURES and time.monotonic() - since < BREAKER_OPEN_S:
        raise MCPError(f"MCP server {config.slug} failed {count} times in a row; not tried again for "
                       f"{BREAKER_OPEN_S:g} s")


def breaker_record(config: ServerConfig, ok: bool) -> None:
    key = _breaker_key(config)
    if ok:
        _failures.pop(key, None)
    else:
        count, _ = _failures.get(key, (0, 0.0))
        _failures[key] = (count + 1, time.monotonic())


# -- one connection -----------------------------------------------------------------------------------


def connection_limits() -> tuple[float, float, int]:
    return (float(settings.MAS_MCP_CONNECT_TIMEOUT_S), float(settings.MAS_MCP_LIST_TIMEOUT_S),
            int(settings.MAS_MCP_MAX_OUTPUT_CHARS))


class Connection:
    """An open session with one MCP server."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.tools: list[DiscoveredTool] = []
        self._session = None
        self._ready = asyncio.Event()
        self._closing = asyncio.Event()
        self._error: BaseException | None = None
        self._task: asyncio.Task | None = None
        self._stderr: StderrReader | None = None
        # What the server was given (its env, its headers) and every value declared for teams: never in an
        # error, an event or a log line, whatever the server prints or the SDK quotes.
        self._redact = Redactor(declared_values())

    def _secrets(self, values: dict[str, str], resolved: dict[str, str]) -> Redactor:
        referenced = [os.environ[name] for value in values.values() for name in references(value)
                      if name in os.environ]
        return Redactor([*resolved.values(), *referenced, *declared_values()])

    def _transport(self):
        spec = self.config.spec
        if spec.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client

            if not self.config.stdio_allowed:  # a row saved before the operator took the grant back
                raise MCPError(stdio_not_granted(self.config.team) + "; not started")
            env = resolve(spec.env, self.config.secret_env, what="env", team=self.config.team)
            self._redact = self._secrets(spec.env, env)
            # In bubblewrap with exactly this env (and PATH/HOME): the SDK's few inherited variables are unset there.
            try:
                program, arguments, environment = sandbox.wrap(spec.command, list(spec.args), env,
                                                               list(get_default_environment()))
            except (sandbox.SandboxUnavailable, sandbox.SandboxRefused) as error:
                raise MCPError(str(error)) from None
            params = StdioServerParameters(command=program, args=arguments, env=environment)
            self._stderr = StderrReader(server=self.config.slug, team=self.config.team, redact=self._redact)
            return stdio_client(params, errlog=self._stderr.writer)
        headers = resolve(spec.headers, self.config.secret_headers, what="header", team=self.config.team)
        self._redact = self._secrets(spec.headers, headers)
        if spec.transport == "sse":
            from mcp.client.sse import sse_client

            return sse_client(spec.url, headers=headers, timeout=float(spec.timeout_s),
                              httpx_client_factory=_guarded_client)
        from mcp.client.streamable_http import streamable_http_client

        import httpx2

        client = _guarded_client(headers=headers, timeout=httpx2.Timeout(float(spec.timeout_s)))
        return _with_client(client, streamable_http_client(spec.url, http_client=client))

    async def _run(self) -> None:
        from mcp import ClientSession

        try:
            if self.config.spec.transport != "stdio":
                try:  # before anything is sent; the transport checks every request again as it connects
                    await netpolicy.private_url_check(self.config.spec.url)
                except netpolicy.BlockedAddress as error:
                    raise MCPError(f"url refused: {error}") from None
            transport = self._transport()
            # The SDK's tasks (started in here) log what the server prints: their lines are redacted too.
            with redacting(self._redact.values):
                async with transport as streams:
                    if self._stderr is not None:
                        self._stderr.spawned()
                    read, write = streams[0], streams[1]
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        self._session = session
                        self._ready.set()
                        await self._closing.wait()
        except BaseException as error:  # noqa: BLE001 - reported to whoever waits for the connection
            self._error = error
            self._ready.set()
            if isinstance(error, asyncio.CancelledError):
                raise
        finally:
            self._session = None
            if self._stderr is not None:
                self._stderr.spawned()

    def _fail(self, message: str) -> MCPError:
        return MCPError(self._redact(message))

    def _why(self, error: BaseException | None) -> str:
        return _describe(error, self._redact)

    async def open(self, *, close_in_background: bool = False) -> None:
        """Connect and list the tools, within the connect and list timeouts. ``close_in_background``: on a
        timeout, raise at once and leave the server (the SDK ends a process in a few seconds) in a task of
        this loop, which must outlive it (a web server's); else that is waited for."""
        connect_s, list_s, _ = connection_limits()
        if not _sdk_loaded:  # before the timeout starts, and off the event loop
            await asyncio.to_thread(_sdk_load)
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.config.slug}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=min(connect_s, self.config.spec.timeout_s))
        except asyncio.TimeoutError:
            message = (f"MCP server {self.config.slug} did not answer within "
                       f"{min(connect_s, self.config.spec.timeout_s):g} s (connect)")
            if close_in_background:
                self._close_later()
                tail = self._stderr.tail() if self._stderr is not None else ""
                raise self._fail(message + (f" (stderr: {tail})" if tail else "")) from None
            await self.close(graceful=False)
            raise self._fail(message + await self._stderr_note()) from None
        if self._session is None:
            await self.close(graceful=False)
            if isinstance(self._error, MCPError):
                raise self._fail(f"MCP server {self.config.slug}: {self._error}")
            raise self._fail(f"MCP server {self.config.slug} could not be reached: {self._why(self._error)}"
                             + await self._stderr_note())
        try:
            listed = await asyncio.wait_for(self._session.list_tools(), timeout=list_s)
        except asyncio.TimeoutError:
            if close_in_background:
                self._close_later()
            else:
                await self.close()
            raise self._fail(f"MCP server {self.config.slug} did not list its tools within {list_s:g} s") from None
        except Exception as error:
            await self.close()
            raise self._fail(f"MCP server {self.config.slug} could not list its tools: {self._why(error)}") from None
        self.tools = [DiscoveredTool(tool.name, tool.description or "", dict(tool.input_schema or {}),
                                     read_only=_read_only(tool))
                      for tool in listed.tools]

    def _close_later(self) -> None:
        task = asyncio.create_task(self.close(graceful=False), name=f"mcp-close:{self.config.slug}")
        _closing.add(task)  # a reference until it is done: the loop keeps only weak ones
        task.add_done_callback(_closing.discard)

    async def _stderr_note(self) -> str:
        """The last lines the server wrote to stderr (redacted), for an error saying why it did not start."""
        if self._stderr is None:
            return ""
        await asyncio.to_thread(self._stderr.finished, 1.0)
        tail = self._stderr.tail()
        return f" (stderr: {tail})" if tail else ""

    @property
    def alive(self) -> bool:
        return self._session is not None and self._task is not None and not self._task.done()

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        _, _, max_chars = connection_limits()
        if self._session is None:
            raise self._fail(f"MCP server {self.config.slug} is not connected"
                             + (f" ({self._why(self._error)})" if self._error else ""))
        timeout = float(self.config.spec.timeout_s)
        try:
            result = await asyncio.wait_for(self._session.call_tool(tool, arguments), timeout=timeout)
        except asyncio.TimeoutError:
            raise self._fail(f"MCP server {self.config.slug}: {tool} did not answer within {timeout:g} s") from None
        except Exception as error:
            raise self._fail(f"MCP server {self.config.slug}: {tool} failed: {self._why(error)}") from None
        text = _content_text(result)
        if result.is_error:
            text = self._redact(text)  # whole, before it is cut
        if len(text) > max_chars:
            text = text[:max_chars] + f"\n[truncated: {len(text):,} characters, the first {max_chars:,} shown]"
        if result.is_error:
            raise self._fail(f"MCP server {self.config.slug}: {tool} returned an error: {text}")
        return text

    async def close(self, *, graceful: bool = True) -> None:
        """Leave the session (``graceful``: let it end for up to 5 s first; else cancel it at once)."""
        self._closing.set()
        if self._task is not None and not self._task.done():
            try:
                if not graceful:
                    raise asyncio.TimeoutError
                await asyncio.wait_for(asyncio.shield(self._task), timeout=5)
            except (asyncio.TimeoutError, Exception):
                self._task.cancel()
                try:
                    await self._task
                except BaseException:  # noqa: BLE001 - it is going away
                    pass
        if self._stderr is not None:
            self._stderr.spawned()


_closing: set[asyncio.Task] = set()  # connections being left in the background (Connection._close_later)


def _guarded_client(headers: dict[str, str] | None = None, timeout=None, auth=None):
    """The SDK's HTTP client, every request of it through the address policy of MCP URLs
    (mas_core.netpolicy, MAS_PRIVATE_URL_ALLOW), pinned to the address checked."""
    import httpx2

    if timeout is None:  # the SDK's default: a response stream may stay open
        timeout = httpx2.Timeout(30.0, read=300.0)
    return httpx2.AsyncClient(headers=headers, timeout=timeout, auth=auth, trust_env=False,
                              transport=netpolicy.private_url_transport(httpx2))


_sdk_loaded = False


def _sdk_load() -> None:
    """The SDK's client side and what its transports import at their first use (~330 modules, ~0.9 s of CPU here).
    Not when a worker starts (most never connect to an MCP server): a process's first connection loads them in a
    thread before its connect timeout starts (a busy machine's import took more than a 3 s timeout), and the shared
    TLS context is built if it is not yet. Then the SDK's
    loggers, which log what a server printed (a stray stdout line, quoted whole in a parse error), redact the
    connection's secrets (mas_core.secrets.redacting) and every declared one."""
    global _sdk_loaded
    if _sdk_loaded:
        return
    import anyio._backends._asyncio  # noqa: F401 - the backend anyio loads at its first use
    import encodings.idna  # noqa: F401 - a host name's first encoding
    import httpcore2._backends.anyio  # noqa: F401 - httpx2's transport and its network backend
    import httpx2  # noqa: F401
    import mcp.client.session  # noqa: F401
    import mcp.client.sse  # noqa: F401
    import mcp.client.stdio  # noqa: F401
    import mcp.client.streamable_http  # noqa: F401
    from anyio import open_process  # noqa: F401 - loaded lazily by anyio: at the first stdio server's start

    tls()  # the HTTP transports' context
    redact_loggers("mcp")
    _sdk_loaded = True


class _with_client:
    """Enter an httpx2 client and a transport together (the transport does not own a client it is given)."""

    def __init__(self, client, transport) -> None:
        self.client, self.transport = client, transport

    async def __aenter__(self):
        await self.client.__aenter__()
        try:
            return await self.transport.__aenter__()
        except BaseException:
            await self.client.__aexit__(None, None, None)
            raise

    async def __aexit__(self, *exc):
        try:
            return await self.transport.__aexit__(*exc)
        finally:
            await self.client.__aexit__(None, None, None)


def _describe(error: BaseException | None, redact=None) -> str:
    """An exception as one line of at most 500 characters (redacted before it is cut: no half secrets)."""
    if error is None:
        return "no answer"
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    blocked = netpolicy.blocked_cause(error)
    if blocked is not None:
        return f"refused: {blocked}"
    text = exception_text(error).strip() or type(error).__name__
    if redact is not None:
        text = redact(text)
    return f"{type(error).__name__}: {text}"[:500] if type(error).__name__ not in text else text[:500]


def _content_text(result) -> str:
    parts = []
    for item in result.content or []:
        kind = getattr(item, "type", "")
        if kind == "text":
            parts.append(item.text)
        elif kind == "image":
            parts.append(f"[image {getattr(item, 'mime_type', '')}]")
        elif kind == "resource":
            resource = getattr(item, "resource", None)
            parts.append(getattr(resource, "text", None) or f"[resource {getattr(resource, 'uri', '')}]")
        else:
            parts.append(f"[{kind or 'content'}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


async def discover(config: ServerConfig, *, close_in_background: bool = False
                   ) -> tuple[list[DiscoveredTool], dict[str, float]]:
    """Connect, list tools, disconnect: the tools and the timings (ms) of each part. MCPError on failure
    (``close_in_background``: see :meth:`Connection.open`)."""
    started = time.perf_counter()
    connection = Connection(config)
    await connection.open(close_in_background=close_in_background)
    listed = time.perf_counter()
    await connection.close()
    return connection.tools, {"connect_and_list_ms": round((listed - started) * 1000, 1),
                              "close_ms": round((time.perf_counter() - listed) * 1000, 1)}
