"""Scheduling scenarios: the YAML format of tests/scenarios/FORMAT.md, a loader that
rejects malformed files with the file, key and problem, and a runner over backends."""
