"""The bundled catalog snapshot in a test database, imported once per test process.

``catalog.importer.import_snapshot`` costs ~0.4 s of Python (validation, ~5,500 model
instances) and ~400 tests ask for it. The first import of a process into an empty catalog is the
real one; its rows are kept (a plain ``SELECT`` of every catalog table) with its report, and a
later test whose catalog tables are empty gets the same rows back with plain ``INSERT``s (~20 ms):
the same primary keys, values and revision number, the import's time stamps (``updated_at``,
``changed_at``) set to now as the import sets them, and (PostgreSQL) each table's key sequence
moved past the copied keys. Anything else (a catalog that is not empty, a database other than
SQLite or PostgreSQL, other snapshot files) imports for real.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from pathlib import Path

from django.apps import apps
from django.conf import settings
from django.core.management.color import no_style
from django.db import connection, transaction
from django.utils import timezone

from catalog.importer import ImportReport, import_snapshot

SNAPSHOT_FILES = ("aws_gpu_instances.csv", "aws_instance_network.csv", "gpu_specs.csv")


@dataclass(frozen=True)
class Copy:
    key: str
    rows: dict[str, tuple[list[str], list[tuple]]]  # table -> (columns, rows in primary-key order)
    report: ImportReport


_kept: dict[str, Copy] = {}


def snapshot_key() -> str:
    """The snapshot files' path and contents: a copy is reused only for the same files."""
    fixtures = Path(settings.CATALOG_FIXTURES_DIR)
    digest = hashlib.sha256(str(fixtures.resolve()).encode())
    for name in SNAPSHOT_FILES:
        digest.update((fixtures / name).read_bytes())
    return digest.hexdigest()


def catalog_models() -> list:
    """Every catalog table, parents before the rows that point at them (definition order)."""
    return list(apps.get_app_config("catalog").get_models())


def _quoted(name: str) -> str:
    return connection.ops.quote_name(name)


def _columns(model) -> list[str]:
    return [f.column for f in model._meta.concrete_fields]


def read_rows() -> dict[str, tuple[list[str], list[tuple]]]:
    """Every catalog table's rows as the database stores them, in primary-key order."""
    out = {}
    with connection.cursor() as cursor:
        for model in catalog_models():
            table, columns = model._meta.db_table, _columns(model)
            cursor.execute(
                f"SELECT {', '.join(map(_quoted, columns))} FROM {_quoted(table)} "
                f"ORDER BY {_quoted(model._meta.pk.column)}"
            )
            out[table] = (columns, [tuple(row) for row in cursor.fetchall()])
    return out


def catalog_is_empty() -> bool:
    with connection.cursor() as cursor:
        for model in catalog_models():
            cursor.execute(f"SELECT 1 FROM {_quoted(model._meta.db_table)} LIMIT 1")
            if cursor.fetchone() is not None:
                return False
    return True


def write_rows(rows: dict[str, tuple[list[str], list[tuple]]]) -> None:
    """Insert ``read_rows()``'s rows, then stamp the import's times as the import would."""
    with transaction.atomic(), connection.cursor() as cursor:
        for table, (columns, values) in rows.items():
            if values:
                cursor.executemany(
                    f"INSERT INTO {_quoted(table)} ({', '.join(map(_quoted, columns))}) "
                    f"VALUES ({', '.join(['%s'] * len(columns))})",
                    values,
                )
        # Explicit keys do not move a PostgreSQL sequence (SQLite's AUTOINCREMENT follows them).
        for sql in connection.ops.sequence_reset_sql(no_style(), catalog_models()):
            cursor.execute(sql)
        now = timezone.now()
        # QuerySet.update sends no post_save: the copied revision number stays the import's.
        apps.get_model("catalog", "InstanceType").objects.update(updated_at=now)
        apps.get_model("catalog", "CatalogRevision").objects.update(changed_at=now)


def load_snapshot() -> ImportReport:
    """The bundled snapshot in the test database, and the import's report."""
    if connection.vendor not in ("sqlite", "postgresql") or not catalog_is_empty():
        return import_snapshot()
    key = snapshot_key()
    kept = _kept.get(key)
    if kept is None:
        report = import_snapshot()
        _kept[key] = Copy(key, read_rows(), copy.deepcopy(report))
        return report
    write_rows(kept.rows)
    return copy.deepcopy(kept.report)
