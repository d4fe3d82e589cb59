"""A Spark session for ledgerctl: Java checked first, Spark's log kept off the terminal.

pyspark starts a JVM that inherits the process's standard error and logs to it. While the
JVM is launched, file descriptor 2 points at a log file instead, so everything the JVM
(and the Python workers it starts) writes goes there for the life of the session, and our
own one-line errors and progress keep the terminal. The log file's path is given when
Spark fails.

Progress comes from Spark's status tracker: :class:`StageProgress` polls the tasks of the
active stages and shows them on stderr (only on a terminal).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from pulsarctl_py.errors import LedgerctlError, StoreUnavailable

#: settings ledgerctl gives every session it starts (``--spark-conf`` overrides them)
DEFAULT_CONF = {
    "spark.app.name": "ledgerctl",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.python.worker.reuse": "true",
}
#: the master when none is given: every core of this machine
DEFAULT_MASTER = "local[*]"
#: what a local session adds: its JVM only schedules tasks and moves small results (the
#: Python workers do the reading), so the quick C1 compiler and the serial collector are
#: enough, and they leave the cores to the workers. Measured with bench/spark.py
#: (docs/performance.md, "Spark engine"): on 2 cores the JVM took 0.8 s of CPU instead of
#: 2.2 s during an export of 200,000 messages, and the session started in 8 s instead of 23
LOCAL_CONF = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}


def java_executable() -> str | None:
    """The java Spark would start: $JAVA_HOME/bin/java, else java on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        return candidate if os.access(candidate, os.X_OK) else None
    return shutil.which("java")


def require_java() -> str:
    java = java_executable()
    if java is None:
        raise StoreUnavailable(
            "the Spark engine needs Java 17 or later and none was found "
            "(install openjdk-17-jre-headless, or set JAVA_HOME)"
        )
    return java


def parse_conf(items: Sequence[str]) -> list[tuple[str, str]]:
    """``k=v`` strings of ``--spark-conf`` as pairs; a malformed one is a usage error."""
    out = []
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise LedgerctlError(f"--spark-conf {item!r}: expected KEY=VALUE")
        out.append((key.strip(), value))
    return out


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the JVM is started (it keeps it)."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


def hush_root_logging() -> None:
    """Give the root logger a handler that drops records, if it has none: py4j reports a
    broken call (as on Ctrl-C, while PySpark cancels the jobs) with ``logging.exception``
    on the root logger, which without a handler configures one that prints a traceback on
    stderr. ledgerctl reports through its own errors, never through logging."""
    import logging

    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


_log_path: str | None = None


def log_path() -> str | None:
    """Where the JVM of this process's session logs, once one was started here."""
    return _log_path


def get_session(
    master: str | None = None, conf: Sequence[tuple[str, str]] = (), *, quiet: bool = True
) -> Any:
    """The active Spark session, or a new one on ``master`` (default ``local[*]``)."""
    global _log_path
    require_java()
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None and master is None and not conf:
        return active
    master = master or DEFAULT_MASTER
    if master.startswith("local"):
        # executors are this machine's processes: keep Spark's sockets on loopback
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # the workers run our decoders: the same interpreter as this process, unless told
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master)
    local = LOCAL_CONF if master.startswith("local") else {}
    for key, value in {**DEFAULT_CONF, **local, **dict(conf)}.items():
        builder = builder.config(key, value)
    if _log_path is None:
        fd, _log_path = tempfile.mkstemp(prefix="ledgerctl-spark-", suffix=".log")
        os.close(fd)
    redirect = _stderr_to(_log_path) if quiet else contextlib.nullcontext()
    hush_root_logging()
    try:
        with _starting(master), redirect:
            session = builder.getOrCreate()
    except Exception as exc:
        raise StoreUnavailable(
            f"Spark could not start on {master}: {_first_line(exc)} (Spark's log: {_log_path})"
        ) from None
    session.sparkContext.setLogLevel("ERROR")
    return session


@contextlib.contextmanager
def _starting(master: str) -> Iterator[None]:
    """``starting Spark`` on the terminal while the JVM starts (seconds of nothing else):
    drawn on a copy of the terminal's descriptor, since fd 2 points at Spark's log then."""
    if not sys.stderr.isatty():
        yield
        return
    from pulsarctl_py import render

    sys.stderr.flush()
    with os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace") as terminal:
        console = render.make_console(file=terminal, force_terminal=True)
        with render.activity(console, f"starting Spark ({master})"):
            yield


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


#: the last line of an executor's Python traceback: ``module.Class: message`` (the class
#: qualified by its module, as Python prints an exception that is not a builtin)
_RAISED = re.compile(r"^((?:pulsarctl_py|decoders)(?:\.\w+)*)\.(\w+): (.*)$", re.MULTILINE)


def _raised_here(module: str, name: str) -> type[LedgerctlError] | None:
    """The ledgerctl error class an executor's traceback names, when this process has it
    (only ledgerctl's own modules are imported by name)."""
    import importlib

    if not module.startswith("pulsarctl_py"):
        module = "pulsarctl_py." + module
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    if isinstance(found, type) and issubclass(found, LedgerctlError):
        return found
    return None


def job_error(exc: BaseException) -> LedgerctlError:
    """A failed Spark job as one line: the Python error of the task when there is one.

    An executor's ledgerctl error (any subclass: an S3 offload's ``OffloadUnreachable``,
    a damaged entry's ``DataError``) keeps its class's exit code (3 a store unreachable,
    1 a finding, 2 bad input) and its message, as the local engine says it, never the
    Java stack trace around it."""
    from pulsarctl_py.errors import DataError, NotFoundError

    text = str(exc)
    kinds: dict[str, type[LedgerctlError]] = {
        "StoreUnavailable": StoreUnavailable,
        "BookieDirError": StoreUnavailable,
        "MetadataStoreError": StoreUnavailable,
        "NotFoundError": NotFoundError,
        "DataError": DataError,
        "CorruptEntryError": DataError,
        "LedgerctlError": LedgerctlError,
    }
    best: tuple[int, type[LedgerctlError], str, int] | None = None
    for name, kind in kinds.items():
        at = text.rfind(name + ": ")
        if at >= 0 and (best is None or at > best[0]):
            line = text[at + len(name) + 2 :].splitlines()[0].strip()
            best = (at, kind, line, kind.exit_code)
    for found in _RAISED.finditer(text):
        cls = _raised_here(found[1], found[2])
        if cls is not None and (best is None or found.end() >= best[0]):
            roots = (StoreUnavailable, NotFoundError, DataError)
            root = next((r for r in roots if issubclass(cls, r)), LedgerctlError)
            best = (found.start(), root, found[3].strip(), cls.exit_code)
    if best is not None:
        error = best[1](best[2])
        error.exit_code = best[3]
        return error
    where = f" (Spark's log: {_log_path})" if _log_path else ""
    return StoreUnavailable(f"the Spark job failed: {_first_line(exc)}{where}")


class StageProgress:
    """Tasks done / tasks of Spark's active stages, polled from the status tracker."""

    def __init__(self, session: Any, label: str, console: Any = None) -> None:
        self.sc = session.sparkContext
        self.label = label
        self.console = console
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown: Any = None

    def snapshot(self) -> tuple[int, int]:
        """(completed tasks, tasks) over the active stages now."""
        tracker = self.sc.statusTracker()
        done = total = 0
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
        return done, total

    def __enter__(self) -> StageProgress:
        from pulsarctl_py import render

        self._shown = render.activity(self.console, self.label, unit="tasks")
        line = self._shown.__enter__()
        if self.console is None or not self.console.is_terminal:
            return self

        def poll() -> None:
            while not self._stop.wait(0.25):
                try:
                    done, total = self.snapshot()
                except Exception:  # the session is closing
                    return
                if total:  # between stages Spark knows no total: the line keeps its count
                    line.update(completed=done, total=total)

        self._thread = threading.Thread(target=poll, name="ledgerctl-spark-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        self._shown.__exit__(*exc)
