"""try32: ``bench/api_load.py --redis-db 6`` on a database holding data said "no free Redis database
number (1..15)": the number asked for, and why, must be named."""

from __future__ import annotations

import pytest

from bench import api_load


class FakeRedis:
    """Database number → keys, for ``claim_redis``'s calls (set nx, dbsize, delete, close)."""

    data: dict[int, set[str]] = {}

    def __init__(self, number: int) -> None:
        self.keys = self.data.setdefault(number, set())

    @classmethod
    def from_url(cls, url: str) -> FakeRedis:
        return cls(int(url.rsplit("/", 1)[1]))

    def set(self, key: str, value: object, nx: bool = False, ex: int | None = None) -> bool:
        if nx and key in self.keys:
            return False
        self.keys.add(key)
        return True

    def dbsize(self) -> int:
        return len(self.keys)

    def delete(self, key: str) -> None:
        self.keys.discard(key)

    def close(self) -> None:
        pass


@pytest.fixture
def fake_redis(monkeypatch):
    import redis

    FakeRedis.data = {}
    monkeypatch.setattr(redis, "Redis", FakeRedis)
    return FakeRedis.data


def test_a_busy_redis_database_asked_for_is_named_with_its_keys(fake_redis):
    fake_redis[6] = {"dramatiq:scheduler", "fairway:tick-seconds"}
    with pytest.raises(SystemExit) as refused:
        api_load.claim_redis("redis://127.0.0.1:6379/0", 6)
    message = str(refused.value)
    assert "1..15" not in message
    assert "Redis database 6" in message and "2 keys" in message and "--redis-db" in message
    assert fake_redis[6] == {"dramatiq:scheduler", "fairway:tick-seconds"}  # nothing left behind


def test_an_empty_redis_database_asked_for_is_claimed(fake_redis):
    assert api_load.claim_redis("redis://127.0.0.1:6379/0", 6) == "redis://127.0.0.1:6379/6"
    assert fake_redis[6] == {api_load.REDIS_MARKER}
