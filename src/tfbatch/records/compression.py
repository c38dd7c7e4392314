"""CompressionType: hand splitters a decompressed, still streaming, view of an object."""

from __future__ import annotations

import gzip
import zlib
from typing import BinaryIO

from tfbatch.errors import ConfigError, RecordError

COMPRESSION_TYPES = (None, "Gzip")


def normalize_compression(compression: str | None) -> str | None:
    if compression is None or compression == "None":
        return None
    if compression.lower() == "gzip":
        return "Gzip"
    raise ConfigError(
        f"CompressionType {compression!r} is not supported: expected None or Gzip"
    )


class GunzipStream:
    """gzip.GzipFile that reports damage as RecordError naming the object.

    GzipFile raises three different exception types (BadGzipFile, EOFError, zlib.error)
    and only on the first read; callers want one error type with a readable message.
    """

    def __init__(self, stream: BinaryIO, source: str = ""):
        self._gz = gzip.GzipFile(fileobj=stream, mode="rb")
        self._source = source
        self.decompressed = 0  # bytes handed out so far, for error messages

    def read(self, n: int = -1) -> bytes:
        try:
            data = self._gz.read(n)
        except gzip.BadGzipFile as exc:
            if str(exc).startswith("Not a gzipped file"):
                raise RecordError(self._msg(f"not gzip data, but CompressionType is Gzip ({exc})"))
            raise RecordError(self._msg(f"corrupt gzip data ({exc})"))
        except EOFError as exc:
            raise RecordError(self._msg(f"truncated gzip stream ({exc})"))
        except zlib.error as exc:
            raise RecordError(self._msg(f"corrupt gzip data ({exc})"))
        self.decompressed += len(data)
        return data

    def _msg(self, what: str) -> str:
        name = f"{self._source}: " if self._source else ""
        return f"{name}{what} after {self.decompressed} decompressed bytes"

    def readable(self) -> bool:
        return True

    def close(self) -> None:
        self._gz.close()

    def __enter__(self) -> "GunzipStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_input(stream: BinaryIO, compression: str | None, *, source: str = "") -> BinaryIO:
    """The object's bytes as the model should see them: gunzipped for Gzip, else as they are."""
    kind = normalize_compression(compression)
    if kind is None:
        return stream
    return GunzipStream(stream, source)  # type: ignore[return-value]
