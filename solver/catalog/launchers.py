"""The launchers' accepted arguments (``catalog/launchers.yaml``): what ``clusterplan export`` may write into a
Megatron-LM launch, a torchtune config, a torchtitan TOML job config, a DeepSpeed configuration JSON, an Accelerate
config with PEFT's LoraConfig and a BitsAndBytesConfig, or a SkyPilot task, each list read from the tool's own source
at a named commit, with the names it maps the catalog's GPUs, providers and models to and the tool's own settings
(``settings``: its names for the plan's choices, and the defaults the export writes).

Not a catalog section (``--catalog`` does not override it): the plan never reads it, only the exporters and the
test that holds every emitted argument to its list.
"""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from clusterplan.catalog.load import SHIPPED_PACKAGE

LAUNCHERS_FILE = "launchers.yaml"


class Launcher(BaseModel):
    """One tool's accepted arguments and its names for the catalog's rows."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    source: str = Field(description="the file the arguments were read from, at a commit")
    as_of: str
    notes: str = ""
    arguments: list[str] = Field(description="every option or key the tool accepts (config files: SECTION.KEY)")
    launcher_arguments: list[str] = Field(
        default_factory=list,
        description="DeepSpeed, Accelerate: the launcher's own options (the config's keys in arguments)",
    )
    model_arguments: list[str] = Field(default_factory=list, description="torchtune: a model builder's keys")
    models: dict[str, list[str | None]] = Field(
        default_factory=dict,
        description="torchtune: catalog model id -> single-device and distributed configs, LoRA and QLoRA builders; "
        "torchtitan: catalog model id -> model.name and model.flavor",
    )
    settings: dict[str, Any] = Field(
        default_factory=dict, description="the tool's names for the plan's choices and the defaults the export writes"
    )
    clouds: dict[str, str] = Field(default_factory=dict, description="SkyPilot: catalog provider id -> cloud name")
    accelerators: dict[str, str] = Field(
        default_factory=dict, description="SkyPilot: catalog GPU id -> accelerator name"
    )
    images: dict[str, str] = Field(default_factory=dict, description="Kubernetes: engine id -> container image")


class _File(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    launchers: dict[str, Launcher]


@functools.cache
def load_launchers() -> dict[str, Launcher]:
    """The shipped launchers, by id (``megatron-lm``, ``torchtune-lora``, ``skypilot``)."""
    text = resources.files(SHIPPED_PACKAGE).joinpath(LAUNCHERS_FILE).read_text(encoding="utf-8")
    return dict(_File.model_validate(yaml.safe_load(text)).launchers)
