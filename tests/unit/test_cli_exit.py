"""The CLI's exit codes: an error nobody named is exit 2 with one line, never 1 (``validate``'s verdict)."""

import pytest

from tailfill import cli


def test_an_unexpected_exception_is_exit_2_with_one_line_and_its_traceback(monkeypatch, capsys):
    def broken(_args):
        raise FileNotFoundError("expectation suite /x/run_completeness.json is missing")

    parser = cli.build_parser()
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["validate"].set_defaults(func=broken)
    assert cli.main(["validate", "demo", "--all"]) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err
    assert err.strip().splitlines()[-1] == ("error: unexpected FileNotFoundError: expectation suite "
                                            "/x/run_completeness.json is missing (the traceback is above)")


def test_a_removed_spark_mode_is_exit_2_with_one_line_saying_what_replaces_it(capsys):
    with pytest.raises(SystemExit) as exited:
        cli.main(["tail", "demo", "--once", "--spark", "warm"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "tailfill tail: error: argument --spark: 'warm': the warm Spark server was removed, Spark Connect replaces it: "
        "use connect (the modes: auto, connect, submit)")
