"""The raw client ``hicache-storage bench s3`` compares the backend with: boto3, no SDK.

The client is built exactly as the backend builds its own (same endpoint, credentials, region,
addressing style, timeouts, connection pool of ``max_workers``) and each batch runs on a thread
pool of ``max_workers``, one request per key: ``put_object`` of the page (boto3 takes ``bytes``, so
each buffer is copied once, as the backend's record is), ``get_object`` read and copied into the
buffer (a hit only when the object has the buffer's size), ``head_object``. No record header, no
checksum, no fan-out, no key space. Objects are ``<prefix>/raw-baseline/<key>``, a folder no page
record is ever stored in.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from botocore.exceptions import ClientError

from hicache_storage.plugin.vectored_io import flat_view

from .client import make_client, not_found
from .options import S3Options

__all__ = ["RAW_FOLDER", "RawS3"]

#: Folder under ``prefix`` holding every object the raw client writes.
RAW_FOLDER = "raw-baseline"
_DELETE_BATCH = 1000


class RawS3:
    """boto3 calls under ``<prefix>/raw-baseline/``; a :class:`~hicache_storage.plugin.RawBaseline`.

    ``close()`` deletes every object this client wrote, then closes the client.
    """

    def __init__(self, client: Any, bucket: str, root: str, max_workers: int) -> None:
        self.client = client
        self.bucket = bucket
        self.folder = f"{root}/{RAW_FOLDER}/" if root else f"{RAW_FOLDER}/"
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="hicache-s3-raw")
        self._written: set[str] = set()

    @classmethod
    def from_options(cls, options: S3Options, timeout_s: float) -> RawS3:
        """The client the backend would build (``timeout_s`` of the options, else ``timeout_s``)."""
        client = make_client(options, options.timeout_s or timeout_s)
        return cls(client, options.bucket, options.root, options.max_workers)

    def key(self, key: str) -> str:
        """The object key the raw client uses for ``key``."""
        return self.folder + key

    def set(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        names = [self.folder + key for key in keys]

        def put(item: tuple[str, memoryview]) -> bool:
            self.client.put_object(Bucket=self.bucket, Key=item[0], Body=bytes(flat_view(item[1])))
            return True

        results = list(self._pool.map(put, zip(names, buffers, strict=True)))
        self._written.update(names)
        return results

    def get(self, keys: Sequence[str], buffers: Sequence[memoryview]) -> list[bool]:
        def fetch(item: tuple[str, memoryview]) -> bool:
            try:
                response = self.client.get_object(Bucket=self.bucket, Key=self.folder + item[0])
            except ClientError as error:
                if not_found(error):
                    return False
                raise
            value = response["Body"].read()
            view = flat_view(item[1])
            if len(value) != view.nbytes:
                return False
            view[:] = value
            return True

        return list(self._pool.map(fetch, zip(keys, buffers, strict=True)))

    def exists(self, keys: Sequence[str]) -> list[bool]:
        def head(key: str) -> bool:
            try:
                self.client.head_object(Bucket=self.bucket, Key=self.folder + key)
            except ClientError as error:
                if not_found(error):
                    return False
                raise
            return True

        return list(self._pool.map(head, keys))

    def close(self) -> None:
        """Delete every object this client wrote, then close the client."""
        names = sorted(self._written)
        for begin in range(0, len(names), _DELETE_BATCH):
            chunk = names[begin : begin + _DELETE_BATCH]
            self.client.delete_objects(
                Bucket=self.bucket, Delete={"Objects": [{"Key": name} for name in chunk], "Quiet": True}
            )
        self._written.clear()
        self._pool.shutdown(wait=True)
        self.client.close()
