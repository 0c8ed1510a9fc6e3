"""cubinforge.runtime: launch registry cubins with the CUDA driver API, torch-free.

Depends only on the standard library and ``cuda-bindings`` (imported on first GPU use).
Arrays come in through DLPack, ``__cuda_array_interface__`` or raw pointers.

    from cubinforge.runtime import flash_attn_func, last_launch
    out, lse = flash_attn_func(q, k, v, causal=True)

    plan = plan_attention(q, k, v, causal=True, out=o, lse=lse)   # bound once ...
    plan.launch(stream)                                            # ... replayed per step
"""

from .arrays import DeviceArray, OwnedDeviceArray, as_device_array
from .attention import clear_cache, flash_attn_func, plan_attention, select_attention_variant
from .contract import Contract, bind, evaluate, load_contract
from .errors import (ContractError, CubinforgeError, CudaError, DriverUnavailable, InputError,
                     IntegrityError, UnverifiedVariant, VariantNotFound)
from .fp8 import quantize_fp8
from .kvcache import flash_attn_combine, flash_attn_with_kvcache, prepare_kvcache
from .launcher import Kernel, LaunchRecord, last_launch, launch_count
from .plan import AttentionPlan
from .varlen import flash_attn_varlen_func, prepare_varlen
from .registry_source import LocalSource, Manifest, Source, load_manifest, select

__all__ = [
    "flash_attn_func", "select_attention_variant", "last_launch", "clear_cache", "quantize_fp8",
    "flash_attn_with_kvcache", "flash_attn_combine", "prepare_kvcache",
    "flash_attn_varlen_func", "prepare_varlen",
    "plan_attention", "AttentionPlan", "launch_count",
    "Kernel", "LaunchRecord", "DeviceArray", "OwnedDeviceArray", "as_device_array",
    "Contract", "load_contract", "bind", "evaluate",
    "Manifest", "Source", "LocalSource", "load_manifest", "select",
    "CubinforgeError", "ContractError", "InputError", "VariantNotFound", "IntegrityError",
    "CudaError", "DriverUnavailable", "UnverifiedVariant",
]
