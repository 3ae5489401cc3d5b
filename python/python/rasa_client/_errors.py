"""The exceptions of rasa_client: every failure is a ``RasaError`` (never an integer code).

Each also derives from the built-in it resembles, so generic handlers work too:
``NotFound`` is a ``KeyError``, ``Timeout`` a ``TimeoutError``, ``Unreachable`` a
``ConnectionError``, ``BufferTooSmall`` and ``InvalidRequest`` ``ValueError``\\ s.
"""

from __future__ import annotations

__all__ = [
    "RasaError",
    "NotFound",
    "InvalidRequest",
    "PreconditionFailed",
    "PayloadTooLarge",
    "RangeNotSatisfiable",
    "InsufficientStorage",
    "Busy",
    "Unauthorized",
    "Forbidden",
    "OriginError",
    "Unreachable",
    "Timeout",
    "FastPathUnavailable",
    "ProtocolError",
    "ConfigError",
    "BufferTooSmall",
]


class RasaError(Exception):
    """A call to the gateway failed.

    Attributes:
        status: the HTTP status the gateway answered, or ``None`` when it did not answer.
        code: a stable short name of the failure (the gateway's problem code, such as
            ``"not_found"``, or ``"timeout"``, ``"unreachable"``, ``"fast_path_unavailable"``).
        detail: what the gateway (or the SDK) said about it.
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str = "error",
        detail: str = "",
        needed: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.code = code
        self.detail = detail or message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return (type(self), (self.message, self.status, self.code, self.detail))


class NotFound(RasaError, KeyError):
    """The key has no current version (404)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class InvalidRequest(RasaError, ValueError):
    """The gateway refused the request as malformed (an invalid key, version or body)."""


class PreconditionFailed(RasaError):
    """A condition of the request did not hold (412)."""


class PayloadTooLarge(RasaError):
    """The value is larger than the gateway accepts (413)."""


class RangeNotSatisfiable(RasaError):
    """The byte range lies outside the value (416)."""


class InsufficientStorage(RasaError):
    """The gateway's memory is full of leased values (507)."""


class Busy(RasaError):
    """The gateway is overloaded or unavailable (503); retrying later may work."""


class Unauthorized(RasaError):
    """No valid token was sent (401)."""


class Forbidden(RasaError):
    """The token's scopes do not allow this call (403)."""


class OriginError(RasaError):
    """The gateway's origin (S3) failed or timed out (502/504)."""


class Unreachable(RasaError, ConnectionError):
    """The gateway could not be reached, or the connection failed."""


class Timeout(RasaError, TimeoutError):
    """The gateway did not answer, or stopped making progress, within a timeout."""


class FastPathUnavailable(RasaError):
    """A one-sided read was required (``fast_path="required"``) and could not be done."""


class ProtocolError(RasaError):
    """The gateway answered something the SDK does not understand (or wrong bytes)."""


class ConfigError(RasaError, ValueError):
    """The client could not be built as configured (an unreadable CA file, a bad token)."""


class BufferTooSmall(RasaError, ValueError):
    """The output buffer cannot hold the value.

    Attributes:
        needed: the value's length in bytes (``None`` when the gateway did not say it
            up front).
    """

    def __init__(
        self,
        message: str,
        status: int | None = None,
        code: str = "buffer_too_small",
        detail: str = "",
        needed: int | None = None,
    ) -> None:
        super().__init__(message, status, code, detail)
        self.needed = needed

    def __reduce__(self):
        return (type(self), (self.message, self.status, self.code, self.detail, self.needed))
