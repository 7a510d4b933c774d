"""Sliding-window limits counted on rows already stored: sign-in failures, submissions.

The rows are the record (no counter to keep in step): a limit of N per window is reached when
N matching rows are younger than the window, and frees up when the oldest of them leaves it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import ColumnElement, select
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.models import utc_now


@dataclass(frozen=True)
class RateLimit:
    """At most `count` events within any `window_seconds`; a count of 0 or less: no limit."""

    count: int
    window_seconds: int

    def describe(self, event: str) -> str:
        """'10 submissions per minute', for `event` 'submission'."""
        window = self.window_seconds
        if window % 3600 == 0:
            span = "hour" if window == 3600 else f"{window // 3600} hours"
        elif window % 60 == 0:
            span = "minute" if window == 60 else f"{window // 60} minutes"
        else:
            span = f"{window} seconds"
        return f"{self.count} {event}{'s' if self.count != 1 else ''} per {span}"


def seconds_until_allowed(
    session: Session,
    limit: RateLimit | None,
    happened_at: InstrumentedAttribute[datetime],
    *conditions: ColumnElement[bool],
) -> int | None:
    """None while the rows matching `conditions` are under the limit; else seconds to wait."""
    if limit is None or limit.count <= 0:
        return None
    window = timedelta(seconds=limit.window_seconds)
    # The count-th newest row in the window, alone: a limit of thousands reads one row.
    oldest_counted = session.scalar(
        select(happened_at)
        .where(*conditions, happened_at > utc_now() - window)
        .order_by(happened_at.desc())
        .offset(limit.count - 1)
        .limit(1)
    )
    if oldest_counted is None:
        return None
    return max(1, math.ceil((oldest_counted + window - utc_now()).total_seconds()))
