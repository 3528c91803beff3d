"""A team's outgoing webhook: told of approval requests, questions and run ends, with retries.

The body is JSON ``{"event", "team", "sent_at", "data"}``; the header
``X-MAS-Signature: sha256=<hex>`` is the HMAC-SHA256 of the raw body under the
team's secret, so a receiver can check the call came from MAS. Delivery is a
Celery task enqueued after commit and retried with backoff: a webhook that
fails or hangs never holds a run. The URL is checked as ``web_fetch``'s are
(``MAS_WEB_FETCH_ALLOW``): on save, and again when connecting. What leaves is
checked first by the run's ``outgoing`` guardrails
(:func:`agents_app.execution.guardrails.outgoing_checked`): redacted or masked
as they say, or not sent at all when one blocks it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from agents_app.execution.guardrails import outgoing_checked
from mas_core.netpolicy import web_url_refusal

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-MAS-Signature"
EVENTS = ("approval_requested", "human_question", "run_end")
TIMEOUT_S = 10.0
MAX_TRIES = 6


def signature(secret: str, body: bytes) -> str:
    """The value of ``X-MAS-Signature`` for ``body``."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def webhook_url_refusal(url: str) -> str | None:
    """Why a webhook URL may not be used (None when it may), as for web_fetch."""
    if len(url) > 500:
        return "is longer than 500 characters"
    return web_url_refusal(url)


def webhook_body(*, event: str, team: str, data: dict[str, Any]) -> bytes:
    return json.dumps({"event": event, "team": team, "sent_at": timezone.now().isoformat(), "data": data},
                      ensure_ascii=False, sort_keys=True, default=str).encode("utf-8")


def webhook_notify(*, team_id: int, event: str, data: dict[str, Any]) -> None:
    """Send ``event`` to the team's webhook after commit, when it has one (nothing happens otherwise)."""
    from agents_app.models import Team

    slug = Team.objects.filter(pk=team_id).exclude(webhook_url="").values_list("slug", flat=True).first()
    if slug is not None:
        webhook_send(team_id=team_id, team=slug, event=event, data=data)


def webhook_send(*, team_id: int, team: str, event: str, data: dict[str, Any]) -> None:
    """:func:`webhook_notify` when the caller has read already that the team (slug ``team``) has a webhook.

    ``data`` holds the run's id (``run``): its ``outgoing`` guardrails check the data first, and one that blocks
    it means nothing is queued.
    """
    checked = outgoing_checked(team_id=team_id, team=team, run_id=data.get("run"), event=event, data=data)
    if checked is None:
        return
    body = webhook_body(event=event, team=team, data=checked).decode("utf-8")

    def send() -> None:
        from agents_app.tasks import deliver_webhook

        try:
            deliver_webhook.delay(team_id, body)
        except Exception:  # the broker is away: a notification is lost, never the run
            logger.warning("webhook not queued: the broker refused it", extra={"event": event}, exc_info=True)

    transaction.on_commit(send)


class DeliveryFailed(Exception):
    pass


async def webhook_deliver(*, url: str, secret: str, body: bytes) -> int:
    """POST ``body`` signed with ``secret``; the status code (DeliveryFailed when it is not 2xx or unreachable)."""
    import httpx

    from mas_core.netpolicy import BlockedAddress, web_url_transport

    refusal = webhook_url_refusal(url)
    if refusal:
        raise DeliveryFailed(f"{url} {refusal}")
    transport = web_url_transport(httpx)
    headers = {"Content-Type": "application/json", "User-Agent": "MAS-webhook/1"}
    if secret:
        headers[SIGNATURE_HEADER] = signature(secret, body)
    try:
        async with httpx.AsyncClient(transport=transport, timeout=TIMEOUT_S, follow_redirects=False) as client:
            response = await client.post(url, content=body, headers=headers)
    except BlockedAddress as error:
        raise DeliveryFailed(str(error)) from None
    except httpx.HTTPError as error:
        raise DeliveryFailed(f"{type(error).__name__}: {error}") from None
    if not 200 <= response.status_code < 300:
        raise DeliveryFailed(f"the webhook answered {response.status_code}")
    return response.status_code
