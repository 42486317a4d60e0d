"""Read a model architecture from a local Hugging Face ``config.json`` (no network).

The file is the user's input like the requirement: NaN, Infinity, numbers too long to convert, nesting too
deep to decode and fields of the wrong type are refused with the field named, never passed to arithmetic.

Families read (tests/data/hf_configs/ holds one real config of each): Llama 1-3, Mistral, Mixtral, Qwen2/2.5,
Qwen3 and Qwen3-MoE, DeepSeek-V3/R1 and Kimi K2 (``DeepseekV3ForCausalLM``: MLA, shared expert, dense first
layers, MTP), Llama 4 (``text_config`` nesting, chunked attention, interleaved MoE with a shared expert),
gpt-oss (alternating 128-token sliding windows), GLM-4.5 (``Glm4MoeForCausalLM``), Qwen3-Next and Qwen3.5 (hybrid
Gated DeltaNet / gated full attention: ``layer_types``, ``full_attention_interval``, ``linear_*``, MTP layers) and
MiniMax-M2/M2.5 (``use_mtp``, ``num_mtp_modules``; ``attn_type_list`` of softmax layers only).

No silent misreads: every key is either read (:data:`READ_KEYS`), known not to change parameters, FLOPs or
KV bytes (:data:`HARMLESS_KEYS`), or refused when its name says it may (:data:`ARITHMETIC_WORDS`: an unknown
``*_lora_rank``, ``*expert*``, ``*window*``, ``*attention*`` ... key). Other unknown keys are listed as ignored
in the line :func:`derived_line` writes. Values of read keys that describe something not modelled (Qwen's
``use_sliding_window: true``, a layer pattern no field can express) are refused too, naming the key.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from clusterplan.catalog.schema import ModelArchitecture
from clusterplan.errors import ClusterplanError, HfConfigError, quoted, shorten
from clusterplan.inputs.yamlio import MAX_NUMBER_CHARS

MAX_HF_CONFIG_BYTES = 1 * 2**20

# Hugging Face model_type values whose MLP is a plain two-matrix MLP (GELU), not SwiGLU.
_UNGATED_MODEL_TYPES = {"gptj", "gpt2", "gpt_neox", "falcon", "mpt", "gpt_bigcode", "bloom", "opt", "phi"}
# DeepSeek-V3-shaped configs: moe_layer_freq counts as ``i % freq == 0`` there (modeling_deepseek.py).
_DEEPSEEK_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2"}

# Keys this reader turns into architecture fields (aliases across families included).
READ_KEYS = frozenset(
    {
        "num_hidden_layers", "n_layer", "n_layers", "num_layers",
        "hidden_size", "n_embd", "d_model",
        "num_attention_heads", "n_head", "n_heads",
        "num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query",
        "head_dim",
        "intermediate_size", "n_inner", "ffn_hidden_size", "intermediate_size_mlp",
        "vocab_size",
        "num_local_experts", "num_experts", "n_routed_experts",
        "num_experts_per_tok", "moe_topk", "experts_per_token",
        "moe_intermediate_size", "n_shared_experts", "shared_expert_intermediate_size",
        "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step", "interleave_moe_layer_step",
        "moe_layers", "mlp_only_layers",
        "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "qk_head_dim",
        "sliding_window", "use_sliding_window", "max_window_layers", "layer_types", "sliding_window_pattern",
        "attention_chunk_size", "no_rope_layers",
        "num_nextn_predict_layers", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings",
        "use_mtp", "num_mtp_modules", "mtp_transformer_layers", "attn_type_list", "shared_intermediate_size",
        "full_attention_interval", "attn_output_gate", "linear_num_key_heads", "linear_num_value_heads",
        "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim", "mamba_ssm_dtype",
        "max_position_embeddings", "n_positions", "seq_length",
        "tie_word_embeddings", "model_type", "_name_or_path", "text_config",
    }
)  # fmt: skip

# Keys that change no parameter count, FLOP count or KV byte: token ids, numerics, initialisation, routing
# rules (which experts, not how many), rotary settings, quantisation of the shipped checkpoint (the plan chooses
# its own precision), biases and norms (ignored by the parameter count, < 0.1%), and a multimodal wrapper's
# keys around ``text_config`` (the vision tower is not counted: a text-serving plan).
HARMLESS_KEYS = frozenset(
    {
        "architectures", "auto_map", "torch_dtype", "dtype", "transformers_version", "use_cache",
        "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
        "initializer_range", "initializer_factor", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
        "hidden_act", "activation_function", "hidden_dropout", "attention_dropout", "resid_pdrop", "embd_pdrop",
        "attn_pdrop", "dropout", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
        "partial_rotary_factor", "rotary_pct", "rotary_emb_base", "pretraining_tp", "quantization_config",
        "attention_bias", "mlp_bias", "use_qk_norm", "qk_layernorm",
        "aux_loss_alpha", "seq_aux", "ep_size", "n_group", "topk_group", "topk_method", "scoring_func",
        "routed_scaling_factor", "norm_topk_prob", "router_aux_loss_coef", "output_router_logits",
        "router_jitter_noise", "swiglu_limit", "initial_context_length",
        "attn_temperature_tuning", "attn_scale", "floor_scale", "for_llm_compressor",
        "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "rope_local_base_freq",
        "hidden_activation", "cache_implementation",
        "vision_config", "image_token_index", "boi_token_index", "eoi_token_index", "image_token_id",
        "is_decoder", "is_encoder_decoder", "id2label", "label2id", "task_specific_params",
        "video_token_id", "vision_start_token_id", "vision_end_token_id", "mrope_section", "mrope_interleaved",
        "qk_norm_type", "rotary_dim", "use_routing_bias", "mtp_loss_scaling_factor",
        "layernorm_full_attention_alpha", "layernorm_full_attention_beta", "layernorm_linear_attention_alpha",
        "layernorm_linear_attention_beta", "layernorm_mlp_alpha", "layernorm_mlp_beta", "postnorm",
    }
)  # fmt: skip

# Words in a key's name that say it may change the arithmetic (attention shape, experts, windows, caches,
# extra heads): such a key this reader does not know is refused, never ignored.
ARITHMETIC_WORDS = (
    "lora", "expert", "moe", "window", "attention", "attn", "sparse", "layer_types", "nextn", "mtp", "chunk",
    "head", "kv", "latent", "router", "topk", "top_k", "local", "global", "nope", "mlp", "shared", "dense",
    "compress", "index", "linear", "ssm", "mamba", "conv", "state", "hash", "group", "intermediate",
)  # fmt: skip

_LOCAL_LAYER_TYPES = {"sliding_attention": "sliding", "chunked_attention": "chunked"}
_GLOBAL_LAYER_TYPES = {"full_attention"}
_LINEAR_LAYER_TYPE = "linear_attention"  # Gated DeltaNet (Qwen3-Next, Qwen3.5 layer_types)
# Qwen3-Next gates every full-attention output (modeling_qwen3_next.py: q_proj of width 2·a·d) without a key
_GATED_ATTENTION_TYPES = {"qwen3_next"}
_STATE_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}  # mamba_ssm_dtype: the recurrent state's
_LLAMA4_NOPE_INTERVAL = 4  # transformers Llama4TextConfig: no_rope_layers default, every 4th layer global (NoPE)


@dataclass(frozen=True)
class _Source:
    where: str
    text: str

    def at(self, key: str) -> str:
        """``file:line:col`` of the first ``"key":`` in the file, else the file."""
        match = re.search(r'"' + re.escape(key) + r'"\s*:', self.text)
        if match is None:
            return self.where
        line = self.text.count("\n", 0, match.start()) + 1
        col = match.start() - (self.text.rfind("\n", 0, match.start()) + 1) + 1
        return f"{self.where}:{line}:{col}"


@dataclass(frozen=True)
class HfConfigRead:
    """What :func:`load_hf_config` read: the architecture, where from, and the unknown keys it ignored."""

    arch: ModelArchitecture
    where: str
    ignored: tuple[str, ...]


def read_hf_config(path: Path, *, name: str | None = None) -> ModelArchitecture:
    """Architecture from a Hugging Face ``config.json`` on disk (no network)."""
    return load_hf_config(path, name=name).arch


def load_hf_config(path: Path, *, name: str | None = None) -> HfConfigRead:
    """:class:`HfConfigRead` of a Hugging Face ``config.json`` on disk (no network)."""
    where = shorten(str(path))
    try:
        if not path.is_file():
            raise ClusterplanError(
                f"hf_config: no such file {where}",
                fix="give the path of a local config.json, relative to the requirement file",
            )
        if path.stat().st_size > MAX_HF_CONFIG_BYTES:
            raise ClusterplanError(f"hf_config: {where} is larger than {MAX_HF_CONFIG_BYTES:,} bytes")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ClusterplanError(f"hf_config: cannot read {where}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ClusterplanError(f"hf_config: {where} is not UTF-8 text") from None
    return parse_hf_config(text, where=where, name=name, stem=path.stem)


def parse_hf_config(text: str, *, where: str, name: str | None = None, stem: str = "config") -> HfConfigRead:
    """:class:`HfConfigRead` of the text of a ``config.json``; ``where`` names the file in messages."""
    try:
        cfg = json.loads(text, parse_constant=_refuse_constant, parse_int=_json_int, parse_float=_json_float)
    except json.JSONDecodeError as exc:
        raise ClusterplanError(f"hf_config: {where} is not valid JSON: {exc}") from None
    except _BadJsonNumber as exc:
        raise ClusterplanError(f"hf_config: {where} is not a usable config: {exc}") from None
    except RecursionError:
        raise ClusterplanError(f"hf_config: {where} is nested too deeply to be a model config") from None
    if not isinstance(cfg, dict):
        raise ClusterplanError(f"hf_config: {where} must hold a JSON object")
    src = _Source(where, text)
    family = cfg.get("model_type")  # the outer model_type names the family engines key on (qwen3_5_moe, llama4)
    if isinstance(cfg.get("text_config"), dict):
        cfg = {**cfg, **cfg["text_config"]}
    elif cfg.get("text_config") is not None:  # a string or a list once passed unread: the text model is in there
        raise _refuse(
            src,
            "text_config",
            f"expected a JSON object (the language model's config), got {quoted(cfg['text_config'])}",
        )
    _check_keys(cfg, src)
    ignored = tuple(sorted(k for k in cfg if k not in READ_KEYS and k not in HARMLESS_KEYS))
    arch = _architecture(cfg, src, name=name, stem=stem)
    if isinstance(family, str) and family:
        arch = arch.model_copy(update={"hf_model_type": family.lower()})
    return HfConfigRead(arch, where, ignored)


def _check_keys(cfg: dict[str, Any], src: _Source) -> None:
    for key in cfg:
        if key in READ_KEYS or key in HARMLESS_KEYS:
            continue
        lowered = key.lower()
        word = next((w for w in ARITHMETIC_WORDS if w in lowered), None)
        if word is not None:
            raise HfConfigError(
                f"hf_config: {src.at(key)}: {quoted(key)} is not understood; a field about {word!r} may change "
                "the parameter count, FLOPs or KV cache, and clusterplan will not guess",
                fix="describe the model inline (model: {name: ..., layers: ..., ...}) with the fields of "
                "docs/model.md, or remove the key if it does not change the architecture",
            )


def _whole(cfg: dict[str, Any], src: _Source, *keys: str, default: Any = None) -> tuple[str, Any]:
    """The first of ``keys`` present (not null), as a whole number, else ``default``."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if not _is_whole(value):
            raise HfConfigError(f"hf_config: {src.at(key)}: {key}: expected a whole number, got {quoted(value)}")
        return key, int(value)
    return keys[0], default


def _refuse(src: _Source, key: str, message: str) -> HfConfigError:
    return HfConfigError(f"hf_config: {src.at(key)}: {key}: {message}; clusterplan will not guess")


def _layer_list(cfg: dict[str, Any], src: _Source, key: str, layers: int) -> list[Any] | None:
    value = cfg.get(key)
    if value is None or value == []:
        return None
    if not isinstance(value, list) or len(value) != layers:
        raise _refuse(src, key, f"expected a list of one entry per layer ({layers})")
    return value


def _every(flags: list[bool]) -> int | None:
    """n when exactly the layers with ``(i + 1) % n == 0`` are flagged; None when no n fits."""
    if not any(flags):
        return None
    n = flags.index(True) + 1
    if n < 2 or any(flag != ((i + 1) % n == 0) for i, flag in enumerate(flags)):
        return None
    return n


def _window(cfg: dict[str, Any], src: _Source, model_type: str, layers: int) -> dict[str, Any]:
    """attention_window, its kind and global_attention_every from whichever keys the family uses."""
    if model_type.startswith("llama4"):
        _, chunk = _whole(cfg, src, "attention_chunk_size")
        if chunk is None:
            return {}
        uses_rope = _layer_list(cfg, src, "no_rope_layers", layers)
        if uses_rope is None:
            local = [(i + 1) % _LLAMA4_NOPE_INTERVAL != 0 for i in range(layers)]
        else:
            local = [bool(v) for v in uses_rope]
        every = _every([not flag for flag in local])
        if not all(local) and every is None:
            raise _refuse(src, "no_rope_layers", "the global (NoPE) layers are not every n-th layer")
        return {"attention_window": chunk, "attention_window_kind": "chunked", "global_attention_every": every}
    if cfg.get("attention_chunk_size") is not None:
        raise _refuse(src, "attention_chunk_size", f"chunked attention is read for Llama 4 only, not {model_type!r}")
    _, window = _whole(cfg, src, "sliding_window")
    if cfg.get("use_sliding_window") is True:
        raise _refuse(src, "use_sliding_window", "Qwen's sliding window over max_window_layers is not modelled")
    if window is None:
        if cfg.get("layer_types") and any(t not in {"full_attention", _LINEAR_LAYER_TYPE} for t in cfg["layer_types"]):
            raise _refuse(src, "layer_types", "local layers are listed but sliding_window is not set")
        return {}
    if "use_sliding_window" in cfg:  # Qwen: the window is off unless use_sliding_window is true
        return {}
    types = _layer_list(cfg, src, "layer_types", layers)
    if types is not None:
        if _LINEAR_LAYER_TYPE in types:
            raise _refuse(src, "layer_types", "linear-attention layers beside sliding or chunked ones are not modelled")
        unknown = [t for t in types if t not in _LOCAL_LAYER_TYPES and t not in _GLOBAL_LAYER_TYPES]
        if unknown:
            raise _refuse(src, "layer_types", f"layer type {quoted(unknown[0])} is not understood")
        kinds = {_LOCAL_LAYER_TYPES[t] for t in types if t in _LOCAL_LAYER_TYPES}
        if not kinds:
            return {}
        if len(kinds) > 1:
            raise _refuse(src, "layer_types", "mixes sliding and chunked local layers")
        local = [t in _LOCAL_LAYER_TYPES for t in types]
        every = _every([not flag for flag in local])
        if not all(local) and every is None:
            raise _refuse(src, "layer_types", "the global layers are not every n-th layer")
        return {"attention_window": window, "attention_window_kind": kinds.pop(), "global_attention_every": every}
    _, pattern = _whole(cfg, src, "sliding_window_pattern")
    if pattern is not None:  # Gemma 2/3: every pattern-th layer global
        return {"attention_window": window, "global_attention_every": pattern if pattern > 1 else None}
    if model_type in {"mistral", "mixtral"}:  # Mistral 7B v0.1: every layer slides
        return {"attention_window": window}
    raise _refuse(src, "sliding_window", f"which layers of a {model_type or 'model'!r} use the window is not known")


def _linear(cfg: dict[str, Any], src: _Source, model_type: str, layers: int) -> dict[str, Any]:
    """Gated DeltaNet layers (``layer_types`` "linear_attention" or ``full_attention_interval``), their widths, the
    state's dtype and the gated attention output; MiniMax's ``attn_type_list`` (1: softmax attention)."""
    kinds = cfg.get("attn_type_list")
    if kinds is not None and (_layer_list(cfg, src, "attn_type_list", layers) is None or any(k != 1 for k in kinds)):
        raise _refuse(src, "attn_type_list", "lightning (linear) attention layers (0) are not modelled; only 1s are")
    _, interval = _whole(cfg, src, "full_attention_interval")
    types = _layer_list(cfg, src, "layer_types", layers)
    every = interval
    if types is not None and _LINEAR_LAYER_TYPE in types:
        every = _every([t != _LINEAR_LAYER_TYPE for t in types])
        if every is None:
            raise _refuse(src, "layer_types", "the full-attention layers are not every n-th layer")
        if interval is not None and interval != every:
            raise _refuse(src, "full_attention_interval", f"disagrees with layer_types (every {every}th layer full)")
    elif types is not None:
        every = None  # layer_types lists no linear layer: it wins over the interval
    gate = cfg.get("attn_output_gate", model_type in _GATED_ATTENTION_TYPES)
    if not isinstance(gate, bool):
        raise _refuse(src, "attn_output_gate", f"expected true or false, got {quoted(gate)}")
    out: dict[str, Any] = {"attention_output_gate": gate}
    if every is None or every <= 1:
        return out
    for field_name, key in (
        ("linear_key_heads", "linear_num_key_heads"), ("linear_value_heads", "linear_num_value_heads"),
        ("linear_key_head_dim", "linear_key_head_dim"), ("linear_value_head_dim", "linear_value_head_dim"),
        ("linear_conv_kernel", "linear_conv_kernel_dim"),
    ):  # fmt: skip
        _, value = _whole(cfg, src, key)
        if value is None:
            raise _refuse(src, "layer_types" if types else "full_attention_interval", f"linear layers lack {key}")
        out[field_name] = value
    dtype = cfg.get("mamba_ssm_dtype", "bfloat16")
    if dtype not in _STATE_DTYPE_BYTES:
        raise _refuse(src, "mamba_ssm_dtype", f"expected one of {', '.join(_STATE_DTYPE_BYTES)}, got {quoted(dtype)}")
    return {**out, "full_attention_every": every, "linear_state_bytes": _STATE_DTYPE_BYTES[dtype]}


def _mtp_layers(cfg: dict[str, Any], src: _Source) -> tuple[str, int]:
    """Multi-token-prediction layers: DeepSeek ``num_nextn_predict_layers``, Qwen3-Next/3.5 ``mtp_num_hidden_layers``
    or MiniMax ``num_mtp_modules x mtp_transformer_layers`` (when ``use_mtp``)."""
    if cfg.get("mtp_use_dedicated_embeddings") is True:
        raise _refuse(src, "mtp_use_dedicated_embeddings", "an MTP module with its own embedding is not modelled")
    if cfg.get("num_mtp_modules") is not None:
        _, modules = _whole(cfg, src, "num_mtp_modules")
        _, depth = _whole(cfg, src, "mtp_transformer_layers", default=1)
        return "num_mtp_modules", modules * depth if cfg.get("use_mtp", True) is not False else 0
    return _whole(cfg, src, "num_nextn_predict_layers", "mtp_num_hidden_layers", default=0)


def _moe(cfg: dict[str, Any], src: _Source, model_type: str, layers: int, ffn: int | None) -> dict[str, Any]:
    """Experts, top-k, widths, shared experts and the layer pattern from whichever keys the family uses."""
    _, experts = _whole(cfg, src, "num_local_experts", "num_experts", "n_routed_experts", default=1)
    _, top_k = _whole(cfg, src, "num_experts_per_tok", "moe_topk", "experts_per_token", default=1)
    if cfg.get("experts_per_token") is not None and cfg.get("num_experts_per_tok") is not None:
        _, other = _whole(cfg, src, "experts_per_token")
        if other != top_k:
            raise _refuse(src, "experts_per_token", f"disagrees with num_experts_per_tok ({top_k})")
    if experts <= 1:
        if top_k > 1:  # num_local_experts: 0 beside num_experts_per_tok: 2 was read as a dense model
            key, _ = _whole(cfg, src, "num_experts_per_tok", "moe_topk", "experts_per_token")
            raise _refuse(src, key, f"routes each token to {top_k} experts, but the config has {experts}")
        for key in ("moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layers"):
            if cfg.get(key):
                raise _refuse(src, key, "describes experts, but the config has none")
        return {"moe_experts": 1, "experts_per_token": 1}
    out: dict[str, Any] = {"moe_experts": experts, "experts_per_token": top_k}
    _, moe_width = _whole(cfg, src, "moe_intermediate_size")
    if model_type.startswith("llama4"):
        # Llama4TextMoe: routed experts and one shared expert of intermediate_size; dense layers of
        # intermediate_size_mlp (transformers modeling_llama4.py).
        out.update(moe_intermediate_size=ffn, shared_experts=1)
        _, step = _whole(cfg, src, "interleave_moe_layer_step", default=1)
        out["moe_layer_freq"] = step
        listed = _layer_list_of_indices(cfg, src, "moe_layers", layers)
        if listed is not None and listed != [i for i in range(layers) if (i + 1) % step == 0]:
            raise _refuse(src, "moe_layers", "the MoE layers are not every interleave_moe_layer_step-th layer")
        return out
    if moe_width is not None:
        out["moe_intermediate_size"] = moe_width
    _, shared = _whole(cfg, src, "n_shared_experts", default=0)
    _, shared_width = _whole(cfg, src, "shared_expert_intermediate_size", "shared_intermediate_size")
    if shared_width:
        out.update(shared_experts=max(shared, 1), shared_expert_size=shared_width)
    elif shared:
        out["shared_experts"] = shared
    _, first_dense = _whole(cfg, src, "first_k_dense_replace", default=0)
    out["first_k_dense_replace"] = first_dense
    _, freq = _whole(cfg, src, "moe_layer_freq", "decoder_sparse_step", default=1)
    if freq != 1 and model_type in _DEEPSEEK_TYPES:
        raise _refuse(src, "moe_layer_freq", "DeepSeek's i % moe_layer_freq placement is modelled for 1 only")
    out["moe_layer_freq"] = freq
    if cfg.get("mlp_only_layers"):
        raise _refuse(src, "mlp_only_layers", "dense layers at listed positions are not modelled")
    return out


def _layer_list_of_indices(cfg: dict[str, Any], src: _Source, key: str, layers: int) -> list[int] | None:
    value = cfg.get(key)
    if value is None or value == []:
        return None
    if not isinstance(value, list) or not all(_is_whole(v) and 0 <= v < layers for v in value):
        raise _refuse(src, key, f"expected a list of layer indices below {layers}")
    return sorted(int(v) for v in value)


def _mla(cfg: dict[str, Any], src: _Source) -> dict[str, Any]:
    _, kv_rank = _whole(cfg, src, "kv_lora_rank")
    out: dict[str, Any] = {}
    for key in ("q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
        _, value = _whole(cfg, src, key)
        if value is not None and kv_rank is not None:
            out[key] = value
        elif value is not None and key != "q_lora_rank":
            raise _refuse(src, key, "is a multi-head latent attention field, but kv_lora_rank is not set")
    if kv_rank is None:
        if cfg.get("q_lora_rank") is not None:
            raise _refuse(src, "q_lora_rank", "a query LoRA without kv_lora_rank (MLA) is not modelled")
        return {}
    out["kv_lora_rank"] = kv_rank
    _, qk = _whole(cfg, src, "qk_head_dim")
    if qk is not None and qk != out.get("qk_nope_head_dim", 0) + out.get("qk_rope_head_dim", 0):
        raise _refuse(src, "qk_head_dim", "is not qk_nope_head_dim + qk_rope_head_dim")
    return out


def _architecture(cfg: dict[str, Any], src: _Source, *, name: str | None, stem: str) -> ModelArchitecture:
    model_type = cfg.get("model_type")
    model_type = model_type.lower() if isinstance(model_type, str) else ""
    picked = {
        "layers": _whole(cfg, src, "num_hidden_layers", "n_layer", "n_layers", "num_layers"),
        "hidden_size": _whole(cfg, src, "hidden_size", "n_embd", "d_model"),
        "attention_heads": _whole(cfg, src, "num_attention_heads", "n_head", "n_heads"),
        "kv_heads": _whole(cfg, src, "num_key_value_heads", "num_kv_heads", "n_head_kv"),
        "head_dim": _whole(cfg, src, "head_dim"),
        "ffn_size": _whole(cfg, src, "intermediate_size", "n_inner", "ffn_hidden_size"),
        "vocab_size": _whole(cfg, src, "vocab_size", default=32000),
        "max_context": _whole(cfg, src, "max_position_embeddings", "n_positions", "seq_length"),
        "mtp_layers": _mtp_layers(cfg, src),
    }
    keys = {field_name: key for field_name, (key, _value) in picked.items()}
    values: dict[str, Any] = {field_name: value for field_name, (_key, value) in picked.items()}
    layers, hidden, heads = values["layers"], values["hidden_size"], values["attention_heads"]
    if layers is None or hidden is None or heads is None:
        raise ClusterplanError(f"hf_config: {src.where} lacks num_hidden_layers, hidden_size or num_attention_heads")
    if values["kv_heads"] is None:
        values["kv_heads"] = 1 if cfg.get("multi_query") is True else heads
    expert_width = values["ffn_size"]
    if model_type.startswith("llama4"):
        key, dense_width = _whole(cfg, src, "intermediate_size_mlp")
        if dense_width is not None:
            values["ffn_size"], keys["ffn_size"] = dense_width, key
    if values["ffn_size"] is None:
        values["ffn_size"] = 4 * int(hidden)  # the GPT-2 convention when a config omits it
    if layers >= 1:
        values.update(_moe(cfg, src, model_type, int(layers), expert_width))
        values.update(_window(cfg, src, model_type, int(layers)))
        values.update(_linear(cfg, src, model_type, int(layers)))
    mla = _mla(cfg, src)
    if mla:
        values.update(mla)
        values["head_dim"] = None  # MLA heads are qk_nope + qk_rope (queries, keys) and v_head_dim (values)
    own_name = cfg.get("_name_or_path")
    data = {
        **values,
        "name": name or (own_name if isinstance(own_name, str) and own_name else None) or model_type or stem,
        "gated_mlp": model_type not in _UNGATED_MODEL_TYPES,
        "hf_model_type": model_type or None,
        "tied_embeddings": cfg.get("tie_word_embeddings") is True,
    }
    try:
        return ModelArchitecture.model_validate(data)
    except ValidationError as exc:  # restate against the file, one field per clause
        clauses = [
            f"{keys.get(str(err['loc'][0]), err['loc'][0]) if err['loc'] else 'config'}: {err['msg']}"
            + (f", got {quoted(err['input'])}" if err["loc"] and not isinstance(err["input"], dict) else "")
            for err in exc.errors(include_url=False)
        ]
        raise ClusterplanError(
            f"hf_config: {src.where} does not describe a usable architecture: " + "; ".join(clauses)
        ) from None


def derived_line(read: HfConfigRead) -> str:
    """What the reader derived, for the plan's assumptions and ``validate``: parameters and KV bytes per token."""
    from clusterplan.physics import memory, params

    arch, where = read.arch, read.where
    total, active, mtp = params.total_params(arch), params.active_params(arch), params.mtp_params(arch)
    kv = memory.kv_bytes_per_token_per_gpu(arch, tp=1, pp=1, kv_precision="bf16")
    text = f"model {arch.name} read from {where}: {total / 1e9:,.1f}B parameters"
    if active != total:
        text += f", {active / 1e9:,.1f}B active per token"
    if mtp:
        text += f" (+{mtp / 1e9:,.1f}B in {arch.mtp_layers} MTP module(s), held only for speculative: mtp)"
    text += f"; KV cache {kv:,.0f} B/token at 16 bits"
    if arch.is_mla:
        text += f" (MLA latent {arch.kv_lora_rank} + {arch.qk_rope_head_dim} values x {arch.layers} layers)"
    if arch.linear_layer_count:
        state = memory.kv_bytes_per_sequence_per_gpu(arch, 0.0, tp=1, pp=1, kv_precision="bf16")
        text += (
            f" in {arch.softmax_layer_count} full-attention layers; {arch.linear_layer_count} linear-attention "
            f"layers hold {state:,.0f} B of state per sequence"
        )
    if arch.attention_window is not None:
        text += (
            f", {arch.local_layer_count} of {arch.layers} layers capped at a {arch.attention_window:,}-token "
            f"{arch.attention_window_kind} window"
        )
    if read.ignored:
        text += "; ignored: " + ", ".join(shorten(k) for k in read.ignored[:10])
        text += f" and {len(read.ignored) - 10:,} more" if len(read.ignored) > 10 else ""
    return text


class _BadJsonNumber(ValueError):
    """A number in a JSON config that no architecture field can hold."""


def _refuse_constant(text: str) -> Any:
    raise _BadJsonNumber(f"{text} is not a number a model config can hold")


def _json_int(text: str) -> int:
    if len(text) > MAX_NUMBER_CHARS:  # Python refuses to convert beyond 4,300 digits; no field nears 100
        raise _BadJsonNumber(f"a number written with {len(text):,} digits is beyond any model's range")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or len(text) > MAX_NUMBER_CHARS:
        raise _BadJsonNumber(f"{shorten(text)} is beyond any model's range")
    return value


def _is_whole(value: Any) -> bool:
    """An integer, or a float with no fractional part (JSON writers emit 4096.0); never a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
