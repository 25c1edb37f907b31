"""How old the catalog's prices are: the one helper behind "prices as of <date> (<n> days old)".

The age comes from the catalog's own observations (``OnDemandPrice.observed_at`` and
``SpotPrice.observed_at``), not from a file date: the newest observation of either market is when
prices were last brought in (the bundled snapshot's date, a CSV upload, or ``manage.py
refresh_prices``). Age in whole days = floor((now - newest) / 1 day). Older than
:data:`STALE_AFTER_DAYS` days, pages add the hint to run ``manage.py refresh_prices``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max
from django.utils import timezone

from catalog.models import OnDemandPrice, SpotPrice

STALE_AFTER_DAYS = 7
REFRESH_COMMAND = "python manage.py refresh_prices"


@dataclass(frozen=True)
class PriceAge:
    observed_at: datetime  # the newest price observation in the catalog
    days: int  # whole days since then (0 on the day itself)

    @property
    def stale(self) -> bool:
        return self.days > STALE_AFTER_DAYS

    @property
    def text(self) -> str:
        """``prices as of 2025-12-01 (371 days old)``."""
        age = "today" if self.days == 0 else f"{self.days:,} day{'s' if self.days != 1 else ''} old"
        return f"prices as of {self.observed_at:%Y-%m-%d} ({age})"


def price_age(now: datetime | None = None) -> PriceAge | None:
    """The age of the newest price observation, or None when the catalog has no prices."""
    newest = [m.objects.aggregate(at=Max("observed_at"))["at"] for m in (OnDemandPrice, SpotPrice)]
    present = [at for at in newest if at is not None]
    if not present:
        return None
    at = max(present)
    now = now or timezone.now()
    return PriceAge(observed_at=at, days=max(0, (now - at).days))
