"""``mooncake.logging_config``: Python logging level from MC_LOG_LEVEL.

crescent's own version of Mooncake's helper. ``configure_logging_from_env()``
sets the root logger's level from MC_LOG_LEVEL (TRACE and DEBUG -> DEBUG,
INFO, WARNING/WARN, ERROR, CRITICAL/FATAL, any case), installing a stderr
handler; unset or empty changes nothing, an unknown name only logs a warning.
Calling it again with the same level changes nothing.
"""
import logging
import os

__all__ = ["configure_logging_from_env"]

_LEVELS = {"TRACE": logging.DEBUG, "DEBUG": logging.DEBUG, "INFO": logging.INFO,
           "WARN": logging.WARNING, "WARNING": logging.WARNING, "ERROR": logging.ERROR,
           "FATAL": logging.CRITICAL, "CRITICAL": logging.CRITICAL}


def configure_logging_from_env():
    value = os.environ.get("MC_LOG_LEVEL", "")
    if not value.strip():
        return
    level = _LEVELS.get(value.strip().upper())
    if level is None:
        logging.getLogger(__name__).warning(
            "Unknown MC_LOG_LEVEL=%r; expected TRACE, INFO, WARNING or ERROR", value)
        return
    root = logging.getLogger()
    if root.handlers and root.level == level:
        return
    logging.basicConfig(level=level, format="%(levelname)s %(asctime)s %(name)s: %(message)s",
                        force=True)
