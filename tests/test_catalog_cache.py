"""The shipped catalog's on-disk cache (issue 17): a hit skips the YAML, a stale or corrupt cache is
ignored and rewritten, never an error, and user catalogs are still validated and located. It owns only its
own files (issue 32): its own folder, its own names, a marker it checks before pruning, and a seal under a
private secret, so an edited cache is never trusted."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterplan.catalog import cache as disk
from clusterplan.catalog import load
from clusterplan.catalog.cache import CACHE_ENV, CACHE_FOLDER, CACHE_KEEP, NO_CACHE_ENV, cache_file
from clusterplan.catalog.load import load_catalog
from clusterplan.errors import CatalogInputError
from conftest import ROOT

_SHIPPED_TABLES = load._shipped_tables  # the real one (a test replaces it)


def _clear() -> None:
    load._shipped_catalog.cache_clear()
    _SHIPPED_TABLES.cache_clear()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache directory, and no shipped catalog held in memory before or after."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    _clear()
    yield tmp_path / "cache" / CACHE_FOLDER
    _clear()


def _header(path: Path) -> dict[str, object]:
    """The first line of a cache file: marker, format, key, seal."""
    header = json.loads(path.read_bytes().partition(b"\n")[0])
    assert isinstance(header, dict)
    return header


def _body(path: Path) -> dict[str, list[list[object]]]:
    body = json.loads(path.read_bytes().partition(b"\n")[2])
    assert isinstance(body, dict)
    return body


def _rewrite_body(path: Path, body: object) -> None:
    """The catalog in a cache file replaced, its first line (and seal) kept."""
    path.write_bytes(path.read_bytes().partition(b"\n")[0] + b"\n" + json.dumps(body).encode())


def _no_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make parsing the shipped YAML fail: a load that succeeds then came from the cache."""

    def refuse() -> load._Tables:
        raise AssertionError("the shipped YAML was parsed")

    monkeypatch.setattr(load, "_shipped_tables", refuse)


def _orders(cat: load.Catalog) -> tuple[list[str], ...]:
    return list(cat.gpus), list(cat.instances), list(cat.models), list(cat.sources)


def test_cache_hit_gives_the_parsed_catalog_without_parsing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    parsed = load_catalog()
    assert (cache / cache_file(disk.shipped_key())).is_file()
    _clear()
    _no_yaml(monkeypatch)
    cached = load_catalog()
    assert cached == parsed
    assert _orders(cached) == _orders(parsed)  # row order decides candidate order
    assert cached.fingerprint() == parsed.fingerprint()


def test_callers_get_their_own_tables(cache: Path) -> None:
    first = load_catalog()
    assert first.providers and first.quality  # every table reaches the caller, not only the first five
    assert load_catalog() == first
    for table in ("gpus", "instances", "models", "sources", "providers", "quality"):
        getattr(first, table).clear()
        assert getattr(load_catalog(), table), table


def test_stale_cache_is_rebuilt_when_a_shipped_file_changes(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = tmp_path / "catalog_data"
    shutil.copytree(ROOT / "catalog", shipped)
    real_files = load.resources.files
    monkeypatch.setattr(
        load.resources, "files", lambda pkg: shipped if pkg == load.SHIPPED_PACKAGE else real_files(pkg)
    )
    load_catalog()
    old_key = disk.shipped_key()
    assert _header(cache / cache_file(old_key))["key"] == old_key
    gpus = shipped / "gpus.yaml"
    gpus.write_text(gpus.read_text().replace("    usd: 27500\n", "    usd: 26500\n", 1))
    assert disk.shipped_key() != old_key
    assert disk.read_cached_catalog(cache, disk.shipped_key()) is None  # the old cache does not serve
    _clear()
    rebuilt = load_catalog()
    price = rebuilt.gpus["h100-sxm"].price
    assert price is not None and price.usd == 26500
    assert _header(cache / cache_file(disk.shipped_key()))["key"] == disk.shipped_key()
    # The old catalog's cache stays: two checkouts (or versions) side by side do not evict each other.
    assert disk.read_cached_catalog(cache, old_key) is not None


def test_only_the_newest_caches_are_kept(cache: Path) -> None:
    cat = load_catalog()
    keys = [f"{i:02x}".ljust(64, "0") for i in range(CACHE_KEEP + 3)]
    for k in keys:
        disk.write_cached_catalog(cache, k, cat)
    kept = sorted(p.name for p in cache.glob("catalog-*.json"))
    assert len(kept) == CACHE_KEEP
    assert cache_file(keys[-1]) in kept and cache_file(keys[0]) not in kept
    assert disk.read_cached_catalog(cache, keys[-1]) == cat


@pytest.mark.slow
@pytest.mark.parametrize(
    "damage",
    ["", "{not json", "[]", '{"format": 1}', "\udcff", "tampered-figure", "invalid-row"],
    ids=["empty", "truncated", "list", "no-key", "not-utf8", "tampered-figure", "invalid-row"],
)
def test_corrupt_cache_is_ignored_and_rewritten(cache: Path, damage: str) -> None:
    good = load_catalog()
    path = cache / cache_file(disk.shipped_key())
    doc = _body(path)
    if damage == "tampered-figure":  # rows that validate, but not the catalog its seal covers
        doc["gpus"][0][1]["memory_gib"] -= 0.5  # type: ignore[index]
        _rewrite_body(path, doc)
    elif damage == "invalid-row":  # a row its schema refuses
        doc["gpus"][0][1]["memory_gib"] = "lots"  # type: ignore[index]
        _rewrite_body(path, doc)
    elif damage == "\udcff":
        path.write_bytes(b"\xff\xfe{")
    else:
        path.write_text(damage)
    _clear()
    assert load_catalog() == good
    assert disk.read_cached_catalog(cache, disk.shipped_key()) == good  # rewritten


def test_unusable_cache_directory_is_no_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(CACHE_ENV, str(blocker / "cache"))
    _clear()
    try:
        assert load_catalog().gpus
    finally:
        _clear()


@pytest.mark.parametrize("env", [(CACHE_ENV, "off"), (NO_CACHE_ENV, "1")])
def test_cache_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: tuple[str, str]) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv(*env)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path))
    assert disk.cache_dir() is None
    _clear()
    try:
        assert load_catalog().gpus
    finally:
        _clear()
    assert not any(tmp_path.iterdir())


def test_default_directory_follows_xdg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(NO_CACHE_ENV, raising=False)
    assert disk.cache_dir() == tmp_path / "clusterplan" / CACHE_FOLDER
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as the XDG spec says
    assert disk.cache_dir() == Path.home() / ".cache" / "clusterplan" / CACHE_FOLDER


def test_user_catalog_is_still_validated_and_located(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    load_catalog()  # the cache exists
    user = tmp_path / "prices.yaml"
    user.write_text("gpus:\n  - id: h100-sxm\n    memory_gib: 81\n")  # an override without override: true
    with pytest.raises(CatalogInputError) as err:
        load_catalog([user])
    assert any(p.location.file == str(user) and p.location.line == 2 for p in err.value.problems)


def test_pruning_leaves_files_the_cache_did_not_write(cache: Path, tmp_path: Path) -> None:
    """With ``CLUSTERPLAN_CACHE_DIR`` at a folder of the user's, prune once deleted three of six
    ``catalog-user*.json``; now the cache writes into its own folder and removes only its own files."""
    root = tmp_path / "cache"
    root.mkdir()
    users = [root / f"catalog-user{i}.json" for i in range(6)]
    for path in users:
        path.write_text("{}")
    cat = load_catalog()
    lookalike = cache / cache_file("f" * 64)  # the cache's own name, not its marker
    lookalike.write_text('{"mine": true}')
    for i in range(CACHE_KEEP + 3):
        disk.write_cached_catalog(cache, f"{i:02x}".ljust(64, "0"), cat)
    assert all(path.read_text() == "{}" for path in users)
    assert lookalike.read_text() == '{"mine": true}'
    assert sorted(p.name for p in root.iterdir()) == sorted([CACHE_FOLDER, *(p.name for p in users)])


def test_an_edited_cache_is_not_trusted(cache: Path) -> None:
    """Making GH200 five times dearer in the cache (with the old inner fingerprint recomputed) once moved the 7B
    example's design 1; the seal over the catalog refuses any edit, and the next load rewrites it."""
    good = load_catalog()
    path = cache / cache_file(disk.shipped_key())
    doc = _body(path)
    edited = [row for row in doc["instances"] if row[1]["gpu_id"] == "gh200"]  # type: ignore[index]
    assert edited
    for row in edited:
        row[1]["on_demand_usd_per_hour"] *= 5  # type: ignore[index]
    _rewrite_body(path, doc)
    _clear()
    assert load_catalog() == good
    assert disk.read_cached_catalog(cache, disk.shipped_key()) == good  # rewritten


def test_a_cache_sealed_under_another_secret_or_an_open_secret_is_not_trusted(cache: Path) -> None:
    good = load_catalog()
    key = disk.shipped_key()
    assert disk.read_cached_catalog(cache, key) == good
    secret = cache / disk.SECRET_FILE
    secret.chmod(0o644)  # readable by others: anyone could have sealed with it
    assert disk.read_cached_catalog(cache, key) is None
    secret.chmod(0o600)
    secret.write_text("00" * disk.SECRET_BYTES)  # another secret
    assert disk.read_cached_catalog(cache, key) is None
