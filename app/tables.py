"""Every table loopgrade keeps, in one metadata: the migrations compare against it.

The tables live with their code (app.models, app.integrations.models); this module sits above
both, so neither imports the other to be counted.
"""

from __future__ import annotations

from sqlalchemy import MetaData

import app.integrations.models
import app.models

metadata: MetaData = app.models.Base.metadata
