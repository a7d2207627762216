"""Logging of the long-running processes (`serve`, `worker`). PERFBISECT_LOG_FORMAT=json writes
one JSON object per line (python-json-logger: time, level, logger, message, and any `extra`
fields), for a log collector; the default is uvicorn's and Celery's own text lines."""

from __future__ import annotations

import logging.config
from typing import Any

from pythonjsonlogger.core import RESERVED_ATTRS

JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"


def json_config() -> dict[str, Any]:
    """A logging.config dict that sends the root, uvicorn's and Celery's loggers to stderr as JSON."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    quiet = {"handlers": ["json"], "level": "INFO", "propagate": False}
    return {"version": 1, "disable_existing_loggers": False,
            "formatters": {"json": {"()": "pythonjsonlogger.json.JsonFormatter", "fmt": JSON_FIELDS,
                                    "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
                                    # uvicorn's terminal-coloured copy of each message
                                    "reserved_attrs": [*RESERVED_ATTRS, "color_message"]}},
            "handlers": {"json": handler},
            "root": {"handlers": ["json"], "level": "INFO"},
            "loggers": {name: quiet for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery")}}


def uvicorn_log_config(log_format: str) -> dict[str, Any] | None:
    """What `serve` passes to uvicorn: None keeps uvicorn's default text logging."""
    return json_config() if log_format == "json" else None


def configure(log_format: str) -> None:
    """For the worker: with json, the root logger (Celery's loggers propagate to it, since the
    app leaves the root logger alone) writes JSON lines."""
    if log_format == "json":
        logging.config.dictConfig(json_config())
