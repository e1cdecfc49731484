"""Episode memories of recurrent (and frame-stacking) policies between HTTP requests.

A session is one episode of one client: the memory of each of its agents (recurrent state,
stacked frames) after its last step. The store is bounded (least recently used sessions go
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
        self._entries: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def get(self, session: str) -> Any:
        """The session's memories, or None if it is new, expired or was evicted."""
        self._expire()
        entry = self._entries.get(session)
        if entry is None:
            return None
        self.put(session, entry[1])  # used now: the newest, the last to expire
        return entry[1]

    def put(self, session: str, memories: Any) -> None:
        self._entries[session] = (self._clock(), memories)
        self._entries.move_to_end(session)
        while len(self._entries) > self.max_sessions:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        self._expire()
        return len(self._entries)

    def _expire(self) -> None:
        deadline = self._clock() - self.ttl_s
        while self._entries:
            session, (last_used, _) = next(iter(self._entries.items()))
            if last_used >= deadline:
                break
            del self._entries[session]
