"""``admission.host_table`` + ``infeasible_in`` (a web process judges submissions on the table of
its kept hosts, made once) against the composition ``infeasible_request`` was before it: the
shapes and each model's capacities in host order, read again per request. Random hosts and
requests; no database."""

from __future__ import annotations

import random

from scheduler.policy.admission import (
    gpu_shapes,
    host_table,
    infeasible_in,
    infeasible_request,
    infeasible_resources,
    infeasible_shape,
)


def _before(host_sizes, model, gpus, *, cluster=None, cpus=None, memory=None):  # the oracle
    hosts = [(h[0], h[1], h[2] if len(h) > 2 else None, h[3] if len(h) > 3 else None) for h in host_sizes]
    shapes = gpu_shapes((m, n) for m, n, _, _ in hosts)
    bad = infeasible_shape(shapes, model, gpus, cluster=cluster)
    if bad is None:
        caps = [(n, c, m) for mo, n, c, m in hosts if mo == model]
        bad = infeasible_resources(caps, shapes[model][0], gpus, cpus, memory)
    return bad


def test_the_table_judges_as_the_hosts_read_per_request() -> None:
    rng = random.Random(37)
    for _ in range(400):
        hosts = [
            (rng.choice(["A100", "H100", "L4"]), rng.choice([1, 2, 4, 8]))
            + ((rng.choice([None, 16, 96]), rng.choice([None, 1 << 30, 1 << 40])) if rng.random() < 0.8 else ())
            for _ in range(rng.randrange(0, 12))
        ]
        table = host_table(hosts)
        for _ in range(10):
            model = rng.choice(["A100", "H100", "L4", "V100"])
            gpus = rng.choice([0, 1, 2, 3, 4, 8, 12, 16, 24, 64])
            kwargs = {"cpus": rng.choice([None, 8, 64, 128]), "memory": rng.choice([None, 1 << 29, 1 << 41])}
            expected = _before(hosts, model, gpus, cluster="c", **kwargs)
            assert infeasible_in(table, model, gpus, cluster="c", **kwargs) == expected
            assert infeasible_request(hosts, model, gpus, cluster="c", **kwargs) == expected
