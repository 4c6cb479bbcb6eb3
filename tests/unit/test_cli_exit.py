"""The CLI's exit codes: an error nobody named is exit 2 with one line, never 1 (``validate``'s verdict)."""

from pathlib import Path

import pytest

from tailfill import cli


def test_an_unexpected_exception_is_exit_2_with_one_line_and_its_traceback_in_a_file(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TAILFILL_HOME", str(tmp_path))

    def broken(_args):
        raise FileNotFoundError("expectation suite /x/run_completeness.json is missing")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["validate"].set_defaults(func=broken)
    assert cli.main(["validate", "demo", "--all"]) == 2
    err = capsys.readouterr().err
    [line] = err.strip().splitlines()  # the terminal gets one line, the traceback goes to a file it names
    assert line.startswith("error: unexpected FileNotFoundError: expectation suite /x/run_completeness.json is "
                           "missing (fix: "), line
    where = Path(line.rsplit("its traceback: ", 1)[1].rstrip(")"))
    assert where.is_relative_to(tmp_path) and "Traceback (most recent call last)" in where.read_text()


def test_a_removed_spark_mode_is_exit_2_with_one_line_saying_what_replaces_it(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["tail", "demo", "--once", "--spark", "warm"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "tailfill tail: error: argument --spark: 'warm': the warm Spark server was removed, Spark Connect replaces it: "
        "use connect (the modes: auto, connect, submit)")
