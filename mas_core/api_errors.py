"""Every error the API can answer, mapped to JSON in one place.

Validation problems — from the request schema or from the definition
services — share one shape, so a client handles them once::

    422 {"detail": [{"loc": ["body", "limits", "max_steps"], "msg": "...", "type": "..."}]}

(plus ``"line"`` when the problem was found in submitted markdown). Other
errors are ``{"detail": "<message>"}``. No malformed request reaches a 500.
"""

from __future__ import annotations

import json
import logging
import re
from itertools import accumulate
from typing import Any

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError, IntegrityError
from django.http import Http404, HttpRequest, HttpResponse
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError
from ninja.errors import ValidationError as NinjaValidationError

from mas_core.definitions.markdown import DefinitionError
from mas_core.definitions.services import DefinitionPermissionError
from mas_core.definitions.storage import ReadOnlyFolderError
from mas_core import ratelimit

logger = logging.getLogger(__name__)

# Every endpoint names its JSON body parameter "payload"; ninja puts that name
# into the error location, where it means nothing to the client.
BODY_PARAM = "payload"


class UnsupportedMediaType(ValueError):
    """The request body is not in a content type the endpoint reads."""


class UnstorableBody(ValueError):
    """Well-formed, but holds what PostgreSQL or a UTF-8 file cannot store."""


def _reject_constant(name: str):
    raise UnstorableBody(f"{name} is not a JSON number")


class JsonTooComplex(ValueError):
    """A JSON body nested deeper, or holding more values, than MAS_MAX_JSON_DEPTH / MAS_MAX_JSON_VALUES."""


def check_storable(value: Any, *, where: str = "body") -> None:
    """Refuse NUL characters and lone surrogates anywhere in ``value``.

    PostgreSQL text and jsonb reject NUL, and UTF-8 (the markdown files)
    cannot encode a surrogate; both would otherwise fail deep in a save.
    """
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise UnstorableBody(f"{where}: text cannot contain NUL (\\u0000) characters")
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise UnstorableBody(f"{where}: text contains an unpaired surrogate") from None
        elif isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


# A string, or the start of one that runs past the end of the window (then it ends in no quote).
_JSON_STRING_IN_WINDOW = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*(?:(")|\Z)', re.DOTALL)
# The rest of a string the previous window ended inside, closing quote included.
_JSON_STRING_REST = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_BRACKET_STEP = [0] * 256
for _open, _close in (b"[]", b"{}"):
    _BRACKET_STEP[_open], _BRACKET_STEP[_close] = 1, -1
SCAN_WINDOW_BYTES = 16 * 1024


def json_shape_problem(raw: bytes, *, max_depth: int, max_values: int) -> str | None:
    """What is wrong with the shape of ``raw`` JSON, read from its bytes before it is parsed.

    Parsing a megabyte of nested lists takes ``json.loads`` alone close to half
    a second, and a megabyte of small values tens of megabytes. Here, window by
    window (``SCAN_WINDOW_BYTES``), strings are blanked out and the commas and
    brackets left are counted: a few C passes, and never more than a window's
    worth of memory at once (blanking the whole body in one pass built a piece
    per string: 30 MB for 1.9 MB of short values).
    """
    values, depth, start, size = 1, 0, 0, len(raw)
    while start < size:
        end = min(start + SCAN_WINDOW_BYTES, size)
        while end < size and raw[end - 1] == 0x5C:  # never split a backslash from what it escapes
            end += 1
        # A string becomes NUL and its closing quote; one that runs on past the window only NUL (no JSON
        # holds a NUL byte outside a string, so a skeleton ending in one ends inside a string).
        skeleton = _JSON_STRING_IN_WINDOW.sub(b"\x00\\g<1>", raw[start:end])
        values += skeleton.count(b",") + skeleton.count(b"[") + skeleton.count(b"{")
        if values > max_values:
            return f"the JSON body holds more than {max_values} values (limit MAS_MAX_JSON_VALUES)"
        brackets = skeleton.translate(None, _NOT_BRACKETS)
        if brackets:
            if max(accumulate(map(_BRACKET_STEP.__getitem__, brackets), initial=depth)) > max_depth:
                return f"the JSON body is nested more than {max_depth} levels deep (limit MAS_MAX_JSON_DEPTH)"
            depth += 2 * (brackets.count(b"[") + brackets.count(b"{")) - len(brackets)
        start = end
        if skeleton.endswith(b"\x00"):
            rest = _JSON_STRING_REST.match(raw, start)
            if rest is None:  # unterminated: json.loads refuses it before building anything past here
                break
            start = rest.end()
    return None


def load_json(raw: bytes) -> Any:
    """Parse a JSON request body strictly: bounded shape, no NaN/Infinity, nothing unstorable.

    Every endpoint (through the API's parser) and the markdown upload read
    their JSON here, so no body past MAS_MAX_JSON_DEPTH or MAS_MAX_JSON_VALUES
    reaches ``json.loads``, the validators or the YAML renderer (which recurse).
    """
    problem = json_shape_problem(raw, max_depth=settings.MAS_MAX_JSON_DEPTH, max_values=settings.MAS_MAX_JSON_VALUES)
    if problem:
        raise JsonTooComplex(problem)
    data = json.loads(raw, parse_constant=_reject_constant)
    check_storable(data)
    return data


class PayloadTooLarge(Exception):
    def __init__(self, size: int, limit: int) -> None:
        self.size, self.limit = size, limit
        super().__init__(f"the request body is {size} bytes; the limit is {limit} bytes")


# "steps[1].agent: …" — whole-model checks start their message with the field.
_MESSAGE_FIELD = re.compile(r"^([A-Za-z_][\w-]*(?:\[\d+\])*(?:\.[A-Za-z_][\w-]*(?:\[\d+\])*)*): ")


def field_loc(field: str) -> list[str | int]:
    """``"steps.1.depends_on"`` or ``"steps[1].depends_on"`` → ``["steps", 1, "depends_on"]``."""
    loc: list[str | int] = []
    for part in re.findall(r"[^.\[\]]+", field):
        loc.append(int(part) if part.isdigit() else part)
    return loc


def definition_error_item(error: DefinitionError) -> dict[str, Any]:
    field = error.field
    if not field:
        match = _MESSAGE_FIELD.match(error.message)
        field = match.group(1) if match else ""
    item: dict[str, Any] = {"loc": ["body", *field_loc(field)], "msg": error.message, "type": "invalid_definition"}
    if error.line:
        item["line"] = error.line
    return item


def _validation_items(errors: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items = []
    for error in errors:
        loc = list(error.get("loc", ()))
        if len(loc) >= 2 and loc[0] == "body" and loc[1] == BODY_PARAM:
            del loc[1]
        # pydantic prefixes the message of a validator's ValueError; the
        # definition services do not, and both should read alike.
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        items.append({"loc": loc, "msg": message, "type": error.get("type", "value_error")})
    return items


def register_error_handlers(api: NinjaAPI) -> None:
    def respond(request: HttpRequest, status: int, detail: Any) -> HttpResponse:
        return api.create_response(request, {"detail": detail}, status=status)

    @api.exception_handler(NinjaValidationError)
    def request_invalid(request, exc: NinjaValidationError):
        return respond(request, 422, _validation_items(exc.errors))

    @api.exception_handler(DefinitionError)
    def definition_invalid(request, exc: DefinitionError):
        return respond(request, 422, [definition_error_item(exc)])

    @api.exception_handler(DjangoValidationError)
    def model_invalid(request, exc: DjangoValidationError):
        if hasattr(exc, "error_dict"):
            items = [
                {"loc": ["body", name], "msg": message, "type": "invalid"}
                for name, messages in exc.message_dict.items()
                for message in messages
            ]
        else:
            items = [{"loc": ["body"], "msg": message, "type": "invalid"} for message in exc.messages]
        return respond(request, 422, items)

    @api.exception_handler(DefinitionPermissionError)
    def not_permitted(request, exc: DefinitionPermissionError):
        return respond(request, 403, str(exc))

    @api.exception_handler(ReadOnlyFolderError)
    def folder_read_only(request, exc: ReadOnlyFolderError):
        # The team's folder is the repository's defs/: the server refuses to change it (403, which every
        # writing endpoint declares). The save's transaction was rolled back: nothing changed.
        logger.warning("definitions folder is read-only", extra={"path": request.path, "error": str(exc)[:300]})
        return respond(request, 403, str(exc))

    @api.exception_handler(Http404)
    def not_found(request, exc: Http404):
        # The same answer for "does not exist" and "belongs to another team".
        return respond(request, 404, str(exc) or "Not found")

    @api.exception_handler(ObjectDoesNotExist)
    def row_gone(request, exc: ObjectDoesNotExist):
        # Deleted by a concurrent request between lookup and update.
        return respond(request, 404, "Not found")

    @api.exception_handler(IntegrityError)
    def conflict(request, exc: IntegrityError):
        logger.info("api integrity conflict", extra={"path": request.path, "error": str(exc)[:200]})
        return respond(request, 409, "conflicts with a concurrent change; retry")

    @api.exception_handler(UnstorableBody)
    def unstorable(request, exc: UnstorableBody):
        return respond(request, 400, str(exc))

    @api.exception_handler(DataError)
    def data_error(request, exc: DataError):
        # A value the database refuses (its transaction was rolled back, no
        # file was written): the client's data, not a server fault.
        logger.info("api data error", extra={"path": request.path, "error": str(exc)[:200]})
        return respond(request, 400, "a value in the request cannot be stored")

    @api.exception_handler(RequestDataTooBig)
    def too_big(request, exc: RequestDataTooBig):
        return respond(request, 413, "the request body is larger than the server accepts")

    @api.exception_handler(PayloadTooLarge)
    def definition_too_big(request, exc: PayloadTooLarge):
        return respond(request, 413, str(exc))

    @api.exception_handler(UnsupportedMediaType)
    def wrong_media_type(request, exc: UnsupportedMediaType):
        return respond(request, 415, str(exc))

    @api.exception_handler(ratelimit.RateLimited)
    def rate_limited(request, exc: ratelimit.RateLimited):
        response = respond(request, 429, str(exc))
        response["Retry-After"] = str(exc.retry_after)
        return response

    @api.exception_handler(HttpError)
    def http_error(request, exc: HttpError):
        # ninja wraps body parse failures in a 400 "Cannot parse request body";
        # say what was wrong with it, whatever DEBUG is.
        cause = exc.__cause__
        if isinstance(cause, UnsupportedMediaType):
            return respond(request, 415, str(cause))
        if isinstance(cause, (UnstorableBody, JsonTooComplex)):
            return respond(request, 400, str(cause))
        if isinstance(cause, json.JSONDecodeError):
            return respond(request, 400, f"invalid JSON: {cause.msg} at line {cause.lineno} column {cause.colno}")
        if isinstance(cause, UnicodeDecodeError):
            return respond(request, 400, "the request body is not valid UTF-8")
        response = respond(request, exc.status_code, str(exc))
        if isinstance(exc, AuthenticationError):
            response["WWW-Authenticate"] = 'Bearer realm="mas"'
        return response
