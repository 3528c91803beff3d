"""Model rows read and written by raw SQL, for the statements of the hot path that the ORM cannot write.

Django's ``raw()`` maps a row to one model, and ``save()`` writes one row per
statement; a session's settle reads three locked rows with one join and
writes two rows in one statement. These helpers keep such statements as
exact as the ORM's: values are converted and adapted by the fields
themselves (JSON parsed and adapted, ``None`` written as SQL ``NULL``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.db.models import Field, Model


@dataclass(frozen=True)
class Columns:
    """Columns of ``model`` read from its table aliased ``alias``: ``sql`` lists them for a SELECT."""

    model: type[Model]
    fields: tuple[Field, ...]
    sql: str
    # (position, column, converters) of the fields whose values the database does not give as Python's
    converters: tuple[tuple[int, Any, list], ...]


def model_columns(model: type[Model], alias: str, *, skip: Iterable[str] = ()) -> Columns:
    """Every column of ``model`` but the fields named in ``skip`` (deferred: read on first access)."""
    skipped = set(skip)
    fields = tuple(field for field in model._meta.concrete_fields if field.name not in skipped)
    converters = []
    for position, field in enumerate(fields):
        column = field.get_col(model._meta.db_table)
        found = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        if found:
            converters.append((position, column, found))
    return Columns(model, fields, ", ".join(f"{alias}.{connection.ops.quote_name(f.column)}" for f in fields),
                   tuple(converters))


def models_from_row(row: Sequence[Any], *parts: Columns) -> list[Model]:
    """One instance per part, from a row holding each part's columns in turn, as Django's queries build them."""
    instances, start = [], 0
    for part in parts:
        values = list(row[start:start + len(part.fields)])
        for position, column, converters in part.converters:
            for convert in converters:
                values[position] = convert(values[position], column, connection)
        instances.append(part.model.from_db(connection.alias, [f.attname for f in part.fields], values))
        start += len(part.fields)
    return instances


def db_values(instance: Model, names: Iterable[str], *, prefix: str) -> dict[str, Any]:
    """The fields ``names`` of ``instance`` as ``save()`` writes them, keyed ``prefix`` + name."""
    return {prefix + name: instance._meta.get_field(name).get_db_prep_save(getattr(instance, name), connection)
            for name in names}
