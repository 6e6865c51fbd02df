"""The project's filesystems: the one S3 factory (with retries) and a read-only view for ad-hoc queries.

The S3 endpoint is ``endpoint_url`` when given, else the standard ``AWS_ENDPOINT_URL`` variable, else AWS;
credentials come from the standard AWS variables and are never passed around or stored (docs/DESIGN.md §4).

**Retries** (docs/DESIGN.md §12). Every command reaches S3 through :func:`s3_filesystem`, so every read and
write of the store, the corpora and the catalog is retried by two layers of the libraries themselves:

- botocore's ``standard`` retry mode, on each request: a dropped or refused connection, a timeout, an HTTP
  500/502/503/504 and a throttling code (``SlowDown``, ``Throttling``, ...) are retried up to
  :data:`MAX_ATTEMPTS` attempts in all, with jittered exponential backoff (a random wait up to 1, 2, 4, ... s);
  the standard ``AWS_MAX_ATTEMPTS`` and ``AWS_RETRY_MODE`` variables override both;
- s3fs's own loop around each call, :data:`S3FS_RETRIES` tries in all, for what botocore cannot see: a
  connection dropped while a response body is being read (``IncompleteRead``, ``ClientPayloadError``), a
  garbled response, and whatever botocore gave up on (connection errors, ``SlowDown``).

Permanent errors are never retried by either layer: a missing bucket or key (404), access denied (403)
and every other 4xx answer fail on the first answer.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import posixpath
from typing import TYPE_CHECKING, Any

import fsspec

if TYPE_CHECKING:
    import s3fs

MAX_ATTEMPTS = 5
"""Attempts per S3 request in botocore's retry loop (the first try included)."""
S3FS_RETRIES = 3
"""Tries per filesystem call in s3fs's loop around botocore (the first included)."""
CONNECT_TIMEOUT_S = 5
"""Seconds to open a connection before the attempt counts as failed (then retried)."""
READ_TIMEOUT_S = 30
"""Seconds without a byte from an open connection before the attempt counts as failed (then retried)."""


def s3_endpoint(endpoint_url: str | None = None) -> str | None:
    """``endpoint_url``, else ``$AWS_ENDPOINT_URL``, else None (AWS itself); blank values count as unset."""
    return (endpoint_url or "").strip() or os.environ.get("AWS_ENDPOINT_URL", "").strip() or None


def retry_config(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """botocore's client settings for the store: standard retries, bounded attempts and timeouts.

    ``AWS_MAX_ATTEMPTS`` (attempts in all) and ``AWS_RETRY_MODE`` (``standard``, ``adaptive``, ``legacy``)
    override the defaults, as they do for every AWS SDK.

    >>> retry_config({})
    {'retries': {'mode': 'standard', 'total_max_attempts': 5}, 'connect_timeout': 5, 'read_timeout': 30}
    >>> retry_config({"AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "adaptive"})["retries"]
    {'mode': 'adaptive', 'total_max_attempts': 2}
    >>> retry_config({"AWS_MAX_ATTEMPTS": "none"})
    Traceback (most recent call last):
    ...
    ValueError: AWS_MAX_ATTEMPTS must be an integer >= 1, got 'none'
    """
    env = os.environ if environ is None else environ
    attempts_text = env.get("AWS_MAX_ATTEMPTS", "").strip() or str(MAX_ATTEMPTS)
    if not attempts_text.isdigit() or int(attempts_text) < 1:
        raise ValueError(f"AWS_MAX_ATTEMPTS must be an integer >= 1, got {attempts_text!r}")
    mode = env.get("AWS_RETRY_MODE", "").strip() or "standard"
    return {
        "retries": {"mode": mode, "total_max_attempts": int(attempts_text)},
        "connect_timeout": CONNECT_TIMEOUT_S,
        "read_timeout": READ_TIMEOUT_S,
    }


def s3_filesystem(endpoint_url: str | None = None) -> s3fs.S3FileSystem:
    """A fresh (never cached) s3fs filesystem on :func:`s3_endpoint`'s endpoint, retrying transient errors.

    Its errors name the object and the endpoint: the ``OSError`` s3fs raises once the retries are spent
    carries the ``s3://bucket/key`` it was about as its ``filename`` and the endpoint as ``endpoint``, so the
    one line of :mod:`spade_core.faults` can say which object on which endpoint failed.
    """
    endpoint = s3_endpoint(endpoint_url)
    fs = _named_errors_s3fs()(endpoint_url=endpoint, skip_instance_cache=True, config_kwargs=retry_config())
    fs.retries = S3FS_RETRIES  # a class attribute in s3fs, not a constructor argument
    fs.spade_endpoint = endpoint or "AWS S3"
    return fs


@functools.cache
def _named_errors_s3fs() -> type[s3fs.S3FileSystem]:
    import s3fs

    class NamedErrorsS3FileSystem(s3fs.S3FileSystem):  # type: ignore[misc]
        """s3fs whose errors name the object they were about and the endpoint (see :func:`s3_filesystem`)."""

        spade_endpoint = "AWS S3"

        async def _call_s3(self, method: Any, *akwarglist: Any, **kwargs: Any) -> Any:
            try:
                return await super()._call_s3(method, *akwarglist, **kwargs)
            except OSError as exc:
                params = {k: v for d in akwarglist if isinstance(d, dict) for k, v in d.items()} | kwargs
                if exc.filename is None and params.get("Bucket"):
                    key = params.get("Key") or params.get("Prefix") or ""
                    exc.filename = f"s3://{params['Bucket']}/{key}".rstrip("/")
                if not hasattr(exc, "endpoint"):
                    exc.endpoint = self.spade_endpoint  # type: ignore[attr-defined]
                raise

    return NamedErrorsS3FileSystem


def strict_glob(fs: fsspec.AbstractFileSystem, pattern: str, *, dirs: bool = False) -> list[str]:
    """The files (``dirs``: the directories) matching ``pattern`` (``*``, ``?`` and ``[...]`` within one path
    component, the last one among them; no ``**``), in name order, found by one listing per matched directory.

    fsspec's own ``glob`` walks with ``on_error="omit"``: a listing that fails (an S3 503 that outlasts the
    retries, a permission error) counts as an empty directory, and a reader would answer from part of the
    store without a word. Here only a missing directory counts as empty; every other error is raised.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("gen=1/stages/a.json", "gen=2/stages/b.json", "gen=2/other/c.json"):
    ...     (root / name).parent.mkdir(parents=True, exist_ok=True); _ = (root / name).write_text("{}")
    >>> [p.removeprefix(str(root)) for p in strict_glob(fsspec.filesystem("file"), f"{root}/gen=*/stages/*.json")]
    ['/gen=1/stages/a.json', '/gen=2/stages/b.json']
    >>> strict_glob(fsspec.filesystem("file"), f"{root}/gen=9/*/*.json")
    []
    >>> [p.removeprefix(str(root)) for p in strict_glob(fsspec.filesystem("file"), f"{root}/gen=2/*", dirs=True)]
    ['/gen=2/other', '/gen=2/stages']
    >>> import shutil; shutil.rmtree(root)
    """
    parts = fs._strip_protocol(pattern).split("/")
    if "**" in pattern or not glob_magic(parts[-1]):
        raise ValueError(f"strict_glob needs a wildcard in the last component and no '**': {pattern!r}")
    first = next(i for i, part in enumerate(parts) if glob_magic(part))
    found = ["/".join(parts[:first]) or "/"]
    for depth in range(first, len(parts)):
        last, part, matched = depth == len(parts) - 1, parts[depth], []
        for directory in found:
            if not glob_magic(part):
                matched.append(posixpath.join(directory, part))
                continue
            try:
                entries = fs.ls(directory, detail=True)
            except FileNotFoundError:
                continue
            for entry in entries:
                name = str(entry["name"]).rstrip("/")
                wanted = "file" if last and not dirs else "directory"
                if entry.get("type") == wanted and fnmatch.fnmatchcase(posixpath.basename(name), part):
                    matched.append(name)
        found = matched
    return sorted(set(found))


def glob_magic(part: str) -> bool:
    """Whether a path component holds a wildcard."""
    return any(char in part for char in "*?[")


class ReadOnlyError(PermissionError):
    """A write, removal or rename tried through a :class:`ReadOnlyFileSystem`."""


class ReadOnlyFileSystem(fsspec.AbstractFileSystem):
    """A view of another fsspec filesystem that can list and read but never change a file.

    DuckDB's ``register_filesystem`` reaches a store through it, so an ad-hoc query can read every table
    but cannot write, remove or rename anything there (docs/DESIGN.md §12). ``protocol`` is the URL
    scheme DuckDB routes to it: ``s3`` for an S3 store, a scheme of its own for a local one (paths keep
    the scheme; it is stripped before the inner filesystem sees them).

    >>> ro = ReadOnlyFileSystem(fsspec.filesystem("memory"), "spadero")
    >>> ro.fs.pipe_file("/t/a.txt", b"hi")
    >>> ro.cat_file("spadero:///t/a.txt"), ro.glob("spadero:///t/*.txt")
    (b'hi', ['/t/a.txt'])
    >>> ro.open("spadero:///t/b.txt", "wb")
    Traceback (most recent call last):
    ...
    spade_core.store.fs.ReadOnlyError: read-only: cannot write spadero:///t/b.txt
    """

    cachable = False

    def __init__(self, fs: fsspec.AbstractFileSystem, protocol: str, root: str | None = None) -> None:
        super().__init__()
        self.fs = fs
        self.protocol = (protocol,)  # per instance: DuckDB routes the paths of this scheme here
        self._prefix = f"{protocol}://"
        self._root = root  # a local store's resolved root: a file is read only if it really lies under it

    def _inner(self, path: str) -> str:
        path = str(path)
        if self._prefix != "s3://" and path.startswith(self._prefix):
            return path[len(self._prefix) :]
        return path

    def _strip_protocol(self, path):  # type: ignore[no-untyped-def,override]
        return self.fs._strip_protocol(self._inner(path))

    def unstrip_protocol(self, name: str) -> str:
        return self._prefix + self._inner(name).removeprefix(self._prefix)

    # -- reading: delegated -------------------------------------------------------------------------
    def open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
        if any(flag in mode for flag in "wax+"):
            raise ReadOnlyError(f"read-only: cannot write {path}")
        inner = self._inner(path)
        if self._root is not None and not os.path.realpath(inner).startswith(self._root.rstrip("/") + "/"):
            raise PermissionError(f"symbolic link refused: {inner} leads out of the store {self._root}")
        return self.fs.open(inner, mode, **kwargs)

    def _open(self, path, mode="rb", **kwargs):  # type: ignore[no-untyped-def]
        return self.open(path, mode, **kwargs)

    def ls(self, path, detail=True, **kwargs):  # type: ignore[no-untyped-def]
        return self.fs.ls(self._inner(path), detail=detail, **kwargs)

    def info(self, path, **kwargs):  # type: ignore[no-untyped-def]
        return self.fs.info(self._inner(path), **kwargs)

    def glob(self, path, maxdepth=None, **kwargs):  # type: ignore[no-untyped-def]
        return self.fs.glob(self._inner(path), maxdepth=maxdepth, **kwargs)

    def find(self, path, maxdepth=None, withdirs=False, detail=False, **kwargs):  # type: ignore[no-untyped-def]
        return self.fs.find(self._inner(path), maxdepth=maxdepth, withdirs=withdirs, detail=detail, **kwargs)

    def exists(self, path, **kwargs):  # type: ignore[no-untyped-def]
        return self.fs.exists(self._inner(path), **kwargs)

    def isdir(self, path):  # type: ignore[no-untyped-def]
        return self.fs.isdir(self._inner(path))

    def isfile(self, path):  # type: ignore[no-untyped-def]
        return self.fs.isfile(self._inner(path))

    def size(self, path):  # type: ignore[no-untyped-def]
        return self.fs.size(self._inner(path))

    def modified(self, path):  # type: ignore[no-untyped-def]
        return self.fs.modified(self._inner(path))

    def cat_file(self, path, start=None, end=None, **kwargs):  # type: ignore[no-untyped-def]
        return self.fs.cat_file(self._inner(path), start=start, end=end, **kwargs)

    # -- changing: refused --------------------------------------------------------------------------
    def _refuse(self, path: object, *_: object, **__: object) -> None:
        raise ReadOnlyError(f"read-only: cannot change {path}")

    mkdir = makedirs = rm = rm_file = rmdir = touch = pipe_file = put_file = _refuse
    cp_file = mv = copy = put = pipe = move = rename = _refuse
