"""Errors shared across layers."""

from __future__ import annotations


class Refused(ValueError):
    """A service refuses what it was asked, with a message for the caller (a tool result or an API 422).

    Memory and board services raise their own subclasses; the tools that call them (tools_app, which must
    not import memory_app) catch this base.
    """
