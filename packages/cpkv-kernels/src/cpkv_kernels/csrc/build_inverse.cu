// build_inverse: inverse[b, req_pages[b, j]] = slot_table[b, j], every other entry -1.
// Reference: cpkv_runtime's torch backend, op "build_inverse".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

constexpr int64_t kChunk = 4096;  // inverse entries owned by one block

// Block (c, b) owns inverse[b, c*kChunk : (c+1)*kChunk]: it writes -1 there, then, after a
// barrier, scans request b's page list and writes the slots of the pages inside its range. One
// owner per entry, so there is no inter-block ordering to arrange and the result is deterministic.
__global__ void __launch_bounds__(kThreads) build_inverse_kernel(BuildInverseArgs a) {
  const int64_t b = blockIdx.y;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int64_t hi = lo + kChunk < a.num_pages ? lo + kChunk : a.num_pages;
  int32_t* row = a.inverse + b * a.num_pages;
  for (int64_t x = lo + threadIdx.x; x < hi; x += blockDim.x) row[x] = -1;
  __syncthreads();
  const int32_t* pages = a.req_pages + b * a.max_pages;
  const int32_t* slots = a.slot_table + b * a.max_pages;
  for (int64_t j = threadIdx.x; j < a.max_pages; j += blockDim.x) {
    const int64_t p = __ldg(pages + j);
    if (p >= lo && p < hi) row[p] = __ldg(slots + j);
  }
}

}  // namespace

cudaError_t launch_build_inverse(const BuildInverseArgs& a, cudaStream_t stream) {
  if (a.num_reqs == 0 || a.num_pages == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((a.num_pages + kChunk - 1) / kChunk),
                  static_cast<unsigned>(a.num_reqs));
  build_inverse_kernel<<<grid, kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace cpkv
