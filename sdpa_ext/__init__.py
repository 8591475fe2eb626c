"""sdpa_ext: FP8 (E4M3) scaled-dot-product attention for PyTorch."""

from sdpa_ext.attention import scaled_dot_product_attention
from sdpa_ext.kv_cache import FP8KVCache
from sdpa_ext.ops import fp8_forward, fp8_forward_into, kv_cache_append
from sdpa_ext.patch import patch_torch_sdpa
from sdpa_ext.quant import dequantize_fp8, quantize_fp8, quantize_fp8_kv, quantize_fp8_qkv
from sdpa_ext.variants import Variant, device_arch, variant_names, variants

__all__ = [
    "FP8KVCache",
    "Variant",
    "dequantize_fp8",
    "device_arch",
    "fp8_forward",
    "fp8_forward_into",
    "kv_cache_append",
    "patch_torch_sdpa",
    "quantize_fp8",
    "quantize_fp8_kv",
    "quantize_fp8_qkv",
    "scaled_dot_product_attention",
    "variant_names",
    "variants",
]
