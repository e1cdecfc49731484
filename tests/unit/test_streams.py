"""``rlplat eval --json``: what an env package prints to stdout, even from C, goes to stderr, so
the JSON answer is all that stdout carries."""

from __future__ import annotations

import os

from rlplat.util.streams import stdout_to_stderr


def test_what_is_written_to_file_descriptor_1_inside_the_block_goes_to_stderr(capfd):
    with stdout_to_stderr():
        os.write(1, b"pybullet build time: Nov 28 2023\n")  # as a C library writes
        print("argv[0]=", flush=True)
    print('{"episodes": 1}')
    out, err = capfd.readouterr()
    assert out == '{"episodes": 1}\n'
    assert "pybullet build time" in err and "argv[0]=" in err
