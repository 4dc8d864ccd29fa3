"""A web process's startup objects, out of the cyclic garbage collector's way.

A web process holds ~100,000+ objects that live as long as it does (Django, DRF, the apps'
modules, the URL patterns, the views and serializers). Python's cyclic collector walks all of
them at every full (generation 2) collection, and a request's short-lived objects, promoted by the
young collections they outlive, start one about every hundred requests: 60–120 ms of CPU each on
the layout of ``bench/api_load.py`` (docs/benchmarks/api_load.md, eighth pass), taken on the
thread of whichever request triggered it and holding the GIL meanwhile, so every request of the
process waits (0.4–3.7 s of wall per 30 s on a loaded box). ``gc.freeze()`` moves the objects
alive at startup to the permanent generation, which no collection walks again; objects created
later are collected as before.

The cost: a cycle of frozen objects that becomes garbage later is never freed. Garbage cycles
made while importing are collected before the freeze; what the startup keeps stays alive anyway.
"""

from __future__ import annotations

import gc


def freeze_startup_objects() -> int:
    """Load the URLconf (the views, serializers and their modules, imported lazily otherwise),
    collect the import's garbage, then freeze every object the collector tracks. Returns
    ``gc.get_freeze_count()`` (objects frozen in this process, all calls together)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 -- the property imports every view module
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
