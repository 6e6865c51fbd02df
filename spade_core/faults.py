"""One line for a store fault, whatever command met it (docs/DESIGN.md §4, "Store faults").

A full disk, a permission error, an S3 endpoint that went away or a damaged Parquet file ends a command
with ``error: what failed, on which path; what to do`` and exit code 1; the traceback is shown only with
``spade --debug`` or ``SPADE_DEBUG=1``. Anything that is not a store fault (a bug) keeps its traceback.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator

DEBUG_ENV = "SPADE_DEBUG"

_ERRNO_ADVICE = {
    errno.ENOSPC: ("no space left on device", "free space or use --store elsewhere"),
    errno.EDQUOT: ("disk quota exceeded", "free space or use --store elsewhere"),
    errno.EACCES: ("permission denied", "fix the permissions or use --store elsewhere"),
    errno.EPERM: ("operation not permitted", "fix the permissions or use --store elsewhere"),
    errno.EROFS: ("read-only file system", "use --store on a writable location"),
    errno.EIO: ("input/output error", "check the disk, then `spade verify RUN --deep`"),
    errno.EBUSY: ("the store is throttling requests (SlowDown) after retries", "wait, then `spade resume RUN`"),
}
_WRITING = (errno.ENOSPC, errno.EDQUOT)  # faults that only a write meets


def debugging() -> bool:
    """Whether tracebacks are wanted (``SPADE_DEBUG`` set to anything but empty or 0)."""
    return os.environ.get(DEBUG_ENV, "").strip() not in ("", "0")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, outermost first (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def fault_line(exc: BaseException) -> str | None:
    """The one-line message for a store fault anywhere in ``exc``'s chain, or None when it is none.

    >>> fault_line(OSError(errno.ENOSPC, "No space left on device", "/s/runs/demo/config.yaml"))
    'error: no space left on device writing /s/runs/demo/config.yaml; free space or use --store elsewhere'
    >>> fault_line(ValueError("a bug")) is None
    True
    """
    for item in _chain(exc):
        line = _describe(item)
        if line is not None:
            return f"error: {line}"
    return None


_PERMANENT_S3 = ("NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoCredentialsError")


def permanent(exc: BaseException) -> bool:
    """A store fault that a retry cannot fix (no space, permission, no such bucket, no credentials): a stage
    fails at once instead of backing off (transient ones are retried by the S3 client and the flow).

    >>> permanent(OSError(errno.ENOSPC, "No space left on device")), permanent(ConnectionResetError())
    (True, False)
    """
    for item in _chain(exc):
        if isinstance(item, OSError) and item.errno in _ERRNO_ADVICE and item.errno not in (errno.EIO, errno.EBUSY):
            return True
        name = type(item).__name__
        code = str((getattr(item, "response", None) or {}).get("Error", {}).get("Code", ""))
        if name in _PERMANENT_S3 or code in _PERMANENT_S3:
            return True
    return False


def _describe(exc: BaseException) -> str | None:
    if not isinstance(exc, OSError):
        return _describe_other(exc)
    if refused := s3_refusal(exc):
        return refused
    if _S3_CODE.search(str(exc)) and (exc.errno == errno.EIO or exc.errno not in _ERRNO_ADVICE):
        return s3_error_line(exc)  # S3's answer after the retries, not a disk's
    if isinstance(exc, OSError) and exc.errno in _ERRNO_ADVICE:
        what, advice = _ERRNO_ADVICE[exc.errno]
        verb = "writing" if exc.errno in _WRITING else "on"
        where = f" {verb} {exc.filename}" if exc.filename else ""
        endpoint = getattr(exc, "endpoint", None)  # an S3 store's error (spade_core.store.fs)
        return f"{what}{where}{f' at {endpoint}' if endpoint else ''}; {advice}"
    return _describe_other(exc)


class SaidFault(RuntimeError):
    """A failure whose message is already the one line to show (the trainer subprocess's: its step, its cause
    and where its whole output is); a store fault it was raised from (``__cause__``) still makes it
    permanent for the retries."""


def _describe_other(exc: BaseException) -> str | None:
    if isinstance(exc, SaidFault):
        return str(exc)
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if module.startswith("botocore") or module.startswith("aiobotocore"):
        return _describe_s3(exc, name)
    if name in ("ArrowInvalid", "ArrowIOError") or "magic bytes" in str(exc).lower():
        return f"a stored file is damaged ({_first_line(exc)}); find it with `spade verify RUN --deep --repair`"
    return None


def s3_refusal(exc: BaseException) -> str | None:
    """The line for S3's bare 403 (s3fs raises it as ``PermissionError`` with no number and no message, which
    reads ``[Errno None] None: 's3://…'``), or None for any other error.

    >>> s3_refusal(PermissionError(None, None, "s3://denied/store/runs"))
    "S3 refused access (403) to s3://denied/store/runs; check the bucket's policy and the credentials"
    >>> s3_refusal(PermissionError(13, "Permission denied", "/s/x")) is None
    True
    """
    if not isinstance(exc, PermissionError) or exc.errno is not None or not str(exc.filename or "").startswith("s3://"):
        return None
    endpoint = getattr(exc, "endpoint", None)
    where = f" at {endpoint}" if endpoint else ""
    return f"S3{where} refused access (403) to {exc.filename}; check the bucket's policy and the credentials"


_S3_CODE = re.compile(r"An error occurred \((?P<code>[^)]+)\) when calling the (?P<operation>\w+) operation")


def s3_error_line(exc: OSError) -> str:
    """The one line for an S3 request that failed after the retries: the S3 answer, the object, the endpoint
    (:func:`spade_core.store.fs.s3_filesystem` puts the last two on the error), and what to do.

    >>> err = OSError(5, "An error occurred (ServiceUnavailable) when calling the GetObject operation: Please "
    ...     "reduce your request rate.")
    >>> err.filename, err.endpoint = "s3://b/store/tables/x.parquet", "http://127.0.0.1:9000"
    >>> s3_error_line(err)  # doctest: +NORMALIZE_WHITESPACE
    'S3 at http://127.0.0.1:9000 answered ServiceUnavailable to GetObject s3://b/store/tables/x.parquet after
    retries; the endpoint is overloaded or down: wait or check it, then try again (a run: `spade resume RUN`)'
    """
    text = str(exc.strerror or exc)
    found = _S3_CODE.search(text)
    code, operation = (found["code"], found["operation"]) if found else (text.splitlines()[0][:120], "a request")
    what = exc.filename or "the store"
    endpoint = getattr(exc, "endpoint", None) or "the S3 endpoint"
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "NoSuchBucket"):
        advice = "check the bucket and the credentials"
    else:
        advice = "the endpoint is overloaded or down: wait or check it, then try again (a run: `spade resume RUN`)"
    return f"S3 at {endpoint} answered {code} to {operation} {what} after retries; {advice}"


def _describe_s3(exc: BaseException, name: str) -> str | None:
    if name in ("EndpointConnectionError", "ConnectTimeoutError", "ConnectionClosedError", "ReadTimeoutError"):
        return (
            f"the S3 endpoint is not answering ({_first_line(exc)}) after retries; check the endpoint "
            "(AWS_ENDPOINT_URL / store.endpoint_url) and the network, then `spade resume RUN`"
        )
    if name in ("NoCredentialsError", "PartialCredentialsError"):
        return "no AWS credentials for the S3 store; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
    if name == "ClientError":
        response = getattr(exc, "response", {}) or {}
        code = str(response.get("Error", {}).get("Code", "error"))
        return f"S3 answered {code} ({_first_line(exc)}); check the bucket and credentials, then `spade resume RUN`"
    return None
