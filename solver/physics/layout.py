"""A layout: how one serving replica or one training model copy is split over its GPUs, and at what precision.

One value passed whole through the physics, the candidate rows, the evaluation, the checker and export, instead of
the six to nine loose arguments (``tp, pp, cp, ep, attention_dp, virtual_stages, recompute, quant, kv_precision``)
that used to travel separately. The frameworks' own names: Megatron-LM's ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--context-parallel-size``, ``--expert-model-parallel-size``,
``--num-layers-per-virtual-pipeline-stage`` and ``--recompute-granularity``; vLLM's ``--tensor-parallel-size``,
``--pipeline-parallel-size``, ``--enable-expert-parallel`` and ``--data-parallel-size`` (attention DP).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Recompute = Literal["none", "selective", "full"]


@dataclass(frozen=True)
class Layout:
    """One replica's (serving) or one model copy's (training) parallel split and precisions.

    ``tp``: tensor-parallel degree (inside an NVLink domain); ``pp``: pipeline stages; ``cp``: context-parallel
    degree (training); ``ep``: expert-parallel degree (MoE); ``attention_dp``: attention data-parallel across the
    ``ep`` ranks (serving, MoE); ``virtual_stages``: interleaved chunks per pipeline stage (training);
    ``recompute``: activation recompute (training) and ``recompute_layers`` the layers fully recomputed per stage
    (None: every layer the recompute mode covers); ``quant``: weight precision; ``kv_precision``: KV-cache precision
    (serving).
    """

    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    attention_dp: bool = False
    virtual_stages: int = 1
    recompute: Recompute = "none"
    recompute_layers: int | None = None
    quant: str = "bf16"
    kv_precision: str = "bf16"

    @property
    def expert_parallel_only(self) -> bool:
        """No tensor-parallel collective in the stage: attention data-parallel and every expert whole on one GPU
        (``ep = tp > 1``). Only the MoE all-to-all joins the stage's GPUs, so the stage may span servers over their
        network (wide EP: SGLang ``--tp 32 --dp 32 --enable-dp-attention --ep-size 32 --moe-a2a-backend deepep
        --nnodes 4``; vLLM ``--data-parallel-size 32 --enable-expert-parallel --all2all-backend deepep_*``)."""
        return self.attention_dp and self.ep == self.tp > 1
