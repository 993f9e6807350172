// materialize: dense[s] = kv_pool[slot_page[s]] for every slot s (pages are opaque bytes).
// Slots whose page is -1 (or outside the pool) are left untouched.
// Reference: cpkv_runtime's torch backend, op "materialize".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

// Flattened over (slot, word): consecutive threads copy consecutive words of a page, so loads and
// stores are coalesced whatever the page size, and one block spans several pages when they are
// small. Offsets are int64: slot * page_bytes passes 2^31 at 32K slots of 64 KB pages.
template <typename W, typename Div>
__global__ void __launch_bounds__(kThreads) materialize_kernel(MaterializeArgs a, Div page_words) {
  using I = typename Div::index_t;
  const I total = static_cast<I>(a.num_slots) * static_cast<I>(page_words.divisor);
  const I base = static_cast<I>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  copy_words<W, kUnroll>(base, total, [&](I i) -> WordMove<W> {
    const I s = page_words.div(i);
    const I w = i - s * page_words.divisor;
    const int64_t p = __ldg(a.slot_page + s);
    if (p < 0 || p >= a.num_pages) return {nullptr, nullptr};
    return {reinterpret_cast<const W*>(a.pool + p * a.pool_stride) + w,
            reinterpret_cast<W*>(a.dense + static_cast<int64_t>(s) * a.dense_stride) + w};
  });
}

template <int BYTES>
cudaError_t launch_words(const MaterializeArgs& a, cudaStream_t stream) {
  using W = typename Word<BYTES>::T;
  const uint64_t words = static_cast<uint64_t>(a.page_bytes / BYTES);
  const uint64_t total = static_cast<uint64_t>(a.num_slots) * words;
  const uint64_t per_block = kThreads * kUnroll;
  const dim3 grid(static_cast<unsigned>((total + per_block - 1) / per_block));
  // Div32 needs every flattened index (plus one block of slack) below 2^31.
  if (total + per_block < (1ull << 31)) {
    materialize_kernel<W, Div32><<<grid, kThreads, 0, stream>>>(a, Div32(words));
  } else {
    materialize_kernel<W, Div64><<<grid, kThreads, 0, stream>>>(a, Div64(words));
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_materialize(const MaterializeArgs& a, cudaStream_t stream) {
  if (a.num_slots == 0 || a.page_bytes == 0) return cudaSuccess;
  return by_word({static_cast<uint64_t>(a.page_bytes), static_cast<uint64_t>(a.pool_stride),
                  static_cast<uint64_t>(a.dense_stride), reinterpret_cast<uint64_t>(a.pool),
                  reinterpret_cast<uint64_t>(a.dense)},
                 [&](auto bytes) { return launch_words<decltype(bytes)::value>(a, stream); });
}

}  // namespace cpkv
