"""Page requests on s3fs without its retry wrapper: one GET per read, one HEAD per existence check, one
PUT per write; a request the server answers with an error of its own (HTTP 5xx) is sent once more.

s3fs's own calls go through its ``_error_wrapper``, which sleeps 0.1 s after a retryable error (a
dropped connection, a read timeout) even when no attempt follows: with the backend's one attempt
that is 0.1 s per failing request, 0.2 s per read (``_cat_file`` wraps a wrapped call). Its
``_cat_file`` also sends a HEAD before the GET (to size a concurrent download) unless
``max_concurrency`` is 1, and its ``_info`` of a missing key lists the prefix after the HEAD's 404
(the path might be a directory). These calls use the filesystem's own aiobotocore client and
request arguments (endpoint, credentials, ``s3_additional_kwargs``, requester-pays) and translate
errors as s3fs does: a missing key is :class:`FileNotFoundError`, a refused one
:class:`PermissionError`, other answers :class:`OSError`; connection errors and timeouts are
raised as botocore raises them.

The one retry is for 5xx answers only (S3 asks clients to retry ``InternalError`` and ``SlowDown``;
AWS SDKs do by default): a live server answered, so it costs one round trip, and a page is not
turned into a miss by one bad answer. Faults of the connection are left to the SDK's resilience
policy. Records of :data:`MULTIPART_BYTES` or more go through s3fs's ``_pipe_file`` (a multipart
upload).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["MULTIPART_BYTES", "S3PageRequests"]

#: Smallest record s3fs's ``_pipe_file`` would upload in parts (twice its 50 MiB default part size).
MULTIPART_BYTES = 100 << 20


class S3PageRequests:
    """GET, HEAD and PUT of whole page records on the s3fs filesystem ``fs`` (coroutines on its loop).

    ``on_retry()`` is called for every request sent again after a 5xx answer.
    """

    def __init__(self, fs: Any, on_retry: Callable[[], None]) -> None:
        self._fs = fs
        self._on_retry = on_retry

    async def get(self, path: str) -> bytes:
        """The whole object at ``path``."""
        response = await self._send("get_object", path)
        body = response["Body"]
        try:
            return bytes(await body.read())
        finally:
            body.close()

    async def size(self, path: str) -> int:
        """Size in bytes of the object at ``path`` (one HEAD)."""
        response = await self._send("head_object", path)
        return int(response["ContentLength"])

    async def put(self, path: str, data: bytes) -> None:
        """Store ``data`` as the object at ``path`` (replacing it whole)."""
        if len(data) >= MULTIPART_BYTES:
            await self._fs._pipe_file(path, data)
            return
        await self._send("put_object", path, Body=data)
        self._fs.invalidate_cache(path)

    async def _send(self, operation: str, path: str, **extra: Any) -> Any:
        from botocore.exceptions import ClientError  # s3fs's dependency
        from s3fs.errors import translate_boto_error

        fs = self._fs
        bucket, key, version = fs.split_path(path)
        request: dict[str, Any] = {"Bucket": bucket, "Key": key, **extra}
        if version and operation != "put_object":
            request["VersionId"] = version
        await fs.set_session()
        client = await fs.get_s3(bucket)
        method = getattr(client, operation)
        arguments = fs._get_s3_method_kwargs(method, **request)
        try:
            return await method(**arguments)
        except ClientError as error:
            if not _server_error(error):
                raise translate_boto_error(error) from error
        self._on_retry()
        try:
            return await method(**arguments)
        except ClientError as error:
            raise translate_boto_error(error) from error


def _server_error(error: Any) -> bool:
    """Whether a botocore ``ClientError`` is an HTTP 5xx answer."""
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    return isinstance(status, int) and status >= 500
