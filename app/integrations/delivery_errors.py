"""How a delivery to another server fails: refused for good, or unavailable for now.

The LMS calls (app/integrations/ags_client.py) and the webhooks (app/integrations/webhooks.py)
both raise these; the outbox retries the second and gives up on the first.
"""

from __future__ import annotations


class PlatformRefused(Exception):
    """The platform answered in a way that will not change by retrying (a 4xx)."""


class PlatformUnavailable(Exception):
    """The platform could not be reached or answered a transient error; retry later."""
