"""Every table of the schema: importing this module registers each table module on
`Base.metadata`, so Alembic's comparison (migrations/env.py) and tests/test_schema.py see them all.

The tables of a domain that nothing else joins live beside that domain (notifications/models.py)
and import `service/models.py` for its Base; models.py never imports them back."""

from __future__ import annotations

from sqlalchemy import MetaData

from perfbisect.service import models
from perfbisect.service.notifications import models as notification_models

TABLE_MODULES = (models, notification_models)
metadata: MetaData = models.Base.metadata
