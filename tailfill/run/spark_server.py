"""The warm Spark server: one long-lived driver that runs ingest jobs as they are asked for.

A ``spark-submit`` pays a JVM, a SparkSession and fresh Python workers every time (17 s of a 27 s
Airflow lane, 45–66 s of an incremental run that ingests a few thousand records). This process
pays them once: it builds the session (:func:`~tailfill.run.spark_session.get_session`) and then
serves, on 127.0.0.1 only, the one job contract there is (:class:`~tailfill.run.submit.JobSpec`
in, :class:`~tailfill.run.submit.JobResult` out), each job in its own thread of the one session:

- ``POST /jobs`` ``{"argv": [...], "env": {name: digest}}``: runs the job, answering with its
  progress lines as they come and, last, its ``TAILFILL_RESULT {...}`` line. A job whose caller
  disconnects (a killed Airflow task, Ctrl-C) is cancelled at once: its query stops, what it
  committed stays, the rest is replayed by the next run, as after a killed ``spark-submit``.
  ``env`` are digests of the caller's settings that reach the job (:func:`warm_spark.job_env_digests`):
  a job whose settings differ from the server's is refused (409, naming them, never their values).
- ``POST /jobs/<run id>/cancel``: cancel that run's jobs.
- ``GET /status``: pid, code fingerprint, master, jobs running and done.

Started and supervised by :mod:`tailfill.run.warm_spark` (``tailfill spark-server up|down|status``,
and on demand by a job that asks for warm Spark); its output goes to ``logs/spark-server.log``.
"""

from __future__ import annotations

import json
import os
import queue
import select
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tailfill.errors import ErrorInfo
from tailfill.plumbing.durable import write_whole
from tailfill.redact import redact_text
from tailfill.run import runtime, warm_spark
from tailfill.run.contract import JobResult, JobSpec
from tailfill.settings import settings

POLL_S = 1.0  # how often a quiet job's connection is checked for a caller that went away


class _Jobs:
    """The jobs of this server: running (with their cancel events, by run id) and how many ran."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.running: dict[int, tuple[str, threading.Event]] = {}
        self.done = 0
        self.next_id = 0

    def add(self, run_id: str) -> tuple[int, threading.Event]:
        with self.lock:
            self.next_id += 1
            cancel = threading.Event()
            self.running[self.next_id] = (run_id, cancel)
            return self.next_id, cancel

    def finish(self, job: int) -> None:
        with self.lock:
            self.running.pop(job, None)
            self.done += 1

    def cancel(self, run_id: str) -> int:
        with self.lock:
            found = [event for rid, event in self.running.values() if rid == run_id]
        for event in found:
            event.set()
        return len(found)

    def snapshot(self) -> dict:
        with self.lock:
            return {"running": sorted(rid for rid, _ in self.running.values()), "done": self.done}


def _caller_gone(conn: socket.socket) -> bool:
    """Whether the caller closed its end (readable, and a peek finds end of stream)."""
    try:
        readable, _, _ = select.select([conn], [], [], 0)
        return bool(readable) and conn.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _handler(spark, jobs: _Jobs, state: dict, started_with: dict) -> type[BaseHTTPRequestHandler]:
    """Request handling; ``started_with``: digests of the settings the server was started with."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt: str, *args: object) -> None:  # one line per request, in the server's log
            print(redact_text(f"{self.command} {self.path} -> " + (fmt % args)), file=sys.stderr, flush=True)

        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path != "/status":
                return self._json(404, {"error": f"no such page: {self.path}"})
            return self._json(200, {**state, **jobs.snapshot()})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            parts = self.path.strip("/").split("/")
            if parts == ["jobs"]:
                return self._run(body)
            if len(parts) == 3 and parts[0] == "jobs" and parts[2] == "cancel":
                return self._json(200, {"cancelled": jobs.cancel(parts[1])})
            if parts == ["shutdown"]:
                self._json(200, {"stopping": True})
                os.kill(os.getpid(), signal.SIGTERM)
                return None
            return self._json(404, {"error": f"no such action: {self.path}"})

        def _run(self, body: dict) -> None:
            theirs = body.get("env", {})  # a name only the job gives (a secret) is compared with ours now
            ours = {**{n: warm_spark.digest(os.environ.get(n)) for n in theirs}, **started_with}
            differs = warm_spark.differing_settings(theirs, ours)
            if differs:
                return self._json(409, {"error": "the job's settings differ from the warm Spark server's: "
                                        + ", ".join(differs), "differs": differs})
            try:
                spec = JobSpec.parse(list(body["argv"]))
            except (KeyError, SystemExit):
                return self._json(400, {"error": f"not a job: {body.get('argv')!r}"})
            job, cancel = jobs.add(spec.run_id)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.end_headers()
            lines: queue.Queue[str | None] = queue.Queue()
            worker = threading.Thread(target=self._job, args=(spec, lines, cancel), daemon=True,
                                      name=f"job-{spec.run_id}")
            worker.start()
            try:
                self._stream(lines, cancel)
            finally:
                worker.join()
                jobs.finish(job)

        def _job(self, spec: JobSpec, lines: queue.Queue, cancel: threading.Event) -> None:
            try:
                lines.put(warm_spark.SERVED_BY + f" pid {os.getpid()}, job {spec.run_id}")
                from tailfill.run.spark_job import run_to_result

                result = run_to_result(spec, spark, lines.put, lambda event: lines.put(event.line()), cancel)
            except BaseException as exc:
                lines.put(redact_text(f"error: {type(exc).__name__}: {exc}"))
                result = JobResult(error=ErrorInfo.of(exc))
            lines.put(result.line())
            lines.put(None)

        def _stream(self, lines: queue.Queue, cancel: threading.Event) -> None:
            """Hand each line to the caller; cancel the job when the caller has gone (lines then go to our log)."""
            gone = False
            while True:
                try:
                    line = lines.get(timeout=POLL_S)
                except queue.Empty:
                    if not gone and _caller_gone(self.connection):
                        gone = True
                        cancel.set()
                        print("caller went away: cancelling its job", file=sys.stderr, flush=True)
                    continue
                if line is None:
                    return
                if gone:
                    print(redact_text(line), file=sys.stderr, flush=True)
                    continue
                try:
                    self.wfile.write((redact_text(line) + "\n").encode())
                    self.wfile.flush()
                except OSError:
                    gone = True
                    cancel.set()

    return Handler


def serve(home: Path | None = None, port: int = 0) -> None:
    """Build the session, then serve jobs on 127.0.0.1:``port`` until SIGTERM (or ``POST /shutdown``)."""
    from tailfill.run.spark_session import get_session

    home = home or settings().home
    started = time.time()
    started_with = warm_spark.job_env_digests(os.environ)  # as started: pyspark adds some of its own to the environment
    spark = get_session(app_name="tailfill-warm")
    if not spark.sparkContext.master.startswith("local"):  # a cluster's executors need the code
        spark.sparkContext.addPyFile(str(runtime.code_archive()))
    jobs = _Jobs()
    server = ThreadingHTTPServer((runtime.LOOPBACK, port), None)  # type: ignore[arg-type]
    server.daemon_threads = True
    state = {"pid": os.getpid(), "url": f"http://{runtime.LOOPBACK}:{server.server_address[1]}",
             "code": runtime.code_fingerprint(), "master": spark.sparkContext.master,
             "started_at": started, "ready_s": round(time.time() - started, 1)}
    server.RequestHandlerClass = _handler(spark, jobs, state, started_with)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    thread = threading.Thread(target=server.serve_forever, name="spark-server-http", daemon=True)
    thread.start()
    write_whole(warm_spark.state_file(home), json.dumps(state))
    print(f"warm Spark server ready at {state['url']} in {state['ready_s']}s (master {state['master']})",
          file=sys.stderr, flush=True)
    stop.wait()
    for rid in jobs.snapshot()["running"]:
        jobs.cancel(rid)
    server.shutdown()
    if (warm_spark.server_state(home) or {}).get("pid") == os.getpid():  # not a successor's
        warm_spark.state_file(home).unlink(missing_ok=True)
    spark.stop()


if __name__ == "__main__":
    serve()
