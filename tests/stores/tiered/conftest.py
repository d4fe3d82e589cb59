"""A real S3 server (moto's) on loopback for the tiered-storage tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

SECRET = "not-a-real-secret-4c0ffee"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """A moto S3 server on loopback, one per test process (its first start costs seconds)."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def s3_endpoint(s3_server: str) -> Iterator[str]:
    """The S3 server, with credentials in the environment for this module."""
    with pytest.MonkeyPatch.context() as mp:
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", "/dev/null")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        # Pulsar's own variables, as the broker's S3 driver reads them
        mp.setenv("ACCESS_KEY_ID", "ledgerctl-test")
        mp.setenv("ACCESS_KEY_SECRET", SECRET)
        yield s3_server
