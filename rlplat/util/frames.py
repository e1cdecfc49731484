"""``inspect.stack()`` without a search of every module for the frames under the command.

RLlib's ``ConnectorV2.__init__`` calls ``inspect.stack()`` each time a connector piece with a
constructor of its own is built: several per env runner and learner, and one per update in PPO's
advantage step. For a frame whose file is no imported module's (``<frozen runpy>`` under
``python -m``, ``<string>`` under ``python -c``, code that pytest-xdist's workers ``exec``),
inspect looks for its module through all of ``sys.modules``, twice per frame and call: ~15 ms a
piece with RLlib and torch imported, 15-60 ms in a pytest-xdist worker (~40% of the workers'
CPU in a CI run went there).
"""

from __future__ import annotations

import inspect

NO_MODULE = "<no module>"  # a name sys.modules never holds: inspect's lookup gives None


def skip_module_search_for_frames_below() -> None:
    """Look up once the module of each frame below this call (and of ``<string>``); those that
    have none are named in inspect's file-to-module cache as of no module, so that later
    lookups end at once with the answer the search gave."""
    cache = getattr(inspect, "modulesbyfile", None)
    if not isinstance(cache, dict):  # a Python whose inspect keeps no such cache
        return
    cache.setdefault("<string>", NO_MODULE)
    frame = inspect.currentframe()
    while frame is not None:
        name = frame.f_code.co_filename
        if name not in cache and inspect.getmodule(frame, name) is None:
            cache[name] = NO_MODULE
        frame = frame.f_back
