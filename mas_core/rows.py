"""Model rows read and written by hand-written SQL, for the hot path.

``Model.objects.raw`` matches a row's columns to fields by name and builds its
machinery anew at every call, and ``Model.objects.create`` compiles its
INSERT each time: about 0.1 ms of CPU each. A statement that reads one
model's columns (or several models' side by side, in one row) or inserts
one model's row can do with the fields in order and their converters,
worked out once per model (:class:`Columns`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections, models

M = TypeVar("M", bound=models.Model)


class Columns(Generic[M]):
    """The columns of ``model`` (all of them, or all but ``without``) in field order: for a SELECT
    (:meth:`select`), an INSERT (:meth:`insert`), and the instance a row's values make (:meth:`instance`)."""

    def __init__(self, model: type[M], *, without: tuple[str, ...] = ()) -> None:
        self.model = model
        self.fields = [field for field in model._meta.concrete_fields if field.attname not in without]
        self.names = [field.attname for field in self.fields]
        self._converters: list[tuple[int, list, Any]] | None = None

    def __len__(self) -> int:
        return len(self.fields)

    def select(self, alias: str) -> str:
        """``alias.column, …`` for a SELECT list."""
        return ", ".join(f'{alias}."{field.column}"' for field in self.fields)

    def instance(self, values) -> M:
        """The instance of a row's values (in :meth:`select`'s order), converted as the ORM converts them
        (a ``jsonb`` column's text parsed, …); the fields left out are deferred."""
        values, db = list(values), _db()
        for index, converters, column in self._converters_of():
            for convert in converters:
                values[index] = convert(values[index], column, db)
        return self.model.from_db(db.alias, self.names, values)

    def instance_or_none(self, values) -> M | None:
        """:meth:`instance`, or None for the NULLs of an outer join that found no row (a NULL primary key)."""
        return None if values[self.names.index(self.model._meta.pk.attname)] is None else self.instance(values)

    def insert(self, prefix: str) -> str:
        """``INSERT INTO table (…) VALUES (…)`` with named parameters ``<prefix><column>`` (see :meth:`params`)."""
        table = self.model._meta.db_table
        columns = ", ".join(f'"{field.column}"' for field in self.fields)
        values = ", ".join(f"%({prefix}{field.column})s" for field in self.fields)
        return f'INSERT INTO "{table}" ({columns}) VALUES ({values})'

    def params(self, instance: M, prefix: str) -> dict[str, Any]:
        """The parameters of :meth:`insert` for a new ``instance``, prepared as ``save()`` prepares them
        (``auto_now_add`` set on the instance, JSON adapted, …)."""
        db = _db()
        return {f"{prefix}{field.column}": field.get_db_prep_save(field.pre_save(instance, True), db)
                for field in self.fields}

    def _converters_of(self) -> list[tuple[int, list, Any]]:
        if self._converters is None:
            found, db = [], _db()
            for index, field in enumerate(self.fields):
                column = field.get_col(self.model._meta.db_table)
                converters = db.ops.get_db_converters(column) + column.get_db_converters(db)
                if converters:
                    found.append((index, converters, column))
            self._converters = found
        return self._converters


def instances(row: Sequence[Any], *parts: Columns) -> list[models.Model]:
    """One instance per part, from a row holding each part's columns in turn (a join's models side by side)."""
    found, start = [], 0
    for part in parts:
        found.append(part.instance(row[start:start + len(part)]))
        start += len(part)
    return found


def db_values(instance: models.Model, names: Iterable[str], *, prefix: str) -> dict[str, Any]:
    """The fields ``names`` of ``instance`` as ``save()`` writes them, keyed ``prefix`` + name: the parameters of
    a hand-written UPDATE."""
    db = _db()
    return {prefix + name: instance._meta.get_field(name).get_db_prep_save(getattr(instance, name), db)
            for name in names}


def _db():
    """This thread's connection itself: ``django.db.connection`` is a proxy that looks it up at every attribute
    read, and the fields' preparations and converters read it several times each (half their cost)."""
    return connections[DEFAULT_DB_ALIAS]
