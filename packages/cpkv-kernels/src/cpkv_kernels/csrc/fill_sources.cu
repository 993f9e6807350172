// fill_sources: sources[inverse[token_req[t], loc // P], loc % P] = t for every row fill_current
// writes (loc = out_cache_loc[t]), -1 elsewhere; where two rows name one dense row the larger t
// stays (atomicMax), as a sequential scatter leaves it. Rows fill_current skips are skipped.
// Reference: cpkv_runtime's torch backend, op "fill_sources".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

template <typename LocT>
__global__ void __launch_bounds__(kThreads) fill_sources_kernel(FillSourcesArgs a, int page_shift) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= a.num_tokens) return;
  const LocT loc = __ldg(static_cast<const LocT*>(a.loc) + t);
  const int64_t b = __ldg(a.token_req + t);
  if (loc < 0 || b < 0 || b >= a.num_reqs) return;
  int64_t page, offset;
  split_loc(loc, a.page_size, page_shift, page, offset);
  if (page >= a.num_pages) return;
  const int64_t slot = __ldg(a.inverse + b * a.num_pages + page);
  if (slot < 0 || slot >= a.num_slots) return;
  atomicMax(a.sources + slot * a.page_size + offset, static_cast<int32_t>(t));
}

}  // namespace

cudaError_t launch_fill_sources(const FillSourcesArgs& a, cudaStream_t stream) {
  const size_t bytes = static_cast<size_t>(a.num_slots) * a.page_size * sizeof(int32_t);
  if (bytes == 0) return cudaSuccess;
  cudaError_t err = cudaMemsetAsync(a.sources, 0xFF, bytes, stream);  // -1: no source
  if (err != cudaSuccess || a.num_tokens == 0 || a.num_reqs == 0) return err;
  const dim3 grid(static_cast<unsigned>((a.num_tokens + kThreads - 1) / kThreads));
  const int shift = page_shift_of(a.page_size);
  if (a.loc_is_64) {
    fill_sources_kernel<int64_t><<<grid, kThreads, 0, stream>>>(a, shift);
  } else {
    fill_sources_kernel<int32_t><<<grid, kThreads, 0, stream>>>(a, shift);
  }
  return cudaGetLastError();
}

}  // namespace cpkv
