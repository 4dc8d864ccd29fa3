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

Then the young generation's threshold is raised from Python's 700 to :data:`YOUNG_THRESHOLD`
allocations: the requests' own objects still started a full collection about every 70,000 net
allocations (after the freeze the "a quarter of the long-lived" rule no longer holds them back:
few objects are long-lived), ~20 per process and minute at 100 req/s, 20–70 ms each with the
process's requests stopped: a part of the p99. 14× fewer of every generation's collections, each
young one a few ms instead of a fraction of one (~75 % of its objects are the requests' cyclic
garbage); the garbage cycles live a little longer (bounded by 10,000 container allocations).
Measured in docs/benchmarks/api_load.md, eleventh pass: better or equal in four pairs of five,
worse in one; inconclusive on the shared box. ``FAIRWAY_GC_YOUNG_THRESHOLD=700`` goes back.
"""

from __future__ import annotations

import gc

from django.conf import settings

YOUNG_THRESHOLD = 10_000
"""Allocations (less deallocations) of container objects between two young collections; Python's is
700. ``FAIRWAY_GC_YOUNG_THRESHOLD`` sets another (700: Python's behaviour)."""


def freeze_startup_objects() -> int:
    """Load the URLconf (the views, serializers and their modules, imported lazily otherwise),
    collect the import's garbage, then freeze every object the collector tracks, and collect less
    often (:data:`YOUNG_THRESHOLD`; the older generations' thresholds stay 10 and 10). Returns
    ``gc.get_freeze_count()`` (objects frozen in this process, all calls together)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 -- the property imports every view module
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(settings.FAIRWAY.get("GC_YOUNG_THRESHOLD", YOUNG_THRESHOLD), middle, old)
    return gc.get_freeze_count()
