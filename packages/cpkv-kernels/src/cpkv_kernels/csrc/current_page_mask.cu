// current_page_mask: mask[b, j] = True where request b's j-th page holds any of b's current
// tokens. Reference: cpkv_runtime's torch backend, op "current_page_mask".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

template <typename LenT>
__global__ void __launch_bounds__(kThreads) current_page_mask_kernel(PageMaskArgs a) {
  const int64_t b = blockIdx.y;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (j >= a.max_pages) return;
  const int64_t prefix = __ldg(static_cast<const LenT*>(a.prefix_lens) + b);
  const int64_t extend = __ldg(static_cast<const LenT*>(a.extend_lens) + b);
  const int64_t first = prefix / a.page_size;
  const int64_t end = (prefix + extend + a.page_size - 1) / a.page_size;
  a.mask[b * a.max_pages + j] = extend > 0 && j >= first && j < end;
}

}  // namespace

cudaError_t launch_current_page_mask(const PageMaskArgs& a, cudaStream_t stream) {
  if (a.num_reqs == 0 || a.max_pages == 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>((a.max_pages + kThreads - 1) / kThreads),
                  static_cast<unsigned>(a.num_reqs));
  if (a.lens_is_64) {
    current_page_mask_kernel<int64_t><<<grid, kThreads, 0, stream>>>(a);
  } else {
    current_page_mask_kernel<int32_t><<<grid, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

}  // namespace cpkv
