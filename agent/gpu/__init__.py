"""GPU backends: inventory and telemetry of a host's GPUs (``fake`` now, ``nvml`` later)."""
