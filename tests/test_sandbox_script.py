"""scripts/sandbox's wait for the broker's compaction, on scripted admin answers (no cluster):
it asks again when the broker lost the compaction or its own client timed out, twice at
most, says so, and returns any other ending as it is."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.fixtures.sandbox import sandbox_script

TIMEOUT = (
    "org.apache.pulsar.client.api.PulsarClientException$TimeoutException: The subscription "
    "__compaction of the topic persistent://public/default/t gets the last message id was failed"
)
IOOBE = "java.lang.IndexOutOfBoundsException: dstIndex: 2169"


class Broker:
    """Answers GET with the next scripted status; records every call."""

    def __init__(self, statuses: list[dict[str, Any]]) -> None:
        self.statuses = list(statuses)
        self.calls: list[str] = []

    def __call__(self, method: str, path: str) -> dict[str, Any]:
        self.calls.append(method)
        if method == "PUT":
            return {}
        return self.statuses.pop(0)


def _wait(broker: Broker, timeout: float = 5) -> tuple[dict[str, Any], list[str]]:
    said: list[str] = []
    script = sandbox_script()
    status = script.broker_compaction(broker, "/persistent/p/t/compaction", timeout, said.append)
    return status, said


RUNNING = {"status": "RUNNING"}
SUCCESS = {"status": "SUCCESS"}


def test_a_lost_compaction_is_asked_again() -> None:
    broker = Broker([RUNNING, {"status": "NOT_RUN"}, RUNNING, SUCCESS])
    status, said = _wait(broker)
    assert status == SUCCESS
    assert broker.calls == ["PUT", "GET", "GET", "PUT", "GET", "GET"]
    assert len(said) == 1 and "lost it" in said[0]


def test_the_brokers_own_timeout_is_asked_again_and_the_real_error_returned() -> None:
    broker = Broker([RUNNING, {"status": "ERROR", "lastError": TIMEOUT}, RUNNING,
                     {"status": "ERROR", "lastError": IOOBE}])  # fmt: skip
    status, said = _wait(broker)
    assert status["lastError"] == IOOBE
    assert broker.calls.count("PUT") == 2
    assert len(said) == 1 and "TimeoutException" in said[0]


def test_an_error_of_the_topics_own_is_the_answer_at_once() -> None:
    broker = Broker([RUNNING, {"status": "ERROR", "lastError": IOOBE}])
    status, said = _wait(broker)
    assert status["lastError"] == IOOBE and said == [] and broker.calls.count("PUT") == 1


def test_twice_at_most() -> None:
    lost = {"status": "ERROR", "lastError": TIMEOUT}
    broker = Broker([lost, lost, lost])
    status, said = _wait(broker)
    assert status == lost and len(said) == 2 and broker.calls.count("PUT") == 3


def test_a_compaction_that_never_ends_is_an_error() -> None:
    script = sandbox_script()
    broker = Broker([RUNNING] * 1000)
    with pytest.raises(script.SandboxError, match="did not end within"):
        _wait(broker, timeout=0.5)
