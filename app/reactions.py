"""What a stored grade (or an instructor's override) triggers, and how each kind of outbox
message is delivered: declared here, and only here.

Every process that stores grades or delivers outbox messages calls `install_reactions()` as
it starts: the server (`create_app`), the Celery worker (`loopgrade worker`) and the CLI's
`loopgrade regrade`. A grade stored where nothing was installed raises rather than lose the
LMS score and the webhooks (`app.outbox.report_score_change`), and the outbox's delivery refuses
to start without kinds. `/readyz` and the worker's start-up log show `installed_reactions()`.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

from app import outbox
from app.integrations import ags, webhooks

# In the transaction of each change, in this order: the learner's counted score to the LMS
# (AGS), then, for a grade, an event for each of the course's webhooks.
SCORE_LISTENERS: dict[outbox.ScoreChange, tuple[outbox.ScoreListener, ...]] = {
    outbox.ScoreChange.GRADED: (ags.send_score_to_lms, webhooks.send_to_webhooks),
    outbox.ScoreChange.OVERRIDDEN: (ags.send_score_to_lms,),
    outbox.ScoreChange.EXTENDED: (ags.send_score_to_lms,),
}
DELIVERY_KINDS: dict[str, outbox.Deliver] = {
    ags.LTI_SCORE_KIND: ags.deliver_lti_score,
    ags.LTI_ROSTER_KIND: ags.deliver_roster_sync,
    webhooks.WEBHOOK_KIND: webhooks.deliver_webhook_message,
}

_install_lock = threading.Lock()


def install_reactions() -> None:
    """Register the score listeners and delivery kinds with the outbox (once per process)."""
    with _install_lock:
        for name, deliver in DELIVERY_KINDS.items():
            if name not in outbox.DELIVERY_KINDS:
                outbox.register_delivery_kind(name, deliver)
        for change, listeners in SCORE_LISTENERS.items():
            for listener in listeners:
                if listener not in outbox.SCORE_LISTENERS[change]:
                    outbox.register_score_listener(change, listener)


class InstalledReactions(NamedTuple):
    on_graded: list[str]
    on_overridden: list[str]
    outbox_kinds: list[str]


def installed_reactions() -> InstalledReactions:
    """What this process has registered: listener names in call order, kinds sorted."""
    registered = outbox.SCORE_LISTENERS
    return InstalledReactions(
        [listener.__name__ for listener in registered[outbox.ScoreChange.GRADED]],
        [listener.__name__ for listener in registered[outbox.ScoreChange.OVERRIDDEN]],
        sorted(outbox.DELIVERY_KINDS),
    )
