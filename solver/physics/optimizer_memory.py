"""Training memory options users choose, and what each costs in bytes on the GPU and in PCIe time per step.

The options, as the frameworks name them:

* ``bf16_weights``: 16-bit weights, gradients and optimizer states with no fp32 master copy (torchtune recipes
  ``dtype: bf16``; the optimizer keeps its moments in the parameters' dtype, ``torch.optim.AdamW``).
* ``adamw8bit``: AdamW with both moments in 8 bits, block-wise quantised with one fp32 absmax per block of
  2,048 values (bitsandbytes ``AdamW8bit``; Dettmers et al. 2022, arXiv:2110.02861 §2).
* ``paged_optimizer``: the optimizer state lives in CUDA unified memory and is evicted to host memory when the
  GPU runs short (bitsandbytes ``PagedAdamW8bit``; Dettmers et al. 2023, arXiv:2305.14314 §3 "Paged
  Optimizers"); what spills pages over PCIe in and out once per step.
* ``optimizer_offload``: optimizer state and fp32 master weights in host memory, the update on the CPU; 16-bit
  gradients go down and updated 16-bit parameters come back over PCIe each step (ZeRO-Offload, Ren et al. 2021,
  arXiv:2101.06840 §4: "offload ... gradients, optimizer states and optimizer computation to CPU").
* ``activation_offload``: the activations kept for backward are copied to host memory on a side stream in
  forward and back in backward (torchtune ``OffloadActivations``, ``enable_activation_offloading``; -0.1%
  tokens/s on Llama 3.2 3B in its README's optimisation table, so overlapped with compute).
* ``optimizer_in_backward``: each parameter is updated as soon as its gradient is ready, so no full gradient
  buffer exists (torchtune ``optimizer_in_bwd``, "requires gradient_accumulation_steps=1").

A :class:`MemoryPlan` is one set of options; :func:`memory_plans` lists, cheapest in time first, the plans
the layout search tries when the plain layout does not fit. Bytes unless the name says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

# The memory-saving options a training or fine-tuning workload may allow (``memory_options`` in the requirement).
MemoryOption = Literal[
    "bf16_weights", "optimizer_in_backward", "adamw8bit", "activation_offload", "paged_optimizer", "optimizer_offload"
]

MEMORY_OPTIONS: tuple[MemoryOption, ...] = (
    "bf16_weights",
    "optimizer_in_backward",
    "adamw8bit",
    "activation_offload",
    "paged_optimizer",
    "optimizer_offload",
)

# Defaults per method, the options standard in the framework each is run with (specs/requirement.md):
# fine-tuning (torchtune's recipes ship every one of them: full_finetune_single_device defaults to
# PagedAdamW8bit with optimizer_in_bwd and dtype bf16; activation offloading and FSDP CPU offload are recipe
# flags); pre-training (Megatron-LM / NeMo recipes: mixed precision with fp32 master weights, fp32 Adam, none).
FRAMEWORK_DEFAULTS: dict[str, tuple[MemoryOption, ...]] = {
    "training": (),
    "finetune": MEMORY_OPTIONS,
}

BNB_BLOCK_SIZE = 2048  # values per absmax block of bitsandbytes' 8-bit optimizer states (arXiv:2110.02861 §2)
ADAM8BIT_BYTES_PER_PARAM = 2.0 * (1.0 + 4.0 / BNB_BLOCK_SIZE)  # two uint8 moments + their fp32 block absmax
ADAPTER_BYTES = 2.0  # LoRA/QLoRA adapters at the 16-bit compute dtype (QLoRA §3; qlora.py casts LoraLayer to bf16)
OFFLOAD_WIRE_BYTES = 2.0  # ZeRO-Offload moves 16-bit gradients down and 16-bit parameters up (arXiv:2101.06840 §4.1)
ACTIVATION_OFFLOAD_RESIDENT_LAYERS = 2  # the layer being copied out and the one prefetched back (torchtune)


@dataclass(frozen=True)
class MemoryPlan:
    """One set of memory options a training layout runs with (the empty set is the plain layout)."""

    options: frozenset[MemoryOption] = frozenset()

    def has(self, option: MemoryOption) -> bool:
        return option in self.options

    def without(self, option: MemoryOption) -> MemoryPlan:
        return replace(self, options=self.options - {option})

    @property
    def codes(self) -> list[str]:
        """The options in :data:`MEMORY_OPTIONS` order (what estimates, rows and plans record)."""
        return [o for o in MEMORY_OPTIONS if o in self.options]

    @classmethod
    def of(cls, options: Iterable[str]) -> MemoryPlan:
        wanted = set(options)
        return cls(frozenset(o for o in MEMORY_OPTIONS if o in wanted))


PLAIN = MemoryPlan()


def optimizer_name(optimizer: str, plan: MemoryPlan) -> str:
    """The optimizer as the framework names it: ``adamw``, ``adamw8bit`` or ``paged_adamw8bit`` for AdamW."""
    if optimizer != "adamw" or not plan.has("adamw8bit"):
        return optimizer
    return "paged_adamw8bit" if plan.has("paged_optimizer") else "adamw8bit"


def state_bytes_per_param(precision: str, optimizer: str, plan: MemoryPlan = PLAIN) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per trained parameter under ``plan``.

    Mixed precision: 16-bit weights 2 + fp32 gradients 4 + fp32 master 4 + moments (Megatron-LM
    ``theoretical_memory_usage.py``: 18 B/param with AdamW). ``bf16_weights``: 2 + 2 + moments in the
    parameters' dtype (AdamW 4). ``adamw8bit``: moments 2 B plus block scales, whatever the weights.
    fp32 training: 4 + 4 + moments.
    """
    moments = {"adamw": 8.0, "sgd": 4.0, "adafactor": 0.0}[optimizer]
    if precision == "fp32":
        weights, grads, master = 4.0, 4.0, 0.0
    elif plan.has("bf16_weights"):
        weights, grads, master, moments = 2.0, 2.0, 0.0, moments / 2.0
    else:
        weights, grads, master = 2.0, 4.0, 4.0
    if optimizer == "adamw" and plan.has("adamw8bit"):
        moments = ADAM8BIT_BYTES_PER_PARAM
    return weights, grads, master + moments


def pageable_fraction(precision: str, plan: MemoryPlan, optimizer_bytes_per_param: float) -> float:
    """Share of the optimizer bytes a paged optimizer can evict: its moments, not an fp32 master copy (the
    master weights are the parameters the model trains, ordinary device memory)."""
    if optimizer_bytes_per_param <= 0:
        return 0.0
    master = 0.0 if precision == "fp32" or plan.has("bf16_weights") else 4.0
    return max(0.0, optimizer_bytes_per_param - master) / optimizer_bytes_per_param


def adapter_state_bytes_per_param(optimizer: str, plan: MemoryPlan = PLAIN) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per LoRA/QLoRA adapter parameter: no fp32 master copy.

    QLoRA §3 (arXiv:2305.14314): the adapters train in the 16-bit compute dtype (BFloat16), so 2 B weights and
    2 B gradients; the reference code's optimizer (``paged_adamw_32bit``) keeps fp32 moments, 8 B: 12 B/param,
    not mixed precision's 18. ``bf16_weights`` (torchtune) keeps the moments in bf16 (4 B); 8-bit AdamW 2 B.
    """
    moments = {"adamw": 8.0, "sgd": 4.0, "adafactor": 0.0}[optimizer]
    if plan.has("bf16_weights"):
        moments /= 2.0
    if optimizer == "adamw" and plan.has("adamw8bit"):
        moments = ADAM8BIT_BYTES_PER_PARAM
    return ADAPTER_BYTES, ADAPTER_BYTES, moments


def in_backward_gradient_bytes(largest_param_on_gpu: float, grad_bytes_per_param: float) -> float:
    """Gradients live at once under optimizer-in-backward: the largest single parameter's (torchtune hooks)."""
    return largest_param_on_gpu * grad_bytes_per_param


def offloaded_activation_bytes(stored_per_layer: float, layers: int) -> float:
    """Stored activations left on the GPU under activation offload: the layer in transit and the one prefetched."""
    return stored_per_layer * min(layers, ACTIVATION_OFFLOAD_RESIDENT_LAYERS)


def paged_split(state_bytes: float, free_bytes: float) -> tuple[float, float]:
    """(resident, spilled) optimizer state under paging: what fits the GPU's free memory stays, the rest spills."""
    resident = min(state_bytes, max(free_bytes, 0.0))
    return resident, state_bytes - resident


def pcie_one_way_bytes_per_s(pcie_bandwidth_gb_per_s: float, link_efficiency: float) -> float:
    """One direction of the GPU's PCIe link, bytes/s: the catalog's figure is both directions together."""
    return pcie_bandwidth_gb_per_s * 1e9 / 2.0 * link_efficiency


def paging_s(spilled_bytes: float, one_way_bytes_per_s: float, *, step_compute_s: float | None = None) -> float:
    """Exposed PCIe time of a paged optimizer per step: the spilled state pages in for the update and out again.

    After backward (a plain optimizer step): both transfers are exposed, ``2·spilled / bw``. Under
    optimizer-in-backward (``step_compute_s`` given) each parameter's update runs inside backward and
    bitsandbytes prefetches its pages asynchronously (``cudaMemPrefetchAsync``), so pages come in under the
    backward compute (two thirds of the step) and go out under the next forward's allocations (one third);
    only what outlasts them is exposed.
    """
    wire = spilled_bytes / one_way_bytes_per_s
    if step_compute_s is None:
        return 2.0 * wire
    return max(0.0, wire - 2.0 * step_compute_s / 3.0) + max(0.0, wire - step_compute_s / 3.0)


def optimizer_offload_s(params_on_gpu: float, backward_s: float, one_way_bytes_per_s: float) -> float:
    """Exposed PCIe time of ZeRO-Offload per step.

    16-bit gradients stream down during backward (overlapped: only what outlasts backward shows) and the
    updated 16-bit parameters come back after the CPU step (exposed). Ren et al. 2021 §4.1-4.2. The CPU's
    own update time is not included.
    """
    wire = params_on_gpu * OFFLOAD_WIRE_BYTES / one_way_bytes_per_s
    return max(0.0, wire - backward_s) + wire


def activation_offload_s(stored_bytes: float, micro_s: float, one_way_bytes_per_s: float) -> float:
    """Exposed PCIe time of activation offload for one micro-batch.

    The stored activations go out during forward (a third of the micro-batch's compute) and come back during
    backward (two thirds), each on its own stream; only what outlasts its phase is exposed.
    """
    wire = stored_bytes / one_way_bytes_per_s
    return max(0.0, wire - micro_s / 3.0) + max(0.0, wire - 2.0 * micro_s / 3.0)


def memory_plans(
    allowed: Sequence[str],
    *,
    optimizer: str,
    precision: str,
    forced: Sequence[str] = (),
    forbidden: Sequence[str] = (),
) -> list[MemoryPlan]:
    """The plans tried, cheapest in step time first, each adding one allowed option to the one before.

    Order: no fp32 master copy and optimizer-in-backward (no time cost), 8-bit AdamW (less to update), then
    activation offload (PCIe time, mostly overlapped), paging (spilled state crosses PCIe every step) and CPU
    offload of the optimizer (gradients and parameters cross PCIe every step). 8-bit and paged apply to AdamW;
    fp32 training has no master copy to drop. ``forced`` options are in every plan (a pinned estimate),
    ``forbidden`` ones in none.
    """
    usable = [o for o in MEMORY_OPTIONS if o in allowed and o not in forbidden and o not in forced]
    if optimizer != "adamw":
        usable = [o for o in usable if o not in ("adamw8bit", "paged_optimizer")]
    if precision == "fp32":
        usable = [o for o in usable if o != "bf16_weights"]
    plans = [MemoryPlan.of(forced)]
    for option in usable:
        plans.append(MemoryPlan(plans[-1].options | {option}))
    return plans


def pinned_options(optimizer: str | None, offload: str | None) -> tuple[list[str], list[str]]:
    """(forced, forbidden) options for ``estimate --optimizer adamw|adamw8bit|paged_adamw8bit`` and
    ``--offload none|optimizer|activations|both`` (None: not pinned)."""
    forced: list[str] = []
    forbidden: list[str] = []
    if optimizer == "adamw":
        forbidden += ["adamw8bit", "paged_optimizer"]
    elif optimizer == "adamw8bit":
        forced.append("adamw8bit")
        forbidden.append("paged_optimizer")
    elif optimizer == "paged_adamw8bit":
        forced += ["adamw8bit", "paged_optimizer"]
    if offload is not None:
        wanted = {"none": [], "optimizer": ["optimizer_offload"], "activations": ["activation_offload"]}.get(
            offload, ["optimizer_offload", "activation_offload"]
        )
        forced += wanted
        forbidden += [o for o in ("optimizer_offload", "activation_offload") if o not in wanted]
    return forced, forbidden
