"""``clusterplan catalog gpus|instances|models|providers|quality|sources``: show the catalog, as tables or as JSON;
``clusterplan catalog refresh DIR``: cloud prices from a checkout of SkyPilot's catalog, as an overlay.

A thin layer: it loads the catalog (shipped data plus any ``--catalog FILE``), picks the rows and
renders them. Tables are for people; ``--json`` prints a stable list of the rows (sorted by id) with
every field, for scripts. Provisional rows (recalled or derived figures) are marked with ``*``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from rich.table import Table

from clusterplan.catalog.load import Catalog, load_catalog
from clusterplan.catalog.schema import (
    CatalogModel,
    CloudInstance,
    EngineSpec,
    FrameworkSpec,
    GpuSpec,
    ProviderSpec,
    QualityDelta,
)
from clusterplan.commands.options import Catalogs

JSON_HELP = "Print a JSON list of the rows (sorted by id, every field) instead of a table."

JsonOption = typer.Option(False, "--json", help=JSON_HELP)
GpuFilterOption = typer.Option(None, "--gpu", help="Only instances with this GPU (id or alias).")
ProviderOption = typer.Option(None, "--provider", "-p", help="Only this provider (repeatable).")

_LINK = {"nvlink": "NVLink", "infinity_fabric": "Infinity Fabric", "pcie": "PCIe"}


def _num(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _mark(row: Any) -> str:
    return "*" if getattr(row, "provisional", False) else ""


def _gpu_link(gpu: GpuSpec) -> str:
    if gpu.scale_up == "pcie":
        return f"PCIe {gpu.pcie_gen}"
    return f"{_LINK[gpu.scale_up]} x{gpu.scale_up_domain} {gpu.scale_up_bandwidth_gb_per_s:g} GB/s"


def gpu_table(rows: Sequence[GpuSpec]) -> Table:
    table = Table(title="GPUs", caption="* provisional: some figures recalled or derived (see notes in --json)")
    for header, justify in [
        ("id", "left"),
        ("class", "left"),
        ("memory GiB", "right"),
        ("bandwidth GB/s", "right"),
        ("BF16 TFLOPS", "right"),
        ("FP8 TFLOPS", "right"),
        ("FP4 TFLOPS", "right"),
        ("GPU link", "left"),
        ("TDP W", "right"),
        ("price USD", "right"),
    ]:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for g in rows:
        price = g.price.usd if g.price is not None else None
        table.add_row(
            g.id + _mark(g),
            g.gpu_class,
            _num(g.memory_gib, 1),
            _num(g.bandwidth_gb_per_s),
            _num(g.dense.bf16_tflops, 1) if g.dense.bf16_tflops is not None else f"{_num(g.dense.fp16_tflops, 1)} fp16",
            _num(g.dense.fp8_tflops, 1),
            _num(g.dense.fp4_tflops, 1),
            _gpu_link(g),
            _num(g.tdp_w),
            _num(price) + (_mark(g.price) if g.price is not None else ""),
        )
    return table


def instance_table(rows: Sequence[CloudInstance]) -> Table:
    table = Table(
        title="Cloud instances",
        caption="prices USD per hour for the whole instance; per GPU-h = on-demand / GPUs; * provisional",
    )
    for header, justify in [
        ("provider", "left"),
        ("id", "left"),
        ("GPU x count", "left"),
        ("link", "left"),
        ("on-demand $/h", "right"),
        ("spot $/h", "right"),
        ("$/GPU-h", "right"),
        ("region", "left"),
        ("as_of", "left"),
    ]:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for i in rows:
        table.add_row(
            i.provider,
            i.id + _mark(i),
            f"{i.gpu_id} x{i.gpus_per_instance}",
            _LINK[i.gpu_link],
            _num(i.on_demand_usd_per_hour, 2),
            _num(i.spot_usd_per_hour, 2),
            _num(i.on_demand_usd_per_hour / i.gpus_per_instance, 2),
            i.region,
            i.as_of,
        )
    return table


def model_table(rows: Sequence[CatalogModel]) -> Table:
    from clusterplan.physics.memory import kv_bytes_per_token_per_gpu
    from clusterplan.physics.params import active_params, total_params

    table = Table(
        title="Models",
        caption="params computed from the shape (B = 10^9); KV: bytes each token adds at 16 bits, every layer "
        "(local layers stop growing at their window); * provisional",
    )
    for header, justify in [
        ("id", "left"),
        ("params B", "right"),
        ("active B", "right"),
        ("KV B/token", "right"),
        ("layers", "right"),
        ("hidden", "right"),
        ("attention", "right"),
        ("experts", "right"),
        ("context", "right"),
    ]:
        table.add_column(header, justify=justify)  # type: ignore[arg-type]
    for m in rows:
        table.add_row(
            m.id + _mark(m),
            f"{total_params(m) / 1e9:,.1f}",
            f"{active_params(m) / 1e9:,.1f}" if m.moe_experts > 1 else "-",
            f"{kv_bytes_per_token_per_gpu(m, tp=1, pp=1, kv_precision='bf16'):,.0f}",
            str(m.layers),
            f"{m.hidden_size:,}",
            _attention(m),
            _experts(m),
            _num(m.max_context),
        )
    return table


def _attention(m: CatalogModel) -> str:
    """Heads and KV heads, MLA's latent, and a local window: '128 MLA 512+64', '64 / 8, 128 sliding 1:1'."""
    text = (
        f"{m.attention_heads} MLA {m.kv_lora_rank}+{m.qk_rope_head_dim}"
        if m.is_mla
        else (f"{m.attention_heads} / {m.kv_heads}")
    )
    if m.attention_window is not None:
        local = m.local_layer_count
        text += f", {m.attention_window:,} {m.attention_window_kind} {local}:{m.layers - local}"
    if m.linear_layer_count:
        text += f", linear {m.linear_layer_count}:{m.softmax_layer_count}"
    return text


def _experts(m: CatalogModel) -> str:
    """'256 (top-8, +1 shared, 3 dense)' or '-' for a dense model."""
    if m.moe_experts <= 1:
        return "-"
    parts = [f"top-{m.experts_per_token}"]
    if m.shared_experts:
        parts.append(f"+{m.shared_experts} shared")
    dense = m.layers - m.moe_layer_count
    if dense:
        parts.append(f"{dense} dense")
    return f"{m.moe_experts} ({', '.join(parts)})"


def provider_table(rows: Sequence[ProviderSpec]) -> Table:
    table = Table(title="Providers", caption="fabric between the priced instances; * provisional")
    for header in ("id", "tier", "fabric", "Gbit/s", "largest cluster", "commitment", "spot", "as_of"):
        table.add_column(header)
    for p in rows:
        table.add_row(
            p.id + _mark(p),
            p.tier,
            p.interconnect,
            _num(p.interconnect_gbit_per_s),
            _num(p.largest_cluster_gpus),
            p.commitment or "-",
            p.spot or "-",
            p.as_of,
        )
    return table


def quality_table(rows: Sequence[QualityDelta]) -> Table:
    table = Table(title="Published quality deltas", caption="loss vs 16-bit on the metric, percent; * provisional")
    for header in ("id", "precision", "method", "models", "loss %", "metric", "source"):
        table.add_column(header)
    for q in rows:
        table.add_row(
            q.id + _mark(q),
            q.precision,
            q.method,
            ", ".join(q.models) or "(any)",
            f"{q.loss_pct:g}",
            q.metric,
            q.source,
        )
    return table


def engine_table(rows: Sequence[EngineSpec]) -> Table:
    table = Table(title="Serving engines", caption="memory policy: what the fraction is of; * provisional")
    for header in ("id", "policy", "fraction", "max batch", "chunk tokens", "KV block", "reserve GiB", "source"):
        table.add_column(header)
    for e in rows:
        table.add_row(
            e.id + _mark(e),
            e.memory_policy,
            f"{e.memory_fraction:g}",
            f"{e.max_batch:,}",
            f"{e.prefill_chunk_tokens:,}",
            f"{e.kv_block_tokens:,}",
            f"{e.runtime_reserve_gib:g}",
            e.source,
        )
    return table


def framework_table(rows: Sequence[FrameworkSpec]) -> Table:
    table = Table(title="Training frameworks", caption="the layouts each runs; * provisional")
    for header in ("id", "methods", "TP/SP", "CP", "PP/interleaved", "EP", "ZeRO", "recompute", "source"):
        table.add_column(header)
    yes = {True: "yes", False: "no"}
    for f in rows:
        table.add_row(
            f.id + _mark(f),
            ", ".join(f.methods),
            f"{yes[f.tensor_parallel]}/{yes[f.sequence_parallel]}",
            yes[f.context_parallel],
            f"{yes[f.pipeline_parallel]}/{yes[f.interleaved_pipeline]}",
            yes[f.expert_parallel],
            ", ".join(str(z) for z in f.zero_stages),
            ", ".join(f.recompute) + (" (N layers)" if f.recompute_layers else ""),
            f.source,
        )
    return table


def source_table(cat: Catalog) -> Table:
    table = Table(title="Sources", caption="keys cited by the rows' `source` and `also_sources`")
    for header in ("key", "title", "as_of"):
        table.add_column(header)
    for key in sorted(cat.sources):
        s = cat.sources[key]
        table.add_row(key, s.title + (f"\n{s.url}" if s.url else ""), s.as_of or "-")
    return table


def rows_json(rows: Sequence[BaseModel]) -> str:
    return json.dumps([r.model_dump(mode="json") for r in rows], indent=2, sort_keys=True)


def show(catalog_files: list[Path] | None, render: Callable[[Catalog], None]) -> None:
    """Load the catalog (with any --catalog files) and render it, errors as messages and exit codes."""
    from clusterplan.console import guarded

    guarded(lambda: render(load_catalog(catalog_files or [])))


def register(app: typer.Typer) -> None:
    catalog_app = typer.Typer(
        name="catalog",
        help="Show the catalog: GPUs, cloud instances, models, providers, quality deltas, engines, frameworks and "
        "sources, with units and provenance. Add or override rows (for example negotiated prices) with --catalog "
        "FILE; see catalog/README.md.",
        no_args_is_help=True,
    )
    app.add_typer(catalog_app, name="catalog")
    catalog_app.command("refresh")(refresh_cmd)

    @catalog_app.command("gpus")
    def gpus(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """GPUs: memory (GiB), bandwidth (GB/s), dense BF16/FP8/FP4 TFLOPS, GPU link, TDP (W), price (USD), class."""

        def render(cat: Catalog) -> None:
            rows = [cat.gpus[k] for k in sorted(cat.gpus)]
            _emit(rows_json(rows) if as_json else gpu_table(rows))

        show(catalog, render)

    @catalog_app.command("instances")
    def instances(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
        gpu: str | None = GpuFilterOption,
        provider: list[str] | None = ProviderOption,
    ) -> None:
        """Cloud instances: provider, id, GPU x count, link, on-demand and spot USD/hour, region, as_of."""

        def render(cat: Catalog) -> None:
            wanted = {p.lower() for p in provider} if provider else None
            gpu_id = cat.gpu(gpu).id if gpu is not None else None
            rows = [
                cat.instances[k]
                for k in sorted(cat.instances)
                if (gpu_id is None or cat.instances[k].gpu_id == gpu_id)
                and (wanted is None or cat.instances[k].provider.lower() in wanted)
            ]
            _emit(rows_json(rows) if as_json else instance_table(rows))

        show(catalog, render)

    @catalog_app.command("models")
    def models(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """Models: parameters (computed, billions), layers, hidden size, heads / KV heads, experts, context."""

        def render(cat: Catalog) -> None:
            rows = [cat.models[k] for k in sorted(cat.models)]
            _emit(rows_json(rows) if as_json else model_table(rows))

        show(catalog, render)

    @catalog_app.command("providers")
    def providers(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """Cloud providers: tier, fabric between instances, largest cluster, commitment and spot terms."""

        def render(cat: Catalog) -> None:
            rows = [cat.providers[k] for k in sorted(cat.providers)]
            _emit(rows_json(rows) if as_json else provider_table(rows))

        show(catalog, render)

    @catalog_app.command("quality")
    def quality(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """Published quality deltas of FP8, INT8, INT4 and NVFP4 against 16-bit, per model family."""

        def render(cat: Catalog) -> None:
            rows = [cat.quality[k] for k in sorted(cat.quality)]
            _emit(rows_json(rows) if as_json else quality_table(rows))

        show(catalog, render)

    @catalog_app.command("engines")
    def engines(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """Serving engines: memory policy and fraction, batch cap, chunked prefill, KV block, runtime reserve."""

        def render(cat: Catalog) -> None:
            rows = [cat.engines[k] for k in sorted(cat.engines)]
            _emit(rows_json(rows) if as_json else engine_table(rows))

        show(catalog, render)

    _register_frameworks(catalog_app, show)

    @catalog_app.command("sources")
    def sources(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """Sources the catalog cites, with title, URL and date, and the catalog's fingerprint."""

        def render(cat: Catalog) -> None:
            if as_json:
                data = {k: cat.sources[k].model_dump(mode="json") for k in sorted(cat.sources)}
                _emit(json.dumps(data, indent=2, sort_keys=True))
            else:
                _emit(source_table(cat))
                _emit(f"catalog fingerprint sha256:{cat.fingerprint()}")

        show(catalog, render)


def refresh_cmd(
    folder: Path = typer.Argument(
        ..., help="A checkout of github.com/skypilot-org/skypilot-catalog (or a folder of <cloud>/vms.csv files)."
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write the overlay here (default: print it)."),
    region: str | None = typer.Option(
        None, "--region", help="Price every instance in this region (default: each instance's cheapest)."
    ),
    as_of: str | None = typer.Option(
        None, "--as-of", help="The overlay's date, YYYY-MM-DD (default: the checkout's last commit date)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace the --out file if it exists."),
    catalog: Catalogs = None,
) -> None:
    """Cloud prices from a checkout of SkyPilot's public catalog, as a dated overlay to use with --catalog.

    Each vms.csv's on-demand and spot prices replace those of the catalog's rows of the same cloud and instance
    type (override: true), in one region; the overlay cites the CSV, the checkout's commit and the date.
    """
    from clusterplan.console import guarded

    guarded(lambda: _refresh(folder, out, region, as_of, force, catalog or []))


def _git(folder: Path, *args: str) -> str | None:
    """``git -C folder ARGS``'s output, or None (not a checkout, or no git)."""
    import subprocess

    try:
        done = subprocess.run(
            ["git", "-C", str(folder), *args], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text if done.returncode == 0 and text else None


def _refresh(
    folder: Path, out: Path | None, region: str | None, as_of: str | None, force: bool, catalogs: list[Path]
) -> None:
    """Read the folder's vms.csv files against the catalog and write (or print) the overlay and a summary."""
    import datetime

    from clusterplan.catalog.refresh import overlay_yaml, refresh
    from clusterplan.console import err_console
    from clusterplan.errors import FieldProblem, InputError, Location
    from clusterplan.outputs import check_outputs, write_text

    where = Location("command line")
    if not folder.is_dir():
        raise InputError([FieldProblem(where, "FOLDER", f"{folder}: no such folder")], fix="give a checkout of "
                         "github.com/skypilot-org/skypilot-catalog")  # fmt: skip
    check_outputs([("--out", out)], force)
    cat = load_catalog(catalogs)
    found = refresh(cat, folder, region=region)
    if not found.files:
        raise InputError([FieldProblem(where, "FOLDER", f"{folder}: no <cloud>/vms.csv file under it")])
    commit = _git(folder, "rev-parse", "HEAD") if (folder / ".git").exists() else None
    date = as_of or (_git(folder, "log", "-1", "--format=%cs") if commit else None)
    date = date or datetime.datetime.now(datetime.UTC).date().isoformat()
    text = overlay_yaml(found, as_of=date, commit=commit, folder_name=folder.resolve().name)
    if out is None:
        typer.echo(text, nl=False)
    else:
        write_text(out, text, force=force, flag="--out")
    skipped = ", ".join(f"{n} ({c} rows)" for n, c in sorted(found.not_in_catalog.items()))
    err_console.print(
        f"{len(found.rows)} instance prices from {', '.join(f for _, f in found.files)}"
        + (f"; accelerators not in the catalog: {skipped}" if skipped else "")
        + (f"; {found.new_instances} instance types of catalog GPUs the catalog does not hold (not added)"
           if found.new_instances else ""),
        markup=False,
    )  # fmt: skip


def _register_frameworks(catalog_app: typer.Typer, show: Any) -> None:
    """``clusterplan catalog frameworks`` (``show`` loads the catalogs and renders, as for the other tables)."""

    @catalog_app.command("frameworks")
    def frameworks(
        as_json: bool = JsonOption,
        catalog: Catalogs = None,
    ) -> None:
        """Training frameworks: the methods, parallelisms, ZeRO stages and recompute policies each runs."""

        def render(cat: Catalog) -> None:
            rows = [cat.frameworks[k] for k in sorted(cat.frameworks)]
            _emit(rows_json(rows) if as_json else framework_table(rows))

        show(catalog, render)


def _emit(thing: Table | str) -> None:
    from clusterplan.console import SafeConsole, out_console

    if isinstance(thing, str):
        typer.echo(thing)
    else:
        # Never truncate ids or prices to fit a narrow terminal or a pipe: print the table at its natural width.
        from rich.measure import Measurement

        natural = Measurement.get(out_console, out_console.options.update(width=10_000), thing).maximum
        if natural <= out_console.width:
            out_console.print(thing)
        else:
            SafeConsole(file=out_console.file, width=natural, highlight=False).print(thing)
