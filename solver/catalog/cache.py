"""The shipped catalog from a validated on-disk cache.

Without user catalogs, the shipped catalog comes from an on-disk cache when one matches: parsing the
YAML with line numbers is 90% of loading (about 0.09 s of a 0.45 s ``validate``), rebuilding the rows
from JSON about 3 ms. The cache (:func:`cache_dir`, ``$CLUSTERPLAN_CACHE_DIR`` or
``$XDG_CACHE_HOME/clusterplan``; ``CLUSTERPLAN_CACHE_DIR=off`` turns it off) is written only after the
shipped files passed every check, is keyed by the sha256 of those files' bytes and the package
version, and is validated again when read (each row through its schema, then the catalog's
fingerprint against the one stored). A cache that is missing, stale, corrupt or unreadable is ignored
and rewritten, never an error. With user catalogs the shipped YAML is parsed as before, so every
problem is still located in its file.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from clusterplan.catalog.load import ROW_TABLES, SECTIONS, SHIPPED_FILES, SHIPPED_PACKAGE, Catalog
from clusterplan.catalog.schema import OwnedCosts

M = TypeVar("M", bound=BaseModel)

CACHE_ENV = "CLUSTERPLAN_CACHE_DIR"
CACHE_OFF = ("off", "0", "no", "false", "none")
CACHE_FORMAT = 3  # bumped when the cache file's layout changes
CACHE_PREFIX = "catalog-"  # one file per key: checkouts or versions side by side do not evict each other
CACHE_KEEP = 4  # files kept in the directory; the least recently written go first


def cache_dir() -> Path | None:
    """Where the catalog cache lives: ``$CLUSTERPLAN_CACHE_DIR`` (``off`` or empty: no cache), else the
    XDG user cache directory (``$XDG_CACHE_HOME/clusterplan``, by default ``~/.cache/clusterplan``)."""
    env = os.environ.get(CACHE_ENV)
    if env is not None:
        return None if env.strip().lower() in (*CACHE_OFF, "") else Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # the XDG spec ignores a relative path
    return base / "clusterplan"


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


def _cache_document(cat: Catalog, key: str) -> dict[str, Any]:
    """The catalog as JSON values, rows in the catalog's own order (it decides candidate order)."""
    doc: dict[str, Any] = {"format": CACHE_FORMAT, "key": key, "fingerprint": cat.fingerprint()}
    for name, _ in ROW_TABLES:
        doc[name] = [[k, v.model_dump(mode="json")] for k, v in getattr(cat, name).items()]
    doc["owned"] = cat.owned.model_dump(mode="json")
    return doc


def _rows(doc: dict[str, Any], section: str, model: type[M]) -> dict[str, M]:
    return {str(k): model.model_validate(v) for k, v in doc[section]}


def _from_cache_document(doc: Any, key: str) -> Catalog | None:
    """The catalog a cache document holds, validated; None if it is for other files or does not check."""
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or doc.get("key") != key:
        return None  # another layout, version or set of shipped files: stale
    tables: dict[str, Any] = {name: _rows(doc, name, model) for name, model in ROW_TABLES}
    cat = Catalog(owned=OwnedCosts.model_validate(doc["owned"]), **tables)
    return cat if cat.fingerprint() == doc.get("fingerprint") else None


def cache_file(key: str) -> str:
    """The cache file's name for ``key`` (its first 16 hex digits; the document names the whole key)."""
    return f"{CACHE_PREFIX}{key[:16]}.json"


def read_cached_catalog(directory: Path, key: str) -> Catalog | None:
    """The cached shipped catalog in ``directory`` if it is for ``key`` and checks; None otherwise, never an error."""
    try:
        doc = json.loads((directory / cache_file(key)).read_text(encoding="utf-8"))
        return _from_cache_document(doc, key)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError):
        return None  # missing, unreadable or corrupt (pydantic's ValidationError is a ValueError)


def write_cached_catalog(directory: Path, key: str, cat: Catalog) -> None:
    """Write the cache atomically (a temporary file renamed over the old one), then drop all but the
    ``CACHE_KEEP`` most recently written; any failure is ignored."""
    text = json.dumps(_cache_document(cat, key), separators=(",", ":"), ensure_ascii=True)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".catalog-", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(tmp, directory / cache_file(key))
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        _prune(directory)
    except OSError:
        return  # a read-only or full disk: the next run parses the YAML again


def _prune(directory: Path) -> None:
    """Remove all but the ``CACHE_KEEP`` newest cache files (another process may remove them first)."""
    files = []
    for path in directory.glob(f"{CACHE_PREFIX}*.json"):
        with contextlib.suppress(OSError):
            files.append((path.stat().st_mtime, path.name, path))
    for _, _, path in sorted(files, reverse=True)[CACHE_KEEP:]:
        with contextlib.suppress(OSError):
            path.unlink()
