// fill_current: dense[inverse[token_req[t], loc // P], loc % P] = current_kv[t], loc =
// out_cache_loc[t]; padding rows (loc < 0) and tokens whose page the request does not use are
// skipped. Reference: cpkv_runtime's torch backend, op "fill_current".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

constexpr int kMaxTokens = 1024;      // tokens one block stages (8 KB of shared memory)
constexpr int64_t kBlockBytes = 16384;  // payload one block moves, whatever the row width

// Words in flight per thread: 64 bytes (4 x 16-byte words; 16 x 4-byte words).
template <typename W>
__host__ __device__ constexpr int unroll() {
  return sizeof(W) >= 16 ? 4 : sizeof(W) >= 8 ? 8 : 16;
}

// Block b owns tokens [b*G, (b+1)*G). Phase 1: one thread per token resolves the destination
// (out_cache_loc -> request's inverse -> dense byte offset, -1 = skip) into shared memory, so the
// index loads happen once per row instead of once per word. Phase 2: the block copies the G rows
// flattened over (token, word): reads of current_kv are contiguous, each destination row is
// contiguous, and every thread has unroll<W>() independent loads in flight before its stores.
template <typename W, typename LocT>
__global__ void __launch_bounds__(kThreads) fill_current_kernel(FillCurrentArgs a, Div32 row_words,
                                                                int tokens_per_block,
                                                                int page_shift) {
  __shared__ int64_t dst_off[kMaxTokens];
  const LocT* locs = static_cast<const LocT*>(a.loc);
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * tokens_per_block;
  const int n = static_cast<int>(min(static_cast<int64_t>(tokens_per_block), a.num_tokens - t0));
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const LocT loc = __ldg(locs + t0 + i);
    const int64_t b = __ldg(a.token_req + t0 + i);
    int64_t off = -1;
    if (loc >= 0 && b >= 0 && b < a.num_reqs) {
      int64_t page, offset;
      split_loc(loc, a.page_size, page_shift, page, offset);
      const int64_t slot = page < a.num_pages ? __ldg(a.inverse + b * a.num_pages + page) : -1;
      if (slot >= 0 && slot < a.num_slots) off = slot * a.dense_stride + offset * a.row_bytes;
    }
    dst_off[i] = off;
  }
  __syncthreads();
  constexpr int U = unroll<W>();
  const uint32_t total = static_cast<uint32_t>(n) * row_words.divisor;
  const char* src = a.src + t0 * a.src_stride;
  for (uint32_t base = threadIdx.x; base < total; base += kThreads * U) {
    copy_words<W, U>(base, total, [&](uint32_t i) -> WordMove<W> {
      const uint32_t t = row_words.div(i);
      const uint32_t w = i - t * row_words.divisor;
      const int64_t off = dst_off[t];
      if (off < 0) return {nullptr, nullptr};
      return {reinterpret_cast<const W*>(src + t * a.src_stride) + w,
              reinterpret_cast<W*>(a.dense + off) + w};
    });
  }
}

template <int BYTES, typename LocT>
cudaError_t launch_words(const FillCurrentArgs& a, cudaStream_t stream) {
  using W = typename Word<BYTES>::T;
  const int64_t per_block = kBlockBytes / a.row_bytes;
  const int tokens = static_cast<int>(per_block < 1 ? 1 : per_block > kMaxTokens ? kMaxTokens : per_block);
  // One block's flattened (token, word) index must stay below 2^31 for Div32.
  if (static_cast<int64_t>(tokens) * (a.row_bytes / BYTES) >= (int64_t{1} << 31)) {
    return cudaErrorInvalidValue;
  }
  const dim3 grid(static_cast<unsigned>((a.num_tokens + tokens - 1) / tokens));
  fill_current_kernel<W, LocT><<<grid, kThreads, 0, stream>>>(
      a, Div32(static_cast<uint32_t>(a.row_bytes / BYTES)), tokens, page_shift_of(a.page_size));
  return cudaGetLastError();
}

template <typename LocT>
cudaError_t launch_loc(const FillCurrentArgs& a, cudaStream_t stream) {
  return by_word({static_cast<uint64_t>(a.row_bytes), static_cast<uint64_t>(a.src_stride),
                  static_cast<uint64_t>(a.dense_stride), reinterpret_cast<uint64_t>(a.src),
                  reinterpret_cast<uint64_t>(a.dense)},
                 [&](auto bytes) { return launch_words<decltype(bytes)::value, LocT>(a, stream); });
}

}  // namespace

cudaError_t launch_fill_current(const FillCurrentArgs& a, cudaStream_t stream) {
  if (a.num_tokens == 0 || a.row_bytes == 0) return cudaSuccess;
  return a.loc_is_64 ? launch_loc<int64_t>(a, stream) : launch_loc<int32_t>(a, stream);
}

}  // namespace cpkv
