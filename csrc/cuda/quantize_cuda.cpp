// CUDA host side of sdpa::quantize_fp8: two kernels (amax, encode) on the current stream.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "../checks.h"
#include "../kernels/launch.h"

namespace sdpa {
namespace {

InputType input_type(at::ScalarType dtype) {
  if (dtype == at::kHalf) return InputType::kFloat16;
  if (dtype == at::kBFloat16) return InputType::kBFloat16;
  return InputType::kFloat32;
}

std::tuple<at::Tensor, at::Tensor> quantize_fp8_cuda(const at::Tensor& x, const std::optional<at::Tensor>& scale) {
  check_quantize_inputs(x, scale);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor codes = at::empty(x.sizes(), x.options().dtype(at::kFloat8_e4m3fn));
  at::Tensor scales = at::empty({x.size(0), x.size(1)}, x.options().dtype(at::kFloat));
  const at::Tensor given = scale.has_value() ? scale->contiguous() : at::Tensor();

  QuantizeParams p{};
  p.x = x.data_ptr();
  p.x_type = input_type(x.scalar_type());
  p.x_batch_stride = x.stride(0), p.x_head_stride = x.stride(1), p.x_row_stride = x.stride(2);
  p.x_col_stride = x.stride(3);
  p.batch = static_cast<int>(x.size(0));
  p.heads = static_cast<int>(x.size(1));
  p.rows = static_cast<int>(x.size(2));
  p.cols = static_cast<int>(x.size(3));
  p.codes = static_cast<uint8_t*>(codes.data_ptr());
  p.scale = scales.data_ptr<float>();
  p.given_scale = given.defined() ? given.data_ptr<float>() : nullptr;
  p.chunks = quantize_chunks(p);
  at::Tensor partial_amax;
  if (!given.defined()) {
    partial_amax = at::empty({x.size(0) * x.size(1) * p.chunks}, x.options().dtype(at::kFloat));
    p.partial_amax = partial_amax.data_ptr<float>();
  }
  const cudaError_t err = launch_quantize(p, at::cuda::getCurrentCUDAStream());
  TORCH_CHECK(err == cudaSuccess, "sdpa::quantize_fp8: kernel launch failed: ", cudaGetErrorString(err));
  return {codes, scales};
}

}  // namespace

TORCH_LIBRARY_IMPL(sdpa, CUDA, m) { m.impl("quantize_fp8", &quantize_fp8_cuda); }

}  // namespace sdpa
