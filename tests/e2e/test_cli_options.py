"""The command line offers each stage's options as the stage declares them, and --debug works on
every command."""

from __future__ import annotations

import dataclasses

import pytest
import typer

from rlplat.cli import app, main
from rlplat.export.options import DEFAULT_TOLERANCE, ExportOptions
from rlplat.policy.options import DatasetOptions, EvalOptions
from rlplat.report.options import ReportOptions
from rlplat.run.options import TrainOptions
from rlplat.serve.options import ServeOptions
from rlplat.serve.sessions import DEFAULT_MAX_SESSIONS, DEFAULT_TTL_S
from rlplat.util.options import option_info

STAGES = {
    "train": TrainOptions,
    "eval": EvalOptions,
    "export": ExportOptions,
    "serve": ServeOptions,
    "report": ReportOptions,
    "dataset": DatasetOptions,
}
COMMANDS = ("train", "plan", "eval", "export", "serve", "report", "dataset", "runs")


def click_params(command: str) -> dict:
    return {param.name: param for param in typer.main.get_command(app).commands[command].params}


@pytest.mark.parametrize("command", list(STAGES))
def test_every_stage_option_is_offered_with_its_default_and_help(command):
    params = click_params(command)
    for field in dataclasses.fields(STAGES[command]):
        info = option_info(field)
        if info is None:
            continue
        param = params[field.name]
        assert param.help == info.help
        if field.default is not dataclasses.MISSING:
            assert param.default == field.default
        assert param.required == (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )


def test_defaults_shared_with_the_stages_code_are_the_stages_own():
    assert click_params("export")["tolerance"].default == DEFAULT_TOLERANCE
    assert click_params("serve")["max_sessions"].default == DEFAULT_MAX_SESSIONS
    assert click_params("serve")["session_ttl_s"].opts == ["--session-ttl"]
    assert click_params("serve")["session_ttl_s"].default == DEFAULT_TTL_S


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_debug(command):
    assert click_params(command)["debug"].opts == ["--debug"]


def test_a_user_error_is_one_paragraph_and_debug_shows_its_traceback(tmp_path, capsys):
    args = ["dataset", str(tmp_path), "--out", str(tmp_path / "data")]
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.startswith("error: rlplat dataset: say where the data comes")
    with pytest.raises(SystemExit) as exit_:
        main([*args, "--debug"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "UserError" in err and "say where the data comes" in err
    with pytest.raises(SystemExit):  # --debug holds for its own command only
        main(args)

