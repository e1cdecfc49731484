"""rlplat serve's HTTP contract and session store, without Ray."""

from __future__ import annotations

import numpy as np
import pytest

# --- the HTTP contract and the session store, without Ray ---------------------------------------

MASKED_MANIFEST = {
    "multi_agent": False,
    "policies": {"default_policy": {
        "kind": "onnx",
        "inputs": [
            {"name": "obs", "shape": ["batch", 4], "path": ["observations"],
             "observation_dtype": "float32"},
            {"name": "action_mask", "shape": ["batch", 3], "path": ["action_mask"],
             "observation_dtype": "int8"},
        ],
        "action": {"type": "Discrete", "n": 3, "start": 0, "dtype": "int64"},
        "exploration": None,
    }},
}
DISCRETE_MANIFEST = {
    "multi_agent": False,
    "policies": {"default_policy": {
        "kind": "onnx",
        "inputs": [{"name": "obs", "shape": ["batch"], "path": [], "observation_dtype": "int64",
                    "observation_range": [0, 4]}],
        "action": {"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"},
    }},
}


@pytest.mark.parametrize(
    ("manifest", "body", "status", "words"),
    [
        (MASKED_MANIFEST, b'{"observation": null}', 422, ["observation has no entry"]),
        (MASKED_MANIFEST, b'{"observation": {"observations": [true, false, true, false], '
                          b'"action_mask": [1, 1, 1]}}', 422, ["observation.observations",
                                                              "not numbers"]),
        (MASKED_MANIFEST, b'{"observation": {"observations": [1e300, 0, 0, 0], '
                          b'"action_mask": [1, 1, 1]}}', 422, ["too large"]),
        (MASKED_MANIFEST, b'{"observation": {"observations": [0, 0, 0, 0], '
                          b'"action_mask": [1, 2, 1]}}', 422, ["observation.action_mask",
                                                              "1 (legal) and 0"]),
        (MASKED_MANIFEST, b'{"observation": {"observations": [0, 0, 0, 0]}, '
                          b'"action_mask": [0, 0, 0]}', 422, ["action_mask", "no legal action"]),
        (MASKED_MANIFEST, b"[" * 100_000 + b"]" * 100_000, 400, ["nested too deeply"]),
        (DISCRETE_MANIFEST, b'{"observation": 7}', 422, ["outside 0..4"]),
        (DISCRETE_MANIFEST, b'{"observation": [1, 2]}', 422, ["got shape [2]", "'observations'"]),
        (DISCRETE_MANIFEST, b'{"observation": 2.5}', 422, ["fractions"]),
        (DISCRETE_MANIFEST, b'{"observations": [1, 2], "explore": true}', 422,
         ["greedy action only"]),
        (DISCRETE_MANIFEST, b'{"observation": 1, "reset": "yes"}', 422, ["'reset'"]),
    ],
)
def test_bad_requests_are_named(manifest, body, status, words):
    from rlplat.serve.protocol import HttpError, PolicyView, parse_act, parse_body

    with pytest.raises(HttpError) as raised:
        parse_act(parse_body(body), PolicyView.of(manifest))
    assert raised.value.status == status
    for word in words:
        assert word in raised.value.message, raised.value.message


def test_a_mask_given_apart_replaces_the_observations_own():
    from rlplat.serve.protocol import PolicyView, parse_act

    request = parse_act({"observation": {"observations": [0, 1, 2, 3]},
                         "action_mask": [0, 1, 1]}, PolicyView.of(MASKED_MANIFEST))
    (query,) = request.queries
    assert query.action_mask.tolist() == [0, 1, 1]
    assert query.observation["observations"].dtype == np.float32


def test_sessions_expire_are_bounded_and_refuse_a_step_on_a_stale_version():
    from rlplat.serve.sessions import SessionStore

    now = [0.0]
    store = SessionStore(max_sessions=2, ttl_s=10, clock=lambda: now[0])
    assert store.get("a") == (0, None)
    assert store.put("a", "a1", 0)
    assert not store.put("a", "stale", 0), "a step from version 0 after a step was stored"
    assert store.get("a") == (1, "a1")
    store.put("b", "b1", 0)
    now[0] = 5
    store.get("a")  # used: b is now the least recently used
    store.put("c", "c1", 0)
    assert store.get("b") == (0, None), "evicted: at most 2 sessions"
    now[0] = 12
    assert store.get("a") == (1, "a1")
    now[0] = 16  # c was last used at 5, a at 12
    assert store.get("c") == (0, None), "expired after 10 s without a request"
    assert store.get("a") == (1, "a1")


def test_the_local_engine_runs_a_lone_request_at_once_and_batches_what_waits():
    """One request runs the policy by itself, with no wait; requests that arrive together share
    graph runs of at most max_batch_size; each gets its own reply, and a policy that fails
    fails only the requests of that run."""
    import asyncio

    from rlplat.serve.front import WorkerReply
    from rlplat.serve.local import Batcher

    class Policy:
        def __init__(self):
            self.runs: list[list[int]] = []

        def act(self, requests):
            self.runs.append([queries[0] for queries in requests])
            if -1 in self.runs[-1]:
                raise RuntimeError("broken")
            return [WorkerReply(actions=[queries[0] * 10]) for queries in requests]

    async def scenario(policy):
        batcher = Batcher(policy, max_batch_size=4)
        alone = await asyncio.wait_for(batcher.ask([7]), timeout=1)
        together = await asyncio.gather(*(batcher.ask([i]) for i in range(6)))
        failed = await asyncio.gather(batcher.ask([-1]), return_exceptions=True)
        return alone, together, failed

    policy = Policy()
    alone, together, failed = asyncio.run(scenario(policy))
    assert alone.actions == [70]
    assert [reply.actions for reply in together] == [[i * 10] for i in range(6)]
    assert policy.runs == [[7], [0, 1, 2, 3], [4, 5], [-1]]
    assert isinstance(failed[0], RuntimeError)


PLAIN_MANIFEST = {
    "multi_agent": False,
    "policies": {
        "default_policy": {
            "kind": "onnx",
            "inputs": [
                {"name": "obs", "shape": ["batch", 4], "path": [], "observation_dtype": "float32"}
            ],
            "action": {"type": "Discrete", "n": 2, "start": 0, "dtype": "int64"},
        }
    },
}


def test_a_list_of_observations_is_checked_at_once_and_a_bad_one_still_named():
    """A request's list of plain observations is checked as one array (each row the float32
    observation the graph reads); when one of them is bad, the error names it."""
    from rlplat.serve.protocol import HttpError, PolicyView, parse_act

    view = PolicyView.of(PLAIN_MANIFEST)
    observations = [[0.1, 0.2, 0.3, 0.4], [1, 2, 3, 4], [-0.5, 0.0, 0.5, 1e3]]
    request = parse_act({"observations": observations}, view)
    assert len(request.queries) == 3
    for query, given in zip(request.queries, observations, strict=True):
        assert query.observation.dtype == np.float32
        np.testing.assert_array_equal(query.observation, np.asarray(given, np.float32))
    with pytest.raises(HttpError, match=r"observations\[2\]: got shape \[3\]"):
        parse_act({"observations": [*observations[:2], [0.0, 0.0, 0.0]]}, view)
    with pytest.raises(HttpError, match=r"observations\[1\]: holds NaN"):
        parse_act({"observations": [observations[0], [0.0, float("nan"), 0.0, 0.0]]}, view)
