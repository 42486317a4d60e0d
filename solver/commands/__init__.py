"""CLI command modules. Each exposes ``register(app: typer.Typer) -> None``; ``clusterplan.cli`` wires them."""
