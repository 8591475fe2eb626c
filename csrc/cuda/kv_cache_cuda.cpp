// CUDA host side of sdpa::kv_cache_append: checks, params, one launch on the current stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <climits>
#include <optional>

#include "../checks.h"
#include "../kernels/dispatch/launch.h"
#include "input_types.h"

namespace sdpa {
namespace {

void kv_cache_append_cuda(const at::Tensor& k, const at::Tensor& v, const at::Tensor& k_cache,
                          const at::Tensor& v_cache, const at::Tensor& k_scale, const at::Tensor& v_scale,
                          const at::Tensor& start, const std::optional<at::Tensor>& k_shift) {
  check_kv_cache_append_inputs(k, v, k_cache, v_cache, k_scale, v_scale, start, k_shift);
  TORCH_CHECK(k_cache.size(2) <= INT_MAX / 2 && k.size(2) <= INT_MAX / 2,
              "k_cache: the capacity and the rows appended must fit 32-bit positions, got ", k_cache.sizes());
  const c10::cuda::CUDAGuard guard(k.device());
  const at::Tensor ks = k_scale.contiguous(), vs = v_scale.contiguous(), first = start.contiguous();
  const at::Tensor shift = k_shift.has_value() ? k_shift->contiguous() : at::Tensor();
  KvAppendParams p{};
  p.k = k.data_ptr(), p.v = v.data_ptr();
  p.type = input_type(k.scalar_type());
  p.k_batch_stride = k.stride(0), p.k_head_stride = k.stride(1), p.k_row_stride = k.stride(2);
  p.v_batch_stride = v.stride(0), p.v_head_stride = v.stride(1), p.v_row_stride = v.stride(2);
  p.k_cache = static_cast<uint8_t*>(k_cache.data_ptr()), p.v_cache = static_cast<uint8_t*>(v_cache.data_ptr());
  p.kc_batch_stride = k_cache.stride(0), p.kc_head_stride = k_cache.stride(1), p.kc_row_stride = k_cache.stride(2);
  p.vc_batch_stride = v_cache.stride(0), p.vc_head_stride = v_cache.stride(1), p.vc_row_stride = v_cache.stride(2);
  p.k_scale = ks.data_ptr<float>(), p.v_scale = vs.data_ptr<float>();
  p.k_shift = shift.defined() ? shift.data_ptr<float>() : nullptr;
  p.start = first.data_ptr<int>();
  p.batch = static_cast<int>(k.size(0)), p.heads = static_cast<int>(k.size(1)), p.rows = static_cast<int>(k.size(2));
  p.head_dim = static_cast<int>(k.size(3)), p.capacity = static_cast<int>(k_cache.size(2));
  const cudaError_t err = launch_kv_cache_append(p, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "sdpa::kv_cache_append: kernel launch failed: ", cudaGetErrorString(err));
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CUDA, m) { m.impl("kv_cache_append", &kv_cache_append_cuda); }

}  // namespace sdpa
