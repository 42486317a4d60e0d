"""The shipped catalog from a validated on-disk cache that owns only its own files.

Without user catalogs, the shipped catalog comes from an on-disk cache when one matches: parsing the
YAML with line numbers is 90% of loading (about 0.09 s of a 0.45 s ``validate``), rebuilding the rows
from JSON about 3 ms. Where it lives (:func:`cache_dir`): the folder ``clusterplan-catalog`` inside
``$CLUSTERPLAN_CACHE_DIR``, else inside ``$XDG_CACHE_HOME/clusterplan`` (``~/.cache/clusterplan``);
``CLUSTERPLAN_NO_CACHE=1`` (or ``CLUSTERPLAN_CACHE_DIR=off``) turns it off. The cache touches nothing else:

- Its files are ``catalog-<16 hex digits>.json`` in its own folder, each opening with a marker line
  (:data:`MARKER`); pruning removes only files of that name that carry the marker, so a folder of the
  user's (``catalog-user1.json``) is never emptied.
- A file is written only after the shipped files passed every check, keyed by the sha256 of those
  files' bytes (computed at load, :func:`shipped_key`) and the package version, and sealed with an
  HMAC-SHA256 of the key and the catalog under a random secret (``key``, created once, readable by its
  owner only, trusted only when this user owns it and no one else can read or write it). A cache whose
  seal does not check (edited, even with its inner fingerprint recomputed; written by someone else;
  stale; corrupt) is ignored and rewritten, never an error. Its rows are validated again when read.

With user catalogs the shipped YAML is parsed as before, so every problem is still located in its file.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from clusterplan.catalog.load import ROW_TABLES, SECTIONS, SHIPPED_FILES, SHIPPED_PACKAGE, Catalog
from clusterplan.catalog.schema import OwnedCosts

M = TypeVar("M", bound=BaseModel)

CACHE_ENV = "CLUSTERPLAN_CACHE_DIR"
NO_CACHE_ENV = "CLUSTERPLAN_NO_CACHE"
CACHE_OFF = ("off", "0", "no", "false", "none")
CACHE_FOLDER = "clusterplan-catalog"  # the cache's own folder inside the cache root
CACHE_FORMAT = 4  # bumped when the cache file's layout changes
CACHE_PREFIX = "catalog-"  # one file per key: checkouts or versions side by side do not evict each other
CACHE_NAME = re.compile(r"catalog-[0-9a-f]{16}\.json")
CACHE_KEEP = 4  # files kept in the folder; the least recently written go first
MARKER = b'{"written_by":"clusterplan catalog cache"'  # how every cache file opens
SECRET_FILE = "key"
SECRET_BYTES = 32


def cache_root() -> Path | None:
    """The folder clusterplan keeps caches in: ``$CLUSTERPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/clusterplan``
    (by default ``~/.cache/clusterplan``); None when caching is off (``CLUSTERPLAN_NO_CACHE`` set to anything but
    ``0``, or ``CLUSTERPLAN_CACHE_DIR`` empty or ``off``)."""
    if os.environ.get(NO_CACHE_ENV, "").strip().lower() not in ("", *CACHE_OFF):
        return None
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in (*CACHE_OFF, "") else Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores a relative path
    return base / "clusterplan"


def cache_dir() -> Path | None:
    """The catalog cache's own folder (``clusterplan-catalog`` in :func:`cache_root`), None when caching is off."""
    root = cache_root()
    return None if root is None else root / CACHE_FOLDER


def shipped_key() -> str:
    """sha256 (hex) of the package version and every shipped catalog file's bytes: the cache's key."""
    from clusterplan import __version__

    h = hashlib.sha256(f"clusterplan {__version__} cache {CACHE_FORMAT}\n".encode())
    package = resources.files(SHIPPED_PACKAGE)
    for section in SECTIONS:
        data = package.joinpath(SHIPPED_FILES[section]).read_bytes()
        h.update(f"{SHIPPED_FILES[section]} {len(data)}\n".encode())
        h.update(data)
    return h.hexdigest()


def _owned_privately(st: os.stat_result) -> bool:
    """A regular file of this user that no one else may read or write."""
    uid = getattr(os, "getuid", None)
    mine = uid is None or st.st_uid == uid()
    return stat.S_ISREG(st.st_mode) and mine and not st.st_mode & 0o077


def _secret(directory: Path, *, create: bool) -> bytes | None:
    """The folder's sealing secret: read when this user owns it privately; else, with ``create``, a new one."""
    path = directory / SECRET_FILE
    with contextlib.suppress(OSError, ValueError):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        with os.fdopen(fd, "rb") as f:
            if _owned_privately(os.fstat(f.fileno())):
                data = bytes.fromhex(f.read(4 * SECRET_BYTES).decode("ascii"))
                if len(data) == SECRET_BYTES:
                    return data
    if not create:
        return None
    data = secrets.token_bytes(SECRET_BYTES)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".key-", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "w", encoding="ascii") as f:
            f.write(data.hex())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return data


def _seal(secret: bytes, key: str, body: bytes) -> str:
    return hmac.new(secret, key.encode("ascii") + b"\n" + body, hashlib.sha256).hexdigest()


def _cache_document(cat: Catalog) -> dict[str, Any]:
    """The catalog as JSON values, rows in the catalog's own order (it decides candidate order)."""
    doc: dict[str, Any] = {}
    for name, _ in ROW_TABLES:
        doc[name] = [[k, v.model_dump(mode="json")] for k, v in getattr(cat, name).items()]
    doc["owned"] = cat.owned.model_dump(mode="json")
    return doc


def _rows(doc: dict[str, Any], section: str, model: type[M]) -> dict[str, M]:
    return {str(k): model.model_validate(v) for k, v in doc[section]}


def _from_cache_document(doc: Any) -> Catalog | None:
    """The catalog a (sealed) cache document holds, every row validated."""
    if not isinstance(doc, dict):
        return None
    tables: dict[str, Any] = {name: _rows(doc, name, model) for name, model in ROW_TABLES}
    return Catalog(owned=OwnedCosts.model_validate(doc["owned"]), **tables)


def cache_file(key: str) -> str:
    """The cache file's name for ``key`` (its first 16 hex digits; the file names the whole key)."""
    return f"{CACHE_PREFIX}{key[:16]}.json"


def read_cached_catalog(directory: Path, key: str) -> Catalog | None:
    """The cached shipped catalog in ``directory`` if it is for ``key`` and its seal checks under this folder's
    secret; None otherwise, never an error."""
    try:
        secret = _secret(directory, create=False)
        if secret is None:
            return None
        header_line, _, body = (directory / cache_file(key)).read_bytes().partition(b"\n")
        if not header_line.startswith(MARKER):
            return None
        header = json.loads(header_line)
        if header.get("format") != CACHE_FORMAT or header.get("key") != key:
            return None  # another layout, version or set of shipped files: stale
        if not hmac.compare_digest(str(header.get("seal")), _seal(secret, key, body)):
            return None  # edited, or sealed under another secret: not ours to trust
        return _from_cache_document(json.loads(body))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, unreadable or corrupt (pydantic's ValidationError is a ValueError)


def write_cached_catalog(directory: Path, key: str, cat: Catalog) -> None:
    """Write the cache atomically (a temporary file renamed over the old one), then drop all but the
    ``CACHE_KEEP`` most recently written of its own files; any failure is ignored."""
    body = json.dumps(_cache_document(cat), separators=(",", ":"), ensure_ascii=True).encode("ascii")
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        secret = _secret(directory, create=True)
        assert secret is not None
        header = MARKER + f',"format":{CACHE_FORMAT},"key":"{key}","seal":"{_seal(secret, key, body)}"}}'.encode()
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".catalog-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(header + b"\n" + body)
            os.replace(tmp, directory / cache_file(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _prune(directory)
    except OSError:
        return  # a read-only or full disk: the next run parses the YAML again


def _ours(path: Path) -> bool:
    """A file this cache wrote: its name and its opening marker."""
    try:
        if not CACHE_NAME.fullmatch(path.name) or not stat.S_ISREG(path.lstat().st_mode):
            return False  # another name, a link, a folder: not a file this cache wrote
        with path.open("rb") as f:
            return f.read(len(MARKER)) == MARKER
    except OSError:
        return False


def _prune(directory: Path) -> None:
    """Remove all but the ``CACHE_KEEP`` newest of the cache's own files (another process may remove them first)."""
    files = []
    for path in directory.glob(f"{CACHE_PREFIX}*.json"):
        with contextlib.suppress(OSError):
            if _ours(path):
                files.append((path.stat().st_mtime, path.name, path))
    for _, _, path in sorted(files, reverse=True)[CACHE_KEEP:]:
        with contextlib.suppress(OSError):
            path.unlink()
