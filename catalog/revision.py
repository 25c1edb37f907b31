"""The catalog's revision number, and a small per-process cache of rendered reads keyed on it.

The catalog changes a few times a day (an import, a price refresh, an admin edit) and is read on
every dashboard poll; building an instance-type page costs ~8 ms of CPU (price subqueries and
serialization), most of a request. Every write path bumps the revision in its transaction:
row saves and deletes through the ``post_save``/``post_delete`` receivers below (admin edits,
the importer's per-row saves), bulk inserts by an explicit :func:`bump` (``bulk_create`` sends
no signal). A reader reads the revision *before* the data, so a page cached under revision N was
built from data at least as new as N; entries of older revisions are never looked up again and
fall out of the LRU.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from django.db import models
from django.db.models import F
from django.utils import timezone

MAX_ENTRIES = 256  # pages x query strings x hosts; ~13 KB each

_lock = threading.Lock()
_entries: OrderedDict[tuple, object] = OrderedDict()


def current() -> int:
    """The revision number now (one indexed single-row read)."""
    from catalog.models import CatalogRevision

    row = CatalogRevision.objects.filter(pk=1).values_list("number", flat=True).first()
    return row or 0


def bump() -> None:
    """Mark the catalog changed (call inside the transaction that changed it)."""
    from catalog.models import CatalogRevision

    now = timezone.now()
    if not CatalogRevision.objects.filter(pk=1).update(number=F("number") + 1, changed_at=now):
        # First change ever; a concurrent first bump loses the race on the primary key and retries.
        _, created = CatalogRevision.objects.get_or_create(pk=1, defaults={"number": 1, "changed_at": now})
        if not created:
            CatalogRevision.objects.filter(pk=1).update(number=F("number") + 1, changed_at=now)


def cached(key: tuple) -> object | None:
    with _lock:
        value = _entries.get(key)
        if value is not None:
            _entries.move_to_end(key)
        return value


def store(key: tuple, value: object) -> None:
    with _lock:
        _entries[key] = value
        _entries.move_to_end(key)
        while len(_entries) > MAX_ENTRIES:
            _entries.popitem(last=False)


def clear() -> None:
    with _lock:
        _entries.clear()


def _on_change(sender, **kwargs) -> None:
    bump()


def connect_receivers() -> None:
    from django.apps import apps

    for model in apps.get_app_config("catalog").get_models():
        if model.__name__ == "CatalogRevision":
            continue
        uid = f"catalog-revision-{model.__name__}"
        models.signals.post_save.connect(_on_change, sender=model, dispatch_uid=uid + "-save")
        models.signals.post_delete.connect(_on_change, sender=model, dispatch_uid=uid + "-delete")
