"""The catalog: GPUs, cloud instances, model architectures and owned-hardware costs, each with provenance.

The shipped data lives in ``catalog/*.yaml`` (installed as package data of ``clusterplan.catalog_data``)
and is read through :mod:`importlib.resources`, so it works from a wheel as well as from a checkout.
User catalogs (``--catalog my-prices.yaml``) are applied on top, in the order given. A user catalog is
one YAML mapping with any of the top-level keys ``sources``, ``gpus``, ``instances``, ``models``,
``owned``, ``providers``, ``quality``, ``engines``, ``frameworks``, ``kernels`` and ``api_prices``, each shaped like the shipped file of that name:

* a row whose id is new is **added** (instances are identified by ``provider`` and ``id``);
* a row whose id already exists must say ``override: true``; the fields it gives **replace** those
  fields of the existing row (a nested block such as ``price`` or ``dense`` is replaced whole) and the
  rest are kept. An override must give ``source`` and ``as_of`` for its figures; the replaced row's
  source moves to ``also_sources`` because it still backs the fields that were not replaced;
* ``owned`` figures replace the figure of the same name (per GPU class for the per-class maps);
* ``sources`` may only add keys (redefining a shipped source would change the provenance of rows).

After all layers are applied the whole catalog is cross-checked (every source key resolves, every
instance's GPU exists and fits in one node, native precisions have a throughput figure, aliases are
unambiguous, ...). Every problem is reported at once, located at the row that caused it.

The shipped part is parsed and validated once per process; user catalogs never leak between calls,
because each call copies the cached shipped tables before applying them.

Without user catalogs, the shipped catalog comes from a validated on-disk cache when one matches
(:mod:`clusterplan.catalog.cache`).
"""

from __future__ import annotations

import datetime
import difflib
import functools
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from clusterplan.catalog.schema import (
    ApiPrice,
    ArchitectureKernels,
    CatalogModel,
    CloudInstance,
    EngineSpec,
    FrameworkSpec,
    GpuSpec,
    OwnedCosts,
    OwnedFigure,
    ProviderSpec,
    QualityDelta,
    SourceRef,
    kernels_for,
)
from clusterplan.errors import (
    MAX_QUOTED_CHARS,
    CatalogError,
    CatalogInputError,
    FieldProblem,
    InputError,
    Location,
    UnknownNameError,
)
from clusterplan.inputs.located import validate_document
from clusterplan.inputs.yamlio import LocatedDocument, PathKey, format_path, load_yaml_file, parse_yaml_text

__all__ = [
    "SECTIONS",
    "Catalog",
    "load_catalog",
    "normalize_name",
]

SECTIONS = (
    "sources",
    "gpus",
    "instances",
    "models",
    "owned",
    "providers",
    "quality",
    "engines",
    "frameworks",
    "kernels",
    "api_prices",
)
SHIPPED_PACKAGE = "clusterplan.catalog_data"
SHIPPED_FILES = {name: f"{name}.yaml" for name in SECTIONS}
AS_OF_PATTERN = re.compile(r"\d{4}(-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?)?")
GPU_CLASSES = ("datacenter", "workstation", "consumer")

# Ceilings on money figures (docs/guarantees.md): beyond them the planner's integer cents overflow
# (a user catalog pricing a GPU at $1e15 crashed the model builder), and no real figure comes close.
MAX_GPU_USD = 1e7
MAX_INSTANCE_USD_PER_HOUR = 1e5
# Floors: below them a month of the figure is a few cents or less, which integer cents round away (a
# $1e-12/h instance planned three 16-GPU designs at $5.3e-8); shipped cheapest: $0.0627/h (spot), $299/GPU.
MIN_GPU_USD = 1.0
MIN_INSTANCE_USD_PER_HOUR = 0.01
MAX_OWNED_VALUE = {
    "server_usd_per_node": 1e8,
    "network_usd_per_node": 1e8,
    "network_usd_per_node_by_class": 1e8,
    "electricity_usd_per_kwh": 100.0,
    "colocation_usd_per_kw_month": 1e6,
    "node_power_overhead_w": 1e6,
    "node_power_overhead_w_by_class": 1e6,
    "pue": 10.0,
    "amortisation_months": 1200.0,
    "support_fraction_per_year": 10.0,
    "operations_usd_per_server_month": 1e7,
    "operations_usd_per_gpu_type_month": 1e7,
    "operations_usd_per_pool_month": 1e7,
}

M = TypeVar("M", bound=BaseModel)


def normalize_name(name: str) -> str:
    """The form names are compared in: lower case, runs of spaces and underscores as one dash."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


def _is_url(ref: str) -> bool:
    return ref.startswith(("http://", "https://"))


# ---------------------------------------------------------------------------------------------
# The catalog
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Catalog:
    """Validated catalog tables. Rows are frozen pydantic models; look names up with the methods."""

    gpus: dict[str, GpuSpec]
    instances: dict[str, CloudInstance]  # keyed 'provider:id'
    models: dict[str, CatalogModel]
    owned: OwnedCosts
    sources: dict[str, SourceRef]
    user_files: tuple[str, ...] = ()  # user catalogs applied, in order
    providers: dict[str, ProviderSpec] = field(default_factory=dict)  # keyed by provider id
    quality: dict[str, QualityDelta] = field(default_factory=dict)  # published precision deltas, by row id
    engines: dict[str, EngineSpec] = field(default_factory=dict)  # serving engines (engines.yaml), by id
    kernels: dict[str, ArchitectureKernels] = field(default_factory=dict)  # kernel fits (kernels.yaml), by id
    api_prices: dict[str, ApiPrice] = field(default_factory=dict)  # hosted API list prices (api_prices.yaml), by id
    frameworks: dict[str, FrameworkSpec] = field(default_factory=dict)  # training frameworks (frameworks.yaml), by id
    _gpu_names: dict[str, str] = field(init=False, repr=False, compare=False)
    _model_names: dict[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # Each GPU row carries its architecture's kernel fits from this catalog (copies: rows are shared by catalogs).
        gpus = {k: gpu.with_kernels(self.kernels_for(gpu.architecture)) for k, gpu in self.gpus.items()}
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "_gpu_names", _name_index(self.gpus.values()))
        object.__setattr__(self, "_model_names", _name_index(self.models.values()))

    # -- lookups -----------------------------------------------------------------------------
    def find_gpu(self, name: str) -> GpuSpec | None:
        """The GPU called ``name`` (its id or an alias, any case), or None; no suggestions are looked for."""
        gpu_id = self._gpu_names.get(normalize_name(name))
        return None if gpu_id is None else self.gpus[gpu_id]

    def gpu(self, name: str) -> GpuSpec:
        """The GPU called ``name`` (its id or an alias, any case); UnknownNameError with suggestions if none."""
        gpu_id = self._gpu_names.get(normalize_name(name))
        if gpu_id is None:
            raise UnknownNameError("GPU", name, _suggest(name, self._gpu_names), "gpus")
        return self.gpus[gpu_id]

    def model(self, name: str) -> CatalogModel:
        """The model called ``name`` (its id or an alias, any case); UnknownNameError with suggestions if none."""
        model_id = self._model_names.get(normalize_name(name))
        if model_id is None:
            raise UnknownNameError("model", name, _suggest(name, self._model_names), "models")
        return self.models[model_id]

    def instance(self, key: str) -> CloudInstance:
        """The instance ``provider:id`` (provider in any case)."""
        provider, _, inst_id = key.partition(":")
        found = self.instances.get(f"{provider.strip().lower()}:{inst_id.strip()}")
        if found is None:
            names = {k.lower(): k for k in self.instances}
            raise UnknownNameError("instance", key, _suggest(key, names), "instances")
        return found

    def instances_for(
        self,
        gpu_id: str,
        providers: Iterable[str] | None = None,
        regions: Iterable[str] | None = None,
    ) -> list[CloudInstance]:
        """Instances with this GPU (id or alias), optionally only these providers and regions.

        Sorted by on-demand price per GPU-hour, then ``provider:id``. Rows with region 'global'
        (specialist clouds that do not name a region) match only if 'global' is among ``regions``.
        """
        gpu = self.gpu(gpu_id)
        provider_set = {p.lower() for p in providers} if providers is not None else None
        region_set = {r.lower() for r in regions} if regions is not None else None
        rows = [
            inst
            for inst in self.instances.values()
            if inst.gpu_id == gpu.id
            and (provider_set is None or inst.provider.lower() in provider_set)
            and (region_set is None or inst.region.lower() in region_set)
        ]
        return sorted(rows, key=lambda i: (i.on_demand_usd_per_hour / i.gpus_per_instance, i.key))

    def provider_ids(self) -> list[str]:
        return sorted({inst.provider for inst in self.instances.values()})

    def tier_of(self, inst: CloudInstance) -> str:
        """The offer's tier: its own where the row says (RunPod Community Cloud), else its provider's."""
        return inst.tier or self.providers[inst.provider].tier

    def quality_for(self, model_id: str, precision: str) -> list[QualityDelta]:
        """Published deltas of ``precision``: those measured on ``model_id`` if any, else the cross-family ones."""
        rows = [q for q in self.quality.values() if q.precision == precision]
        own = [q for q in rows if model_id in q.models]
        return sorted(own or [q for q in rows if not q.models], key=lambda q: q.id)

    def find_engine(self, name: str) -> EngineSpec | None:
        """The serving engine called ``name`` (its id or an alias, any case), or None."""
        key = normalize_name(name)
        for spec in self.engines.values():
            if key in {normalize_name(n) for n in (spec.id, *spec.aliases)}:
                return spec
        return None

    def engine(self, name: str) -> EngineSpec:
        """The serving engine called ``name``; an unknown name is a user error with suggestions."""
        spec = self.find_engine(name)
        if spec is None:
            names = {normalize_name(n): e.id for e in self.engines.values() for n in (e.id, *e.aliases)}
            raise UnknownNameError("engine", name, _suggest(name, names), ", ".join(sorted(self.engines)))
        return spec

    def find_framework(self, name: str) -> FrameworkSpec | None:
        """The training framework called ``name`` (its id or an alias, any case), or None."""
        key = normalize_name(name)
        for spec in self.frameworks.values():
            if key in {normalize_name(n) for n in (spec.id, *spec.aliases)}:
                return spec
        return None

    def framework(self, name: str) -> FrameworkSpec:
        """The training framework called ``name``; an unknown name is a user error with suggestions."""
        spec = self.find_framework(name)
        if spec is None:
            names = {normalize_name(n): f.id for f in self.frameworks.values() for n in (f.id, *f.aliases)}
            raise UnknownNameError("framework", name, _suggest(name, names), ", ".join(sorted(self.frameworks)))
        return spec

    def kernels_for(self, architecture: str) -> ArchitectureKernels | None:
        """The kernel fits of a GPU architecture: the row listing it, else the default row (None: no kernels table)."""
        return kernels_for(self.kernels.values(), architecture)

    def api_prices_for(self, model_id: str) -> list[ApiPrice]:
        """Hosted API prices for a catalog model: those serving it first, then stand-ins; each cheapest first."""
        rows = [p for p in self.api_prices.values() if p.model_id == model_id]
        return sorted(rows, key=lambda p: (p.model is None, p.usd_per_million_output_tokens, p.id))

    def source(self, ref: str) -> SourceRef | None:
        """The source a row cites: a key of ``sources``, or a bare URL (returned as a SourceRef)."""
        if ref in self.sources:
            return self.sources[ref]
        if _is_url(ref):
            return SourceRef(title=ref, url=ref)
        return None

    # -- reproducibility ----------------------------------------------------------------------
    def canonical(self) -> dict[str, Any]:
        """Every table as plain JSON values, rows sorted by key: what :meth:`fingerprint` hashes."""
        return {
            "sources": {k: self.sources[k].model_dump(mode="json") for k in sorted(self.sources)},
            "gpus": [self.gpus[k].model_dump(mode="json") for k in sorted(self.gpus)],
            "instances": [self.instances[k].model_dump(mode="json") for k in sorted(self.instances)],
            "models": [self.models[k].model_dump(mode="json") for k in sorted(self.models)],
            "owned": self.owned.model_dump(mode="json"),
            "providers": [self.providers[k].model_dump(mode="json") for k in sorted(self.providers)],
            "quality": [self.quality[k].model_dump(mode="json") for k in sorted(self.quality)],
        }

    def fingerprint(self) -> str:
        """sha256 (hex) of the canonical JSON of the catalog; equal catalogs give equal fingerprints."""
        return self._fingerprint

    @functools.cached_property
    def _fingerprint(self) -> str:
        # Worked out once per catalog (its tables are not changed once loaded): a what-if sweep plans
        # hundreds of points against one catalog, and each plan records it (30 ms a time).
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _name_index(rows: Iterable[GpuSpec | CatalogModel]) -> dict[str, str]:
    index: dict[str, str] = {}
    for row in rows:
        for name in (row.id, *row.aliases):
            index.setdefault(normalize_name(name), row.id)
    return index


def _suggest(word: str, names: dict[str, str], n: int = 3) -> list[str]:
    """Closest ids to ``word``: names containing it first (shortest first), then difflib's close matches."""
    if len(word) > 2 * MAX_QUOTED_CHARS:  # no name is that long; comparing it would only cost time
        return []
    w = normalize_name(word)
    ranked: list[str] = []
    if w:
        containing = sorted((name for name in names if w in name), key=lambda s: (not s.startswith(w), len(s), s))
        ranked.extend(names[name] for name in containing)
    ranked.extend(names[name] for name in difflib.get_close_matches(w, list(names), n=2 * n, cutoff=0.6))
    out: list[str] = []
    for target in ranked:
        if target not in out:
            out.append(target)
    return out[:n]


# ---------------------------------------------------------------------------------------------
# Loading: layers of located documents applied to mutable tables, then cross-checked
# ---------------------------------------------------------------------------------------------


@dataclass
class _Tables:
    """Catalog tables being built, with where each row was last defined (for located cross-checks)."""

    sources: dict[str, SourceRef] = field(default_factory=dict)
    gpus: dict[str, GpuSpec] = field(default_factory=dict)
    instances: dict[str, CloudInstance] = field(default_factory=dict)
    models: dict[str, CatalogModel] = field(default_factory=dict)
    owned: OwnedCosts | None = None
    where: dict[tuple[str, str], tuple[LocatedDocument, PathKey]] = field(default_factory=dict)
    providers: dict[str, ProviderSpec] = field(default_factory=dict)
    quality: dict[str, QualityDelta] = field(default_factory=dict)
    engines: dict[str, EngineSpec] = field(default_factory=dict)
    kernels: dict[str, ArchitectureKernels] = field(default_factory=dict)
    api_prices: dict[str, ApiPrice] = field(default_factory=dict)
    frameworks: dict[str, FrameworkSpec] = field(default_factory=dict)

    def copy(self) -> _Tables:
        return _Tables(
            dict(self.sources),
            dict(self.gpus),
            dict(self.instances),
            dict(self.models),
            self.owned,
            dict(self.where),
            dict(self.providers),
            dict(self.quality),
            dict(self.engines),
            dict(self.kernels),
            dict(self.api_prices),
            dict(self.frameworks),
        )


class _Problems:
    def __init__(self) -> None:
        self.items: list[FieldProblem] = []

    def add(self, doc: LocatedDocument, path: PathKey, message: str) -> None:
        self.items.append(FieldProblem(doc.locate(path), format_path(path), message))

    def add_at(self, location: Location, path: str, message: str) -> None:
        self.items.append(FieldProblem(location, path, message))

    def extend(self, exc: InputError) -> None:
        self.items.extend(exc.problems)

    def raise_if_any(self, fix: str) -> None:
        if self.items:
            raise CatalogInputError(self.items, fix=fix)


def load_catalog(user_paths: Sequence[Path] = ()) -> Catalog:
    """The shipped catalog with ``user_paths`` applied in order; raise CatalogInputError if invalid."""
    if not user_paths:
        return _copy(_shipped_catalog())
    tables = _shipped_tables().copy()
    applied: list[str] = []
    seen: set[Path] = set()
    for raw in user_paths:
        path = Path(raw)
        resolved = path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        doc = load_yaml_file(path)
        problems = _Problems()
        _apply_document(doc, tables, problems, user=True)
        problems.raise_if_any(fix=_USER_FIX)
        applied.append(str(path))
    problems = _Problems()
    _cross_check(tables, problems)
    problems.raise_if_any(fix=_USER_FIX if applied else _SHIPPED_FIX)
    return _freeze(tables, tuple(applied))


def load_catalog_text(text: str, name: str = "<catalog>") -> Catalog:
    """The shipped catalog with one user catalog given as text (tests, notebooks)."""
    tables = _shipped_tables().copy()
    problems = _Problems()
    _apply_document(parse_yaml_text(text, name), tables, problems, user=True)
    problems.raise_if_any(fix=_USER_FIX)
    _cross_check(tables, problems)
    problems.raise_if_any(fix=_USER_FIX)
    return _freeze(tables, (name,))


_USER_FIX = "correct the user catalog at the places named (the field table is in the catalog README)"
_SHIPPED_FIX = "the shipped catalog is inconsistent: this is a bug in clusterplan's catalog data"


def _freeze(tables: _Tables, user_files: tuple[str, ...]) -> Catalog:
    if tables.owned is None:  # pragma: no cover - the shipped owned.yaml always defines it
        raise CatalogError("the catalog has no owned-hardware costs (owned.yaml)")
    return Catalog(
        gpus=dict(tables.gpus),
        instances=dict(tables.instances),
        models=dict(tables.models),
        owned=tables.owned,
        sources=dict(tables.sources),
        user_files=user_files,
        providers=dict(tables.providers),
        quality=dict(tables.quality),
        engines=dict(tables.engines),
        kernels=dict(tables.kernels),
        api_prices=dict(tables.api_prices),
        frameworks=dict(tables.frameworks),
    )


# Every row table of a Catalog and its row model (owned is one row, not a table): what a copy and the cache hold.
ROW_TABLES: tuple[tuple[str, type[BaseModel]], ...] = (
    ("sources", SourceRef),
    ("gpus", GpuSpec),
    ("instances", CloudInstance),
    ("models", CatalogModel),
    ("providers", ProviderSpec),
    ("quality", QualityDelta),
    ("engines", EngineSpec),
    ("kernels", ArchitectureKernels),
    ("api_prices", ApiPrice),
    ("frameworks", FrameworkSpec),
)


@functools.lru_cache(maxsize=1)
def _shipped_catalog() -> Catalog:
    """The shipped catalog, validated: from the cache when it matches the shipped files, else parsed (and cached)."""
    from clusterplan.catalog.cache import cache_dir, read_cached_catalog, shipped_key, write_cached_catalog

    directory = cache_dir()
    key = shipped_key() if directory is not None else ""
    if directory is not None:
        cached = read_cached_catalog(directory, key)
        if cached is not None:
            return cached
    tables = _shipped_tables().copy()
    problems = _Problems()
    _cross_check(tables, problems)
    problems.raise_if_any(fix=_SHIPPED_FIX)
    cat = _freeze(tables, ())
    if directory is not None:
        write_cached_catalog(directory, key, cat)
    return cat


def shipped_engines() -> dict[str, EngineSpec]:
    """The shipped serving engines by id (catalog/engines.yaml), validated; the physics' engine profiles."""
    return _shipped_catalog().engines


def shipped_frameworks() -> dict[str, FrameworkSpec]:
    """The shipped training frameworks by id (catalog/frameworks.yaml), validated: their rates and overlaps."""
    return _shipped_catalog().frameworks


def shipped_kernels() -> dict[str, ArchitectureKernels]:
    """The shipped kernel fits by id (catalog/kernels.yaml), validated: for a GPU row no catalog resolved."""
    return _shipped_catalog().kernels


def _copy(cat: Catalog) -> Catalog:
    """A catalog of fresh tables (a caller that changes one must not change the next caller's)."""
    tables: dict[str, Any] = {name: dict(getattr(cat, name)) for name, _ in ROW_TABLES}
    return Catalog(owned=cat.owned, user_files=cat.user_files, **tables)


@functools.lru_cache(maxsize=1)
def _shipped_tables() -> _Tables:
    """Parse and validate the shipped YAML once per process."""
    tables = _Tables()
    problems = _Problems()
    package = resources.files(SHIPPED_PACKAGE)
    for section in SECTIONS:
        resource = package.joinpath(SHIPPED_FILES[section])
        label = str(resource) if isinstance(resource, Path) else f"{SHIPPED_PACKAGE}/{SHIPPED_FILES[section]}"
        doc = parse_yaml_text(resource.read_text(encoding="utf-8"), label)
        if not isinstance(doc.data, dict) or set(doc.data) != {section}:
            problems.add(doc, (), f"expected one top-level key '{section}'")
            continue
        _apply_document(doc, tables, problems, user=False)
    problems.raise_if_any(fix=_SHIPPED_FIX)
    _cross_check(tables, problems)
    problems.raise_if_any(fix=_SHIPPED_FIX)
    return tables


def _apply_document(doc: LocatedDocument, tables: _Tables, problems: _Problems, *, user: bool) -> None:
    data = doc.data
    if not isinstance(data, dict):
        problems.add(doc, (), f"expected a YAML mapping with keys {', '.join(SECTIONS)}; got {type(data).__name__}")
        return
    for key in data:
        if key not in SECTIONS:
            from clusterplan.errors import did_you_mean

            hint = did_you_mean(str(key), SECTIONS)
            problems.add(
                doc,
                (key,),
                f"unknown key '{key}'" + (f"; {hint}" if hint else f"; expected one of {', '.join(SECTIONS)}"),
            )
    # sources first, so rows in the same file may cite them
    if "sources" in data:
        _apply_sources(doc, tables, problems, user=user)
    if "gpus" in data:
        _apply_rows(doc, "gpus", GpuSpec, tables.gpus, _id_key, tables, problems, user=user)
    if "instances" in data:
        _apply_rows(doc, "instances", CloudInstance, tables.instances, _instance_key, tables, problems, user=user)
    if "models" in data:
        _apply_rows(doc, "models", CatalogModel, tables.models, _id_key, tables, problems, user=user)
    if "owned" in data:
        _apply_owned(doc, tables, problems, user=user)
    if "providers" in data:
        _apply_rows(doc, "providers", ProviderSpec, tables.providers, _id_key, tables, problems, user=user)
    if "quality" in data:
        _apply_rows(doc, "quality", QualityDelta, tables.quality, _id_key, tables, problems, user=user)
    if "engines" in data:
        _apply_rows(doc, "engines", EngineSpec, tables.engines, _id_key, tables, problems, user=user)
    if "frameworks" in data:
        _apply_rows(doc, "frameworks", FrameworkSpec, tables.frameworks, _id_key, tables, problems, user=user)
    if "kernels" in data:
        _apply_rows(doc, "kernels", ArchitectureKernels, tables.kernels, _id_key, tables, problems, user=user)
    if "api_prices" in data:
        _apply_rows(doc, "api_prices", ApiPrice, tables.api_prices, _id_key, tables, problems, user=user)


def _id_key(row: dict[str, Any]) -> str | None:
    value = row.get("id")
    return value if isinstance(value, str) and value else None


def _instance_key(row: dict[str, Any]) -> str | None:
    provider, inst_id = row.get("provider"), row.get("id")
    if isinstance(provider, str) and provider and isinstance(inst_id, str) and inst_id:
        return f"{provider}:{inst_id}"
    return None


def _apply_sources(doc: LocatedDocument, tables: _Tables, problems: _Problems, *, user: bool) -> None:
    section = doc.data["sources"]
    if not isinstance(section, dict):
        problems.add(doc, ("sources",), "expected a mapping of source key to {title, url, as_of}")
        return
    for key in section:
        path: PathKey = ("sources", key)
        if key in tables.sources:
            problems.add(doc, path, f"source '{key}' is already defined; choose another key for your source")
            continue
        try:
            tables.sources[key] = validate_document(doc, SourceRef, root_path=path)
            tables.where[("sources", key)] = (doc, path)
        except InputError as exc:
            problems.extend(exc)


_SINGULAR = {
    "gpus": "GPU",
    "instances": "instance",
    "models": "model",
    "providers": "provider",
    "quality": "quality",
    "engines": "engine",
    "frameworks": "framework",
    "kernels": "kernels",
    "api_prices": "API price",
}


def _apply_rows(
    doc: LocatedDocument,
    section: str,
    model: type[M],
    table: dict[str, M],
    key_of: Any,
    tables: _Tables,
    problems: _Problems,
    *,
    user: bool,
) -> None:
    rows = doc.data[section]
    what = _SINGULAR[section]
    if not isinstance(rows, list):
        problems.add(doc, (section,), f"expected a list of {what} rows, got {type(rows).__name__}")
        return
    first_in_file: dict[str, int] = {}
    for i, row in enumerate(rows):
        path: PathKey = (section, i)
        if not isinstance(row, dict):
            problems.add(doc, path, f"expected a mapping ({what} row), got {type(row).__name__}")
            continue
        override = row.get("override", False)
        if "override" in row and (not user or not isinstance(override, bool)):
            problems.add(
                doc, (*path, "override"), "override must be true or false" if user else "override is for user catalogs"
            )
            continue
        key = key_of(row)
        if key is not None and key in first_in_file:
            other = doc.locate((section, first_in_file[key]))
            problems.add(doc, path, f"duplicate {what} '{key}' (first at line {other.line})")
            continue
        if key is not None:
            first_in_file[key] = i
        existing = table.get(key) if key is not None else None
        if existing is not None and not override:
            origin = _origin(tables, section, key)
            problems.add(
                doc,
                path,
                f"{what} '{key}' is already in the catalog ({origin}); add `override: true` to replace the fields "
                "you give, or use a new id",
            )
            continue
        if override and existing is None:
            hint = _suggest(str(key), {normalize_name(k): k for k in table}) if key else []
            problems.add(
                doc,
                path,
                f"override of {what} '{key}', which is not in the catalog"
                + (f"; did you mean {' or '.join(repr(s) for s in hint)}?" if hint else "")
                + " (drop `override` to add a new one)",
            )
            continue
        if existing is not None:
            missing = [f for f in ("source", "as_of") if f not in row]
            if missing:
                problems.add(
                    doc,
                    path,
                    f"an override must say where its figures come from: give {' and '.join(missing)} "
                    "(add your own key under `sources:` for a quote or contract)",
                )
                continue
            merged = _merge_override(existing, {k: v for k, v in row.items() if k != "override"}, doc.file)
            target_doc = _with_value(doc, path, merged)
        else:
            target_doc = doc
        try:
            validated = validate_document(target_doc, model, root_path=path)
        except InputError as exc:
            problems.extend(exc)
            continue
        final_key = validated.key if isinstance(validated, CloudInstance) else validated.id  # type: ignore[attr-defined]
        table[final_key] = validated
        tables.where[(section, final_key)] = (doc, path)


def _merge_override(existing: BaseModel, given: dict[str, Any], file: str) -> dict[str, Any]:
    """The existing row's fields with ``given`` replacing whole fields; provenance carried over honestly."""
    base = existing.model_dump(mode="python")
    merged = {**base, **given}
    fields = type(existing).model_fields
    changed = [k for k in given if k not in {"source", "as_of", "notes", "provisional", "provisional_fields"}]
    if "also_sources" in fields and "also_sources" not in given:
        carried = [base["source"], *base.get("also_sources", [])]
        merged["also_sources"] = [s for i, s in enumerate(carried) if s not in carried[:i] and s != given["source"]]
    if "provisional" not in given:
        old_fields: list[str] = list(base.get("provisional_fields") or [])
        if old_fields:
            remaining = [f for f in old_fields if f not in given]
            merged["provisional"] = bool(remaining)
            if "provisional_fields" in fields and "provisional_fields" not in given:
                merged["provisional_fields"] = remaining
        else:
            merged["provisional"] = bool(base.get("provisional", False))
    if "notes" not in given:
        earlier = f" Earlier notes: {base['notes']}" if base.get("notes") else ""
        merged["notes"] = f"{', '.join(changed) or 'provenance'} overridden by {file}.{earlier}"
    return merged


def _with_value(doc: LocatedDocument, path: PathKey, value: Any) -> LocatedDocument:
    """A shallow copy of ``doc`` with the value at ``path`` replaced (positions kept for locating)."""

    def put(node: Any, parts: PathKey) -> Any:
        if not parts:
            return value
        head, rest = parts[0], parts[1:]
        if isinstance(node, list) and isinstance(head, int):
            copy_list = list(node)
            copy_list[head] = put(node[head], rest)
            return copy_list
        copy_dict = dict(node)
        copy_dict[head] = put(node[head], rest)
        return copy_dict

    return LocatedDocument(file=doc.file, data=put(doc.data, path), positions=doc.positions)


def _apply_owned(doc: LocatedDocument, tables: _Tables, problems: _Problems, *, user: bool) -> None:
    given = doc.data["owned"]
    if not isinstance(given, dict):
        problems.add(doc, ("owned",), "expected a mapping of owned-hardware figures")
        return
    if tables.owned is None:
        merged: dict[str, Any] = dict(given)
    else:
        merged = tables.owned.model_dump(mode="python")
        for name, value in given.items():
            if (
                name in merged
                and isinstance(merged[name], dict)
                and name.endswith(("_by_class", "_per_node"))
                and (isinstance(value, dict) and all(k in GPU_CLASSES for k in value))
            ):
                merged[name] = {**merged[name], **value}  # per-class maps merge class by class
            else:
                merged[name] = value
    try:
        tables.owned = validate_document(_with_value(doc, ("owned",), merged), OwnedCosts, root_path=("owned",))
        tables.where[("owned", "")] = (doc, ("owned",))
    except InputError as exc:
        problems.extend(exc)


def _origin(tables: _Tables, section: str, key: str) -> str:
    found = tables.where.get((section, key))
    if found is None:
        return "shipped catalog"
    doc, path = found
    return f"defined at {doc.locate(path)}"


# ---------------------------------------------------------------------------------------------
# Cross-checks on the assembled catalog
# ---------------------------------------------------------------------------------------------


def _cross_check(tables: _Tables, problems: _Problems) -> None:
    """The rules that span rows and tables, table by table: every row's sources, dates and provisional
    fields; GPUs' prices and precisions; instances' prices, providers and GPUs; quality rows' models;
    owned-hardware figures. Names are unique among GPUs and among models."""
    rep = _Reporter(tables, problems)
    for gpu_id, gpu in tables.gpus.items():
        _check_gpu(gpu_id, gpu, rep)
    _check_names(tables, "gpus", tables.gpus.values(), rep.report)

    for engine_id, engine in tables.engines.items():
        rep.check_refs("engines", engine_id, engine)
        for gpu_id in engine.measured:
            if gpu_id not in tables.gpus:
                rep.report("engines", engine_id, f"measured on GPU '{gpu_id}', which is no catalog GPU id", "measured")
    for framework_id, framework in tables.frameworks.items():
        rep.check_refs("frameworks", framework_id, framework)
    _check_kernels(tables, rep)

    for key, inst in tables.instances.items():
        _check_instance(tables, key, inst, rep)

    for model_id, model in tables.models.items():
        rep.check_refs("models", model_id, model)
    _check_names(tables, "models", tables.models.values(), rep.report)

    for provider_id, provider in tables.providers.items():
        rep.check_refs("providers", provider_id, provider)
    for quality_id, delta in tables.quality.items():
        _check_quality(tables, quality_id, delta, rep)

    for price_id, price in tables.api_prices.items():
        _check_api_price(tables, price_id, price, rep)

    if tables.owned is not None:
        _check_owned(tables.owned, rep)


@dataclass(frozen=True)
class _Reporter:
    """Reports a cross-check's problem at the row (and field) of the file that defined it."""

    tables: _Tables
    problems: _Problems

    def here(self, section: str, key: str, *sub: str | int) -> tuple[Location, str]:
        found = self.tables.where.get((section, key))
        if found is None:  # pragma: no cover - every row is recorded when applied
            return Location("catalog"), f"{section}.{key}"
        doc, path = found
        full = (*path, *sub)
        return doc.locate(full), format_path(full)

    def report(self, section: str, key: str, message: str, *sub: str | int) -> None:
        loc, path = self.here(section, key, *sub)
        self.problems.add_at(loc, path, message)

    def check_refs(self, section: str, key: str, row: BaseModel, prefix: tuple[str | int, ...] = ()) -> None:
        """A row's sources are keys of ``sources`` or URLs, its ``as_of`` a real date, its provisional
        fields its own and flagged provisional."""
        refs: list[tuple[str, str]] = []
        source = getattr(row, "source", None)
        if isinstance(source, str):
            refs.append(("source", source))
        refs.extend(("also_sources", s) for s in getattr(row, "also_sources", []) or [])
        for field_name, ref in refs:
            if ref not in self.tables.sources and not _is_url(ref):
                close = _suggest(ref, {normalize_name(k): k for k in self.tables.sources})
                hint = "did you mean " + " or ".join(f"'{c}'" for c in close) + "?" if close else ""
                self.report(
                    section,
                    key,
                    f"source '{ref}' is not a key of `sources` nor a URL"
                    + (f"; {hint}" if hint else "; define it under `sources:` in the same file"),
                    *prefix,
                    field_name,
                )
        as_of = getattr(row, "as_of", None)
        if isinstance(as_of, str) and not _real_date(as_of):
            self.report(
                section, key, f"as_of must be a date like 2026-11 or 2026-11-09, got {as_of!r}", *prefix, "as_of"
            )
        pfields = getattr(row, "provisional_fields", []) or []
        for name in pfields:
            if name not in type(row).model_fields:
                self.report(
                    section, key, f"provisional_fields names '{name}', which is not a field of the row", *prefix
                )
        if pfields and not getattr(row, "provisional", False):
            self.report(section, key, "provisional_fields is set, so provisional must be true", *prefix)


def _check_gpu(gpu_id: str, gpu: GpuSpec, rep: _Reporter) -> None:
    """A GPU row: its references, a price within what clusterplan plans with, a dense figure for every
    native precision, and an FP4 figure only with FP4 listed as native."""
    rep.check_refs("gpus", gpu_id, gpu)
    if gpu.price is not None:
        rep.check_refs("gpus", gpu_id, gpu.price, ("price",))
        if gpu.price.usd > MAX_GPU_USD:
            rep.report(
                "gpus",
                gpu_id,
                f"GPU '{gpu_id}' is priced at ${gpu.price.usd:,.4g}, beyond the ${MAX_GPU_USD:,.0f} per GPU "
                "clusterplan plans with; check the unit",
                "price",
                "usd",
            )
        if gpu.price.usd < MIN_GPU_USD:
            rep.report(
                "gpus",
                gpu_id,
                f"GPU '{gpu_id}' is priced at ${gpu.price.usd:,.4g}, below the ${MIN_GPU_USD:,.2f} per GPU clusterplan "
                "plans with (its integer cents cannot represent it); check the unit",
                "price",
                "usd",
            )
    for precision in gpu.native_precisions:
        if gpu.tflops(precision) is None:
            rep.report("gpus", gpu_id, f"'{precision}' is listed as native but dense has no figure for it", "dense")
    if gpu.dense.fp4_tflops is not None and "fp4" not in gpu.native_precisions:
        # An FP4 rate is credited only to native precisions: a figure without the listing would be silently unused.
        rep.report("gpus", gpu_id, "dense has an fp4 figure but 'fp4' is not listed in native_precisions", "dense")


def _check_kernels(tables: _Tables, rep: _Reporter) -> None:
    """The kernels rows: their references, each architecture on one row only, and exactly one default row."""
    listed: dict[str, str] = {}
    for kernels_id, row in tables.kernels.items():
        rep.check_refs("kernels", kernels_id, row)
        for name in row.architectures:
            other = listed.setdefault(name.casefold(), kernels_id)
            if other != kernels_id:
                rep.report(
                    "kernels", kernels_id, f"architecture '{name}' is listed by kernels '{other}' too", "architectures"
                )
    defaults = [k for k, row in tables.kernels.items() if row.default]
    if tables.kernels and len(defaults) != 1:
        key = defaults[1] if defaults else next(iter(tables.kernels))
        rep.report("kernels", key, f"exactly one kernels row is the default; found {len(defaults)}", "default")


def _check_instance(tables: _Tables, key: str, inst: CloudInstance, rep: _Reporter) -> None:
    """An instance row: its references, prices within what clusterplan plans with, a listed provider, and
    a GPU in the catalog whose node holds its GPU count and whose scale-up link it names."""
    rep.check_refs("instances", key, inst)
    for price_field in ("on_demand_usd_per_hour", "spot_usd_per_hour"):
        price = getattr(inst, price_field)
        if price is not None and price > MAX_INSTANCE_USD_PER_HOUR:
            rep.report(
                "instances",
                key,
                f"instance '{key}' costs ${price:,.4g} an hour, beyond the ${MAX_INSTANCE_USD_PER_HOUR:,.0f} "
                "clusterplan plans with; check the unit",
                price_field,
            )
        if price is not None and price < MIN_INSTANCE_USD_PER_HOUR:
            rep.report(
                "instances",
                key,
                f"instance '{key}' costs ${price:,.4g} an hour, below the ${MIN_INSTANCE_USD_PER_HOUR:,.2f} clusterplan "
                "plans with (its integer cents cannot represent a month of it); check the unit",
                price_field,
            )
    terms: set[int] = set()
    for i, c in enumerate(inst.commitments):
        rep.check_refs("instances", key, c, ("commitments", i))
        if c.term_months in terms:
            rep.report("instances", key, f"two commitments of {c.term_months} months; keep one", "commitments", i)
        terms.add(c.term_months)
        if c.usd_per_hour > MAX_INSTANCE_USD_PER_HOUR:
            rep.report(
                "instances", key, f"a commitment costs ${c.usd_per_hour:,.4g} an hour; check the unit",
                "commitments", i, "usd_per_hour",
            )  # fmt: skip
        if c.usd_per_hour < MIN_INSTANCE_USD_PER_HOUR:
            rep.report(
                "instances", key, f"a commitment costs ${c.usd_per_hour:,.4g} an hour, below the "
                f"${MIN_INSTANCE_USD_PER_HOUR:,.2f} clusterplan plans with; check the unit",
                "commitments", i, "usd_per_hour",
            )  # fmt: skip
    if inst.provider not in tables.providers:
        rep.report(
            "instances",
            key,
            f"instance '{key}' names provider '{inst.provider}', which `providers` does not list; add a "
            "providers row (tier, interconnect, source, as_of)",
            "provider",
        )
    inst_gpu = tables.gpus.get(inst.gpu_id)
    if inst_gpu is None:
        hint = _suggest(inst.gpu_id, _name_index(tables.gpus.values()))
        rep.report(
            "instances",
            key,
            f"instance '{key}' names gpu_id '{inst.gpu_id}', which is not in the catalog"
            + (f"; did you mean {' or '.join(repr(h) for h in hint)}?" if hint else ""),
            "gpu_id",
        )
        return
    if inst.gpus_per_instance > inst_gpu.max_gpus_per_node:
        rep.report(
            "instances",
            key,
            f"instance '{key}' has {inst.gpus_per_instance} GPUs but a {inst_gpu.id} node holds at most "
            f"{inst_gpu.max_gpus_per_node} (max_gpus_per_node, {_origin(tables, 'gpus', inst_gpu.id)})",
            "gpus_per_instance",
        )
    if inst.gpu_link != "pcie" and inst.gpu_link != inst_gpu.scale_up:
        rep.report(
            "instances",
            key,
            f"instance '{key}' links its GPUs by {inst.gpu_link} but {inst_gpu.id} has scale_up {inst_gpu.scale_up}",
            "gpu_link",
        )


def _check_quality(tables: _Tables, quality_id: str, delta: QualityDelta, rep: _Reporter) -> None:
    """A quality row: its references, and every model it names in the catalog."""
    rep.check_refs("quality", quality_id, delta)
    for i, model_id in enumerate(delta.models):
        if model_id not in tables.models:
            rep.report(
                "quality",
                quality_id,
                f"quality row '{quality_id}' names model '{model_id}', which is not in the catalog",
                "models",
                i,
            )


def _check_api_price(tables: _Tables, price_id: str, price: ApiPrice, rep: _Reporter) -> None:
    """An API price row: its references, and the catalog model it prices (or stands in for)."""
    rep.check_refs("api_prices", price_id, price)
    field_name = "model" if price.model is not None else "equivalent"
    if price.model_id not in tables.models:
        hint = _suggest(price.model_id, _name_index(tables.models.values()))
        rep.report(
            "api_prices",
            price_id,
            f"API price '{price_id}' names {field_name} '{price.model_id}', which is not a catalog model"
            + (f"; did you mean {' or '.join(repr(h) for h in hint)}?" if hint else ""),
            field_name,
        )


def _check_owned(owned: OwnedCosts, rep: _Reporter) -> None:
    """The owned-hardware figures: each one's references and ceiling, a server price for every GPU class,
    a PUE of at least 1, a positive amortisation and positive node sizes."""
    figures: list[tuple[tuple[str, ...], OwnedFigure]] = []
    for name in type(owned).model_fields:
        value = getattr(owned, name)
        if isinstance(value, OwnedFigure):
            figures.append(((name,), value))
        elif isinstance(value, dict):
            figures.extend(((name, str(k)), v) for k, v in value.items() if isinstance(v, OwnedFigure))
    for sub, figure in figures:
        rep.check_refs("owned", "", figure, sub)
        ceiling = MAX_OWNED_VALUE.get(sub[0])
        if ceiling is not None and figure.value > ceiling:
            rep.report(
                "owned",
                "",
                f"{'.'.join(sub)} is {figure.value:,.4g} {figure.unit}, beyond the {ceiling:,.0f} "
                "clusterplan plans with; check the unit",
                *sub,
                "value",
            )
    missing = [c for c in GPU_CLASSES if c not in owned.server_usd_per_node]
    if missing:
        rep.report("owned", "", f"server_usd_per_node lacks GPU class {', '.join(missing)}", "server_usd_per_node")
    if owned.pue.value < 1:
        rep.report("owned", "", f"pue must be at least 1, got {owned.pue.value}", "pue", "value")
    if owned.amortisation_months.value <= 0:
        rep.report("owned", "", "amortisation_months must be positive", "amortisation_months", "value")
    if any(n < 1 for n in owned.node_sizes):
        rep.report("owned", "", "node_sizes must be positive GPU counts", "node_sizes")


def _real_date(text: str) -> bool:
    """``YYYY``, ``YYYY-MM`` or ``YYYY-MM-DD`` naming a day the calendar has (2024-02-30 is refused)."""
    if not AS_OF_PATTERN.fullmatch(text):
        return False
    parts = [int(p) for p in text.split("-")]
    try:
        datetime.date(parts[0], *[*parts[1:], 1, 1][:2])
    except ValueError:
        return False
    return True


def _check_names(tables: _Tables, section: str, rows: Iterable[GpuSpec | CatalogModel], report: Any) -> None:
    """Every id and alias names one row only (compared case-insensitively)."""
    owner: dict[str, str] = {}
    for row in rows:
        for name in dict.fromkeys(normalize_name(n) for n in (row.id, *row.aliases)):
            other = owner.get(name)
            if other is not None and other != row.id:
                report(section, row.id, f"name '{name}' of '{row.id}' is already a name of '{other}'", "aliases")
            else:
                owner[name] = row.id
