"""Unit tests start no Ray, train nothing and spawn no process: a test that does fails here, so
that ``pytest -m unit`` stays a one-minute run. Such a test belongs in tests/e2e."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

RAY_FIXTURES = {"ray_cluster", "ray_session"}


class SpawnRefused(OSError):
    """Raised where a unit test would have started a process."""


def pytest_runtest_setup(item):
    """Before any fixture runs: a unit test may not ask for the session's Ray."""
    wanted = RAY_FIXTURES & set(getattr(item, "fixturenames", ()))
    if wanted:
        pytest.fail(
            f"unit tests start no Ray: {item.nodeid} uses {', '.join(sorted(wanted))} "
            "(move it to tests/e2e)",
            pytrace=False,
        )


def _ray_initialized() -> bool:
    ray = sys.modules.get("ray")  # not imported: certainly not started
    return ray is not None and ray.is_initialized()


@pytest.fixture(autouse=True)
def no_ray_no_process(monkeypatch, request):
    """Refuse every way of starting a process (Ray's start goes through them too), and fail the
    test if it did try, or if Ray was started during it, even where the code caught the error."""
    attempts: list[str] = []

    def refuse(what):
        def refused(*args, **kwargs):
            command = args[1] if args and isinstance(args[0], subprocess.Popen) else args[:1]
            attempts.append(f"{what} {command!r}")
            raise SpawnRefused(f"unit tests spawn no process ({what}); move the test to tests/e2e")

        return refused

    monkeypatch.setattr(subprocess.Popen, "_execute_child", refuse("subprocess"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"os.{name}"))
    ray_before = _ray_initialized()
    yield
    started_ray = not ray_before and _ray_initialized()
    if started_ray:
        import ray

        ray.shutdown()
    problems = [f"it spawned a process: {attempt}" for attempt in attempts]
    problems += ["it started Ray"] if started_ray else []
    if problems:
        pytest.fail(
            f"{request.node.nodeid} is not a unit test: {'; '.join(problems)} (move it to "
            "tests/e2e)",
            pytrace=False,
        )
