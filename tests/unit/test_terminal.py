"""A command's terminal gets its jobs' lines for people; tracebacks, JVM stacks and Spark's log go to its log file,
and a failure ends in one line with its cause and fix."""

from pathlib import Path

from tailfill.errors import DiskFullError, ErrorInfo
from tailfill.run.terminal import JobOutput, failure_line

OUTPUT = """\
Spark: spark-submit: no Spark Connect server configured
WARNING: Using incubator modules: jdk.incubator.vector
25/11/29 10:15:39 WARN NativeCodeLoader: Unable to load native-hadoop library for your platform
[demo backfill slice 1/1 (40,000 offsets)] 2,000/40,000 offsets (5%) 1,200 rows/s 1 batches ETA 30s
Traceback (most recent call last):
  File "/w/tailfill/lake/prepare.py", line 140, in write_range
    raise DiskFullError(path)
tailfill.errors.DiskFullError: the disk is full: could not write a data file /w/x.parquet (no space left on device)
25/11/29 10:15:41 ERROR Executor: Exception in task 0.0 in stage 3.0 (TID 5)
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:624)
Caused by: java.io.IOException: No space left on device
\t... 12 more
%3|1764411339.123|FAIL|rdkafka#consumer-1| [thrd:127.0.0.1:9092/bootstrap]: Connection refused
WARNING: the tail cannot keep up
error: DiskFullError: the disk is full: could not write a data file /w/x.parquet (no space left on device)
TAILFILL_RESULT {"results": []}"""


def test_the_terminal_gets_the_jobs_lines_for_people_and_the_log_file_every_line(tmp_path):
    shown: list[str] = []
    output = JobOutput(tmp_path / "logs" / "run.log", shown.append)
    for line in OUTPUT.splitlines():
        output(line)
    output.close()
    assert shown == ["[demo backfill slice 1/1 (40,000 offsets)] 2,000/40,000 offsets (5%) 1,200 rows/s 1 batches "
                     "ETA 30s", "WARNING: the tail cannot keep up"]
    assert (tmp_path / "logs" / "run.log").read_text().splitlines() == OUTPUT.splitlines()


def test_a_log_that_cannot_be_written_says_so_once_and_the_terminal_goes_on(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    shown: list[str] = []
    output = JobOutput(blocker / "run.log", shown.append)
    output("[demo tail] 1 batches")
    output("[demo tail] 2 batches")
    assert len(shown) == 3 and shown[0].startswith("WARNING: the job's output goes to the terminal alone: its log ")
    assert shown[1:] == ["[demo tail] 1 batches", "[demo tail] 2 batches"]


def test_a_failure_is_one_line_with_its_cause_its_fix_and_where_the_output_is(tmp_path: Path):
    log = tmp_path / "run.log"
    log.write_text("…")
    error = ErrorInfo.of(DiskFullError("the disk is full: could not write a data file /w/x.parquet (no space left "
                                       "on device)"))
    line = failure_line("backfill of demo", error, 2, log)
    assert line == ("backfill of demo failed: DiskFullError: the disk is full: could not write a data file "
                    f"/w/x.parquet (no space left on device) (fix: {DiskFullError.fix}); the full output: {log}")
    assert failure_line("tail of demo", None, -9, None) == "tail of demo failed: its job ended (exit -9) without " \
                                                          "saying why"


def test_what_libraries_say_in_the_commands_process_goes_to_its_log_not_the_terminal(tmp_path, capsys):
    import logging
    import threading

    from tailfill.run.terminal import CommandLog

    log, before = CommandLog(tmp_path / "commands" / "tail.log"), threading.excepthook
    with log.diverting():
        logging.getLogger("pyspark.sql.connect.client").warning("retrying a call the server dropped")
        thread = threading.Thread(target=lambda: 1 / 0, name="reattach")
        thread.start()
        thread.join()
    err = capsys.readouterr().err
    assert "retrying" not in err and "ZeroDivisionError" not in err
    assert threading.excepthook is before  # as it was
    text = (tmp_path / "commands" / "tail.log").read_text()
    assert "retrying a call the server dropped" in text and "in thread reattach" in text and "ZeroDivisionError" in text
