"""Fairway's one log line format (``config.settings.LOGGING``), a module of its own so that a
process that has not loaded the settings yet uses it too: dramatiq's main process
(:mod:`scheduler.dramatiq_main`), which starts the worker processes and never sets Django up."""

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""``2026-12-06 16:44:27,191 INFO scheduler.tick: tick cluster lab (1) ...``"""
