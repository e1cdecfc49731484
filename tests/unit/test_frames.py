"""RLlib's connector pieces call ``inspect.stack()``: after rlplat names the frames under the
command that belong to no module, inspect describes every frame as it did before."""

from __future__ import annotations

import inspect

from rlplat.util.frames import skip_module_search_for_frames_below


def _described() -> list[tuple[str, int, str, list[str] | None]]:
    return [(f.filename, f.lineno, f.function, f.code_context) for f in inspect.stack()]


def test_inspect_describes_exec_and_module_frames_as_before():
    scope = {"described": _described, "skip": skip_module_search_for_frames_below}
    exec("before = described()\nskip()\nafter = described()", scope)  # a <string> frame
    before, after = scope["before"], scope["after"]
    assert [frame[0] for frame in before][:2] == [__file__, "<string>"]
    # the same files, functions and source lines (the calls differ by their line only)
    assert [(f[0], f[2], f[3]) for f in after[1:]] == [(f[0], f[2], f[3]) for f in before[1:]]
    assert after[0][3] == before[0][3]
