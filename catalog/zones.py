"""What kind of AWS zone a zone ID names: a regular Availability Zone, a Local Zone or a
Wavelength Zone.

The catalog stores no zone type (``AvailabilityZone`` has a region and a zone ID only, and the
bundled snapshot ``catalog/fixtures/aws_gpu_instances.csv`` has no such column), so the kind is
derived from the zone ID's pattern, which AWS keeps stable:

* ``use1-az2``: ``<region abbreviation>-az<N>``, a regular Availability Zone;
* ``use1-atl2-az1``, ``usw2-lax1-az1``: ``<region>-<metro><N>-az<N>``, a **Local Zone**
  (a metro site, e.g. Atlanta, parented to the region);
* ``use1-wl1-bos-wlz1``: ``<region>-wl<N>-<metro>-wlz<N>``, a **Wavelength Zone** (inside a
  carrier's 5G network).

Local and Wavelength Zones need an opt-in per account, have little GPU capacity and odd spot
prices, and offer no cluster placement groups, so GPU search leaves them out by default and
every page that shows a zone marks them (``planner.offers`` skips them the same way).
"""

from __future__ import annotations

import re
from enum import StrEnum


class ZoneKind(StrEnum):
    AVAILABILITY_ZONE = "availability-zone"
    LOCAL_ZONE = "local-zone"
    WAVELENGTH_ZONE = "wavelength-zone"


# Zone IDs (what the catalog stores) and zone names (what a launch may carry: us-east-1a).
_WAVELENGTH = re.compile(
    r"^[a-z]+\d+-wl\d+-[a-z0-9]+-wlz\d+$|^[a-z]{2}(-gov)?-[a-z]+-\d-wl\d+-[a-z0-9]+-wlz-\d+$"
)
_LOCAL = re.compile(r"^[a-z]+\d+-[a-z]+\d+[a-z]?-az\d+$|^[a-z]{2}(-gov)?-[a-z]+-\d-[a-z]+-\d[a-z]$")

LABELS = {
    ZoneKind.AVAILABILITY_ZONE: "",
    ZoneKind.LOCAL_ZONE: "Local Zone",
    ZoneKind.WAVELENGTH_ZONE: "Wavelength Zone",
}


def zone_kind(zone_id: str | None) -> ZoneKind | None:
    """The kind of a zone by its ID (module docstring) or its name (``us-east-1-atl-2a`` is a
    Local Zone, ``us-east-1-wl1-bos-wlz-1`` a Wavelength Zone, ``us-east-1a`` a regular one);
    None for no zone (an on-demand price is per region). Anything that is neither a Local nor a
    Wavelength pattern counts as a regular zone: only what is known to need an opt-in is marked."""
    if not zone_id:
        return None
    if _WAVELENGTH.match(zone_id):
        return ZoneKind.WAVELENGTH_ZONE
    if _LOCAL.match(zone_id):
        return ZoneKind.LOCAL_ZONE
    return ZoneKind.AVAILABILITY_ZONE


def is_special_zone(zone_id: str | None) -> bool:
    """A Local or Wavelength Zone (needs an opt-in): what GPU search leaves out by default."""
    kind = zone_kind(zone_id)
    return kind is not None and kind != ZoneKind.AVAILABILITY_ZONE


def zone_label(zone_id: str | None) -> str:
    """``"Local Zone"``, ``"Wavelength Zone"`` or ``""`` for a regular AZ or no zone."""
    kind = zone_kind(zone_id)
    return LABELS[kind] if kind is not None else ""
