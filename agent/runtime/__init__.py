"""Runtimes that run attempts on a host (``process`` now, ``docker`` later)."""
