"""Keep S3 secrets out of logs: botocore logs signed requests (session token included) at DEBUG."""

from __future__ import annotations

import logging
import threading

__all__ = ["protect_secrets"]

_LOGGER_PREFIXES = ("botocore", "boto3", "s3transfer", "urllib3")
_REDACTED = "***"


class _RedactingFilter(logging.Filter):
    """Replaces every registered secret in a record's message with ``***``."""

    def __init__(self) -> None:
        super().__init__()
        self._secrets: set[str] = set()
        self._lock = threading.Lock()

    def add(self, secret: str) -> None:
        if len(secret) >= 4:
            with self._lock:
                self._secrets.add(secret)

    def filter(self, record: logging.LogRecord) -> bool:
        with self._lock:
            secrets = tuple(self._secrets)
        if not secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot be formatted is left to the handler
            return True
        redacted = message
        for secret in secrets:
            redacted = redacted.replace(secret, _REDACTED)
        if redacted != message:
            record.msg, record.args = redacted, ()
        return True


_FILTER = _RedactingFilter()


def protect_secrets(*secrets: str | None) -> None:
    """Redact ``secrets`` from every record of the AWS client and HTTP loggers from now on."""
    for secret in secrets:
        if secret:
            _FILTER.add(secret)
    names = [name for name in logging.root.manager.loggerDict if name.split(".")[0] in _LOGGER_PREFIXES]
    for name in [*_LOGGER_PREFIXES, *names]:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
