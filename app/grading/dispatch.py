"""The factory that picks how grading jobs reach a worker: threads here or Celery elsewhere.

It sits above both backends (app/grading/queue.py, app/grading/celery_queue.py), so that
neither imports the other.
"""

from __future__ import annotations

from app.db import SessionFactory
from app.grading.queue import Dispatcher, StateChanged, ThreadPoolDispatcher, ignore_state_change
from app.settings import Settings
from sandbox import Runner


def create_dispatcher(
    sessions: SessionFactory,
    settings: Settings,
    *,
    runner: Runner | None,
    on_state_change: StateChanged = ignore_state_change,
) -> Dispatcher:
    """Celery when LOOPGRADE_BROKER_URL is set (workers grade elsewhere), else threads here.

    `on_state_change` hears of this process's gradings only: the Celery workers' come by
    Redis (app/grading/state_channel.py).
    """
    if settings.broker_url:
        # Imported only with a broker: Celery is not loaded by a process that does not use it.
        from app.grading.celery_queue import CeleryDispatcher

        return CeleryDispatcher(settings)
    return ThreadPoolDispatcher(sessions, settings, runner=runner, on_state_change=on_state_change)
