// Every schema of the sdpa library, in one place. Backends register in csrc/cpu and csrc/cuda; the fake
// (meta) implementations are registered from Python in sdpa_ext/ops.py.
#include <Python.h>
#include <torch/library.h>

// `import sdpa_ext._C` loads this library, which runs the registrations below; the module itself is empty.
extern "C" {
PyObject* PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", nullptr, -1, nullptr};
  return PyModule_Create(&module_def);
}
}

TORCH_LIBRARY(sdpa, m) {
  m.def(
      "fp8_forward(Tensor q, Tensor k, Tensor v, Tensor? q_scale, Tensor k_scale, Tensor v_scale, "
      "bool is_causal=False, float? scale=None, ScalarType? out_dtype=None, str variant=\"auto\", "
      "Tensor? seqlens_k=None, str causal_alignment=\"top_left\", str q_quantization=\"per_head\") "
      "-> (Tensor out, Tensor lse)");
  m.def(
      "fp8_forward_into(Tensor q, Tensor k, Tensor v, Tensor? q_scale, Tensor k_scale, Tensor v_scale, "
      "Tensor(a!) out, Tensor(b!) lse, bool is_causal=False, float? scale=None, str variant=\"auto\", "
      "Tensor? seqlens_k=None, str causal_alignment=\"top_left\", str q_quantization=\"per_head\") -> ()");
  m.def("quantize_fp8(Tensor x, Tensor? scale=None) -> (Tensor x_fp8, Tensor scale)");
  m.def(
      "quantize_fp8_qkv(Tensor q, Tensor k, Tensor v, int? codes_width=None) "
      "-> (Tensor q_fp8, Tensor q_scale, Tensor k_fp8, Tensor k_scale, Tensor v_fp8, Tensor v_scale)");
  m.def(
      "quantize_fp8_kv(Tensor k, Tensor v, int? codes_width=None) "
      "-> (Tensor k_fp8, Tensor k_scale, Tensor v_fp8, Tensor v_scale)");
  m.def(
      "quantize_fp8_qkv_smooth_k(Tensor q, Tensor k, Tensor v) "
      "-> (Tensor q_fp8, Tensor q_scale, Tensor k_fp8, Tensor k_scale, Tensor v_fp8, Tensor v_scale, "
      "Tensor k_shift)");
  m.def(
      "kv_cache_append(Tensor k, Tensor v, Tensor(a!) k_cache, Tensor(b!) v_cache, Tensor k_scale, "
      "Tensor v_scale, Tensor start, Tensor? k_shift=None) -> ()");
}
