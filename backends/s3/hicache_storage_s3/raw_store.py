"""Direct access to stored records, bypassing the backend (for inspection tools and tests)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any

from botocore.exceptions import ClientError

__all__ = ["S3RawStore"]


class S3RawStore(MutableMapping[str, bytes]):
    """Storage key → stored record bytes, read and written with the raw boto3 client."""

    def __init__(
        self, client: Any, bucket: str, object_key: Callable[[str], str], list_keys: Callable[[], list[str]]
    ) -> None:
        self._client = client
        self._bucket = bucket
        self._object_key = object_key
        self._list_keys = list_keys

    def __getitem__(self, key: str) -> bytes:
        try:
            response = self._client.get_object(Bucket=self._bucket, Key=self._object_key(key))
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                raise KeyError(key) from None
            raise
        return bytes(response["Body"].read())

    def __setitem__(self, key: str, value: bytes) -> None:
        self._client.put_object(Bucket=self._bucket, Key=self._object_key(key), Body=bytes(value))

    def __delitem__(self, key: str) -> None:
        if key not in self:
            raise KeyError(key)
        self._client.delete_object(Bucket=self._bucket, Key=self._object_key(key))

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        try:
            self._client.head_object(Bucket=self._bucket, Key=self._object_key(key))
        except ClientError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        for name in self._list_keys():
            yield name.rsplit("/", 1)[-1]

    def __len__(self) -> int:
        return len(self._list_keys())
