"""What Spark executors get and what comes back from them, without a cluster.

* A task's error is one line with its class's exit code (an S3 offload an executor cannot
  read: no credentials there, exit 3; no boto3 in its Python, exit 2, naming that Python),
  as the local engine says it, never the Java stack trace around it. The texts are what
  PySpark 4 gives the driver (the worker's traceback inside the JVM's
  ``PythonException``), as recorded from a run.
* The splits the executors get carry the S3 location and endpoint, never the credentials
  of the driver's environment (a task's bytes show in Spark's UI and event logs).
"""

from __future__ import annotations

import pickle

import pytest

from pulsarctl_py.engines import build_scan_plan
from pulsarctl_py.spark.session import job_error

WORKER = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.runJob.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage "
    "0.0 failed 1 times, most recent failure: Lost task 1.0 in stage 0.0 (TID 1) "
    "(127.0.0.1 executor driver): org.apache.spark.api.python.PythonException: "
    "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most "
    "recent call last):\n"
    '  File "pulsarctl_py/stores/tiered/jcloud.py", line 476, in _call\n'
    '    raise OffloadUnreachable(f"ledger {self.ledger_id}: {exc.one_line()}") from None\n'
    "{last}\n"
    " SQLSTATE: 38000\n"
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException"
    "(PythonRunner.scala:1097)\n"
)


@pytest.mark.parametrize(
    ("last", "code", "message"),
    [
        (
            "pulsarctl_py.stores.tiered.jcloud.OffloadUnreachable: ledger 8: no credentials "
            "for S3 endpoint http://127.0.0.1:9: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY (or Pulsar's ACCESS_KEY_ID and ACCESS_KEY_SECRET)",
            3,
            "ledger 8: no credentials for S3 endpoint http://127.0.0.1:9",
        ),
        (
            "pulsarctl_py.decoders.errors.LedgerctlError: reading S3 offloads needs boto3 in "
            "/opt/executor/bin/python3: pip install 'ledgerctl[tiered]'",
            2,
            "reading S3 offloads needs boto3 in /opt/executor/bin/python3",
        ),
        (
            "pulsarctl_py.stores.tiered.jcloud.OffloadFormatError: ledger 8: a damaged block",
            1,
            "ledger 8: a damaged block",
        ),
    ],
)
def test_an_executors_error_is_one_line_with_its_exit_code(
    last: str, code: int, message: str
) -> None:
    error = job_error(RuntimeError(WORKER.replace("{last}", last)))
    assert error.exit_code == code
    text = error.one_line()
    assert text.startswith(message)
    assert "org.apache" not in text and "Traceback" not in text and "SQLSTATE" not in text


def test_an_unknown_failure_is_still_one_line() -> None:
    error = job_error(RuntimeError(WORKER.replace("{last}", "ValueError: boom")))
    assert error.exit_code == 3 and error.one_line().startswith("the Spark job failed")


def test_splits_carry_the_s3_location_not_the_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    secrets = {
        "ACCESS_KEY_ID": "pulsar-key-id-1f2e",
        "ACCESS_KEY_SECRET": "pulsar-secret-9a8b",
        "AWS_ACCESS_KEY_ID": "aws-key-id-3c4d",
        "AWS_SECRET_ACCESS_KEY": "aws-secret-7e6f",
        "AWS_SESSION_TOKEN": "aws-token-5a5a",
    }
    for key, value in secrets.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("LEDGERCTL_S3_ENDPOINT", "http://s3.example:9000")
    monkeypatch.setenv("LEDGERCTL_OFFLOAD_URL", "s3://a-copy")
    plan = build_scan_plan("t", [(1, 3, 30)], bookie_dirs=["bk"], metadata_url="rocksdb://m")
    (split,) = plan.splits
    # the offload URL, the S3 endpoint, where to prefer, and the broker.conf the driver was
    # given (none here)
    assert split.tiered == ("s3://a-copy", "http://s3.example:9000", "tiered", None)
    data = pickle.dumps(plan)
    assert not [k for k, v in secrets.items() if v.encode() in data]
