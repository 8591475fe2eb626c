// Times the streaming quantizer (csrc/kernels/quantize/quantize_stream.cu, q, k and v of fp16 in one launch, then k
// and v alone as the drop-in's quantize_fp8_kv takes them) against a plain cast of the same bytes (read fp16, write
// codes under a fixed scale: no amax) and a plain read, by CUDA-graph replay, and checks its codes and scales against
// a naive per-head reference. Built from the kernel's source alone, in seconds, so that a change to it can be timed
// without building the extension (sm_90):
//   nvcc -O3 -std=c++17 --expt-relaxed-constexpr -arch=sm_90a -I csrc/kernels scripts/bench_quantize_stream.cu \
//     -o /tmp/bench_stream && /tmp/bench_stream
// Exits 1 if a code or scale differs. Inputs: a hash of the index turned into normal values (deterministic), scaled
// by 1 to 7 per 4096 values so that heads differ.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "quantize/quantize_stream.cu"

namespace bench {

using namespace sdpa;

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::printf("%s: %s\n", what, cudaGetErrorString(err));
    std::exit(1);
  }
}

__global__ void fill_normal(__half* x, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const uint32_t g = (h * 747796405u + 2891336453u) ^ (h >> 7);
    const float u1 = ((h >> 8) + 1) * (1.0f / 16777217.0f), u2 = (g >> 8) * (1.0f / 16777216.0f);
    x[i] = __float2half(sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2) * static_cast<float>(1 + i / 4096 % 7));
  }
}

// One block per head: its scale, then the codes that differ from the kernel's.
__global__ void reference_scales(const __half* x, int64_t head_values, float* scale) {
  float amax = 0.0f;
  const __half* head = x + blockIdx.x * head_values;
  for (int64_t i = threadIdx.x; i < head_values; i += blockDim.x) amax = fmaxf(amax, fabsf(__half2float(head[i])));
  amax = quantize::block_max<kQuantThreads>(amax);
  if (threadIdx.x == 0) scale[blockIdx.x] = scale_from_amax(amax);
}
__global__ void count_wrong_codes(const __half* x, int64_t head_values, const float* scale, const uint8_t* codes,
                                  unsigned* wrong) {
  const int64_t first = blockIdx.x * head_values;
  for (int64_t i = threadIdx.x; i < head_values; i += blockDim.x) {
    if (quantize_e4m3(__half2float(x[first + i]), scale[blockIdx.x]) != codes[first + i]) atomicAdd(wrong, 1u);
  }
}

__global__ void __launch_bounds__(256) plain_cast(const uint4* x, uint2* codes, int64_t vectors) {
  const E4m3Divisor divisor(0.5f, /*bounds_values=*/true);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors; i += int64_t{gridDim.x} * blockDim.x) {
    const uint4 v = x[i];
    const __half* elems = reinterpret_cast<const __half*>(&v);
    float values[8];
    for (int e = 0; e < 8; ++e) values[e] = __half2float(elems[e]);
    store_codes<8>(reinterpret_cast<uint8_t*>(codes + i), values, divisor);
  }
}
__global__ void __launch_bounds__(256) plain_read(const uint4* x, int64_t vectors, float* sink) {
  float amax = 0.0f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors; i += int64_t{gridDim.x} * blockDim.x) {
    amax = fmaxf(amax, quantize::vector_amax<__half>(x[i]));
  }
  amax = quantize::block_max<256>(amax);
  if (threadIdx.x == 0 && amax < 0.0f) *sink = amax;  // never: keeps the loads
}

// Median GPU time per call of `launch`, from 12 replays of a graph of 20 calls after 3 warm-up replays.
template <class Launch>
float graph_us(Launch launch, cudaStream_t stream) {
  constexpr int kCalls = 20;
  for (int i = 0; i < 3; ++i) launch();
  check(cudaStreamSynchronize(stream), "warm-up");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "capture");
  for (int i = 0; i < kCalls; ++i) launch();
  check(cudaStreamEndCapture(stream, &graph), "capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  std::vector<float> us;
  for (int r = 0; r < 15; ++r) {
    cudaEventRecord(begin, stream);
    check(cudaGraphLaunch(exec, stream), "replay");
    cudaEventRecord(end, stream);
    check(cudaEventSynchronize(end), "replay");
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, begin, end);
    if (r >= 3) us.push_back(ms * 1000.0f / kCalls);
  }
  std::sort(us.begin(), us.end());
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return us[us.size() / 2];
}

}  // namespace bench

int main() {
  using namespace bench;
  const int shapes[][4] = {{4, 16, 2048, 128}, {4, 16, 2048, 64}, {4, 32, 2048, 128},
                           {2, 16, 4096, 128}, {4, 16, 2048, 256}, {8, 16, 1024, 128},
                           {4, 16, 385, 128},  {8, 16, 1024, 64}};
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "device");
  bool all_right = true;
  std::printf("| fp16 | shape | quantizer us | plain cast us | plain read us | floor at 3.35 TB/s | wrong |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  constexpr int kShapes = sizeof(shapes) / sizeof(shapes[0]);
  for (int run = 0; run < 2 * kShapes; ++run) {  // q, k and v, then k and v
    const int tensors = run < kShapes ? 3 : 2;
    const auto& shape = shapes[run % kShapes];
    const int batch = shape[0], heads = shape[1], rows = shape[2], cols = shape[3];
    const int64_t per_tensor = int64_t{batch} * heads * rows * cols, head_values = int64_t{rows} * cols;
    const int all_heads = tensors * batch * heads;
    const char* label = tensors == 3 ? "q, k, v" : "k, v";
    __half* x;
    uint8_t* codes;
    float *scales, *expected;
    unsigned* wrong;
    check(cudaMalloc(&x, tensors * per_tensor * sizeof(__half)), "malloc");
    check(cudaMalloc(&codes, tensors * per_tensor), "malloc");
    check(cudaMalloc(&scales, all_heads * sizeof(float)), "malloc");
    check(cudaMalloc(&expected, all_heads * sizeof(float)), "malloc");
    check(cudaMalloc(&wrong, sizeof(unsigned)), "malloc");
    check(cudaMemsetAsync(wrong, 0, sizeof(unsigned), stream), "memset");
    fill_normal<<<1024, 256, 0, stream>>>(x, tensors * per_tensor, 12345u + rows + cols);
    QuantizeHeadsParams batch_params{};
    batch_params.count = tensors;
    batch_params.vectorized = true;
    for (int t = 0; t < tensors; ++t) {
      QuantizeParams& p = batch_params.tensors[t];
      p.x = x + t * per_tensor;
      p.x_type = InputType::kFloat16;
      p.x_batch_stride = int64_t{heads} * head_values;
      p.x_head_stride = head_values;
      p.x_row_stride = cols;
      p.x_col_stride = 1;
      p.batch = batch;
      p.heads = heads;
      p.rows = rows;
      p.cols = cols;
      p.codes = codes + t * per_tensor;
      p.scale = scales + t * batch * heads;
      p.vectorized = true;
      batch_params.first_block[t + 1] = batch_params.first_block[t] + batch * heads;
    }
    if (!quantize_heads_by_stream(batch_params, 90)) {
      std::printf("| %s | %dx%dx%dx%d | not taken by the streaming kernel | | | | |\n", label, batch, heads, rows,
                  cols);
      continue;
    }
    check(launch_quantize_heads_stream(batch_params, stream), "quantizer");
    reference_scales<<<all_heads, kQuantThreads, 0, stream>>>(x, head_values, expected);
    count_wrong_codes<<<all_heads, kQuantThreads, 0, stream>>>(x, head_values, expected, codes, wrong);
    check(cudaStreamSynchronize(stream), "check");
    std::vector<float> ours(all_heads), theirs(all_heads);
    unsigned wrong_codes = 0;
    check(cudaMemcpy(ours.data(), scales, all_heads * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(theirs.data(), expected, all_heads * sizeof(float), cudaMemcpyDeviceToHost), "copy");
    check(cudaMemcpy(&wrong_codes, wrong, sizeof(unsigned), cudaMemcpyDeviceToHost), "copy");
    int wrong_scales = 0;
    for (int h = 0; h < all_heads; ++h) wrong_scales += ours[h] != theirs[h];
    all_right = all_right && wrong_codes == 0 && wrong_scales == 0;
    const int64_t vectors = tensors * per_tensor / 8;
    const float quantizer = graph_us([&] { launch_quantize_heads_stream(batch_params, stream); }, stream);
    const uint4* values = reinterpret_cast<const uint4*>(x);
    const float cast = graph_us(
        [&] { plain_cast<<<sms * 8, 256, 0, stream>>>(values, reinterpret_cast<uint2*>(codes), vectors); }, stream);
    const float read = graph_us([&] { plain_read<<<sms * 8, 256, 0, stream>>>(values, vectors, expected); }, stream);
    const double floor_us = 3.0 * per_tensor * tensors / 3.35e6;  // 2 bytes read, 1 written per value
    std::printf("| %s | %dx%dx%dx%d | %.1f | %.1f | %.1f | %.1f | %u codes, %d scales |\n", label, batch, heads, rows,
                cols, quantizer, cast, read, floor_us, wrong_codes, wrong_scales);
    cudaFree(x);
    cudaFree(codes);
    cudaFree(scales);
    cudaFree(expected);
    cudaFree(wrong);
  }
  return all_right ? 0 : 1;
}
