"""Notices of attnsim's lower layers as ``attnsim: ...`` lines on stderr.

The device models and the core log what a user should hear about (``attnsim.core.jitcache``: "compiling Numba
kernels ...") on loggers under ``attnsim`` and import nothing of the application; the command line and the
Python API turn those records into stderr lines with :func:`to_stderr`. A program that configures logging
itself sees the same records on its own handlers (they propagate as usual).
"""

from __future__ import annotations

import logging
import sys

LOGGER = "attnsim"


class _Stderr(logging.Handler):
    """``attnsim: <message>`` on the current sys.stderr (looked up per record: pytest and notebooks swap it)."""

    def emit(self, record):
        try:
            print(f"attnsim: {self.format(record)}", file=sys.stderr, flush=True)
        except Exception:  # noqa: BLE001 - logging's rule: a handler never raises
            self.handleError(record)


def to_stderr() -> None:
    """Print attnsim's INFO-and-above notices on stderr (idempotent)."""
    log = logging.getLogger(LOGGER)
    if not any(isinstance(h, _Stderr) for h in log.handlers):
        log.addHandler(_Stderr())
    if log.level == logging.NOTSET or log.level > logging.INFO:
        log.setLevel(logging.INFO)
