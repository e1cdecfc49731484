"""Episode memories of recurrent (and frame-stacking) policies between HTTP requests.

A session is one episode of one client: the memory of each of its agents (recurrent state,
stacked frames) after its last step, and a version that each step advances: a step computed from
a version that another step has since replaced is refused, so two requests at once on one
session cannot silently lose one of the steps. The store is bounded (least recently used sessions go
first) and sessions expire after a time without requests, so clients that vanish cost nothing.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

DEFAULT_MAX_SESSIONS = 10_000
DEFAULT_TTL_S = 600.0


class SessionStore:
    """Memories by session id: at most ``max_sessions``, each kept ``ttl_s`` after its last use."""

    def __init__(
        self,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        ttl_s: float = DEFAULT_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_sessions = max_sessions
        self.ttl_s = ttl_s
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, int, Any]] = OrderedDict()

    def get(self, session: str) -> tuple[int, Any]:
        """The session's version and memories; (0, None) if it is new, expired or evicted."""
        self._expire()
        entry = self._entries.get(session)
        if entry is None:
            return 0, None
        _, version, memories = entry
        self._keep(session, version, memories)  # used now: the last to expire
        return version, memories

    def put(self, session: str, memories: Any, version: int) -> bool:
        """Store the memories after a step computed from ``version``; False (and nothing
        stored) if the session has moved on since."""
        self._expire()
        current = self._entries.get(session)
        if (current[1] if current else 0) != version:
            return False
        self._keep(session, version + 1, memories)
        return True

    def _keep(self, session: str, version: int, memories: Any) -> None:
        self._entries[session] = (self._clock(), version, memories)
        self._entries.move_to_end(session)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)

    def _expire(self) -> None:
        deadline = self._clock() - self.ttl_s
        while self._entries:
            session, (last_used, _, _) = next(iter(self._entries.items()))
            if last_used >= deadline:
                break
            del self._entries[session]
