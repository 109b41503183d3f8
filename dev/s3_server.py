"""The S3 test server (moto in server mode, installed into .s3server/ by dev/services.sh) on a free loopback port,
for tests/test_s3_readers.py and bench/s3_readers.py."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from reprocess.connect_server import free_port

MOTO = Path(__file__).resolve().parents[1] / ".s3server" / "bin" / "moto_server"
KEY = "test"
REGION = "us-east-1"


def aws_env(endpoint: str) -> dict[str, str]:
    """The environment that points pyarrow's S3 filesystem (and any AWS SDK) at ``endpoint``."""
    return {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": KEY, "AWS_SECRET_ACCESS_KEY": KEY,
            "AWS_REGION": REGION, "AWS_EC2_METADATA_DISABLED": "true"}


def admin_filesystem(endpoint: str):  # noqa: ANN201 - pyarrow is imported lazily
    """pyarrow's S3 filesystem on ``endpoint`` that may also create buckets (the readers' may not)."""
    import pyarrow.fs as pafs

    return pafs.S3FileSystem(endpoint_override=endpoint, access_key=KEY, secret_key=KEY, region=REGION,
                             allow_bucket_creation=True)


@contextmanager
def running_s3_server(log: Path, start_timeout: float = 60.0) -> Iterator[str]:
    """A fresh server (nothing stored) from the moment it accepts connections until the block ends; its endpoint.
    Raises ``RuntimeError`` if it is not installed or does not start."""
    if not MOTO.exists():
        raise RuntimeError(f"{MOTO} is missing: `make services` (dev/services.sh) installs the S3 test server")
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen([str(MOTO), "-H", "127.0.0.1", "-p", str(port)], stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the S3 test server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
