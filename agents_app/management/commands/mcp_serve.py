"""Serve a team's exposed agents and workflows as an MCP server over stdio: ``mcp_serve --team <slug>``.

For desktop clients that start their MCP servers as programs. The server is the one ``/mcp`` serves
(:mod:`agents_app.doors.mcp_door`), acting with the token in the ``MAS_TOKEN`` environment variable, which must
be one of the team's: its role decides what it may do, as over HTTP. Nothing but the protocol goes to stdout
(logs go to stderr).
"""

from __future__ import annotations

import asyncio
import os

from django.core.management.base import BaseCommand, CommandError

TOKEN_VARIABLE = "MAS_TOKEN"


class Command(BaseCommand):
    help = ("Serve the team's exposed agents and workflows as an MCP server over stdio, acting with the token in "
            f"{TOKEN_VARIABLE}.")

    def add_arguments(self, parser):
        parser.add_argument("--team", required=True, help="slug of the team whose agents and workflows are served")

    def handle(self, *args, team: str, **options):
        from agents_app.doors.common import DoorError, actor_of

        try:
            actor = actor_of(os.environ.get(TOKEN_VARIABLE, "").strip() or None, "view", "stdio")
        except DoorError as refused:
            raise CommandError(f"{TOKEN_VARIABLE}: {refused}") from None
        if actor.team.slug != team:
            raise CommandError(f"{TOKEN_VARIABLE} is a token of team {actor.team.slug}, not of {team}")
        asyncio.run(_serve(actor))


async def _serve(actor) -> None:
    from mcp.server.stdio import stdio_server

    from agents_app.doors.mcp_door import serve_stdio

    async with stdio_server() as (read, write):
        await serve_stdio(actor, read, write)
