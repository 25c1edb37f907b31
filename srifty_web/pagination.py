"""The API's one pagination: ``?limit=&offset=`` with both capped (every list endpoint)."""

from __future__ import annotations

from rest_framework.pagination import LimitOffsetPagination

MAX_PAGE_SIZE = 500


class BoundedPagination(LimitOffsetPagination):
    """``?limit=`` is capped (a list never serializes a whole table) and so is ``?offset=``
    (a huge one overflows the database's integer)."""

    max_limit = MAX_PAGE_SIZE
    max_offset = 2**31 - 1

    def get_offset(self, request) -> int:
        return min(super().get_offset(request), self.max_offset)
