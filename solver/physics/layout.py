"""A layout: how one serving replica or one training model copy is split over its GPUs, and at what precision.

One value passed whole through the physics, the candidate rows, the evaluation, the checker and export, instead of
the six to nine loose arguments (``tp, pp, cp, ep, attention_dp, virtual_stages, recompute, quant, kv_precision``)
that used to travel separately. The frameworks' own names: Megatron-LM's ``--tensor-model-parallel-size``,
``--pipeline-model-parallel-size``, ``--context-parallel-size``, ``--expert-model-parallel-size``,
``--num-layers-per-virtual-pipeline-stage`` and ``--recompute-granularity``; vLLM's ``--tensor-parallel-size``,
``--pipeline-parallel-size``, ``--enable-expert-parallel`` and ``--data-parallel-size`` (attention DP).
"""

from __future__ import annotations

import math
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

    def nvlink_group(self, domain: int) -> int:
        """GPUs of one stage that must share one NVLink (or Infinity Fabric) domain of ``domain`` GPUs: the whole
        ``tp`` group, except an expert-parallel-only stage wider than the domain, which splits into ``gcd(tp, domain)``
        GPUs per server joined by the all-to-all over the servers' network (EP 32 on 8-GPU servers: 8)."""
        if self.expert_parallel_only and self.tp > domain >= 1:
            return math.gcd(self.tp, domain)
        return self.tp

    def servers(self, domain: int) -> int:
        """Servers (NVLink domains) one stage spans: ``tp / nvlink_group`` (1 unless wide expert parallelism)."""
        return self.tp // self.nvlink_group(domain)

    @property
    def expert_parallel_only(self) -> bool:
        """No tensor-parallel collective in the stage: attention data-parallel and every expert whole on one GPU
        (``ep = tp > 1``). Only the MoE all-to-all joins the stage's GPUs, so the stage may span servers over their
        network (wide EP: SGLang ``--tp 32 --dp 32 --enable-dp-attention --ep-size 32 --moe-a2a-backend deepep
        --nnodes 4``; vLLM ``--data-parallel-size 32 --enable-expert-parallel --all2all-backend deepep_*``)."""
        return self.attention_dp and self.ep == self.tp > 1
