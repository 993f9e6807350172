// build_dense: materialize then fill_current in one pass that writes every dense row once:
// dense[s, r] = current_kv[sources[s, r]] where a source is named, else kv_pool[slot_page[s], r]
// where slot_page[s] is a pool page, else untouched. Rows are opaque bytes.
// Reference: cpkv_runtime's torch backend, op "build_dense".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

constexpr int kMaxThreadsPerSM = 2048;  // sm_80 and later

// Flattened over (dense row, word) like materialize: consecutive threads copy consecutive words
// of one row, so loads and stores coalesce. The grid is capped at one wave and loops, because
// the row count is read on the device: plan_layout_static's capacity is a host bound (8,448
// slots for 8 x (64K + 2K) tokens) while the batch uses fewer (1,280 after dedup), and a grid
// sized by the capacity would spend most of its blocks finding nothing to do.
template <typename W, typename Div>
__global__ void __launch_bounds__(kThreads) build_dense_kernel(BuildDenseArgs a, Div row_words,
                                                               int page_shift) {
  using I = typename Div::index_t;
  int64_t slots = a.num_slots;
  if (a.used_slots != nullptr) {
    const int64_t used = __ldg(a.used_slots);
    slots = used < 0 ? 0 : (used < slots ? used : slots);
  }
  const I total = static_cast<I>(slots * a.page_size) * static_cast<I>(row_words.divisor);
  constexpr I kPerBlock = static_cast<I>(kThreads) * kUnroll;
  const I step = static_cast<I>(gridDim.x) * kPerBlock;
  for (I base = static_cast<I>(blockIdx.x) * kPerBlock + threadIdx.x; base < total; base += step) {
    copy_words<W, kUnroll>(base, total, [&](I i) -> WordMove<W> {
      const I row = row_words.div(i);
      const I w = i - row * row_words.divisor;
      int64_t s, r;
      split_loc(static_cast<int64_t>(row), a.page_size, page_shift, s, r);
      const int64_t t = __ldg(a.sources + row);  // both indices at once: one latency, not two
      const int64_t p = __ldg(a.slot_page + s);
      const char* from = nullptr;
      if (t >= 0 && t < a.num_tokens) {
        from = a.src + t * a.src_stride;
      } else if (p >= 0 && p < a.num_pages) {
        from = a.pool + p * a.pool_stride + r * a.row_bytes;
      }
      if (from == nullptr) return {nullptr, nullptr};
      return {reinterpret_cast<const W*>(from) + w,
              reinterpret_cast<W*>(a.dense + s * a.dense_stride + r * a.row_bytes) + w};
    });
  }
}

template <int BYTES>
cudaError_t launch_words(const BuildDenseArgs& a, cudaStream_t stream) {
  using W = typename Word<BYTES>::T;
  const uint64_t words = static_cast<uint64_t>(a.row_bytes / BYTES);
  const uint64_t total = static_cast<uint64_t>(a.num_slots) * a.page_size * words;
  const uint64_t per_block = kThreads * kUnroll;
  const uint64_t needed = (total + per_block - 1) / per_block;
  // One wave: kMaxThreadsPerSM / kThreads blocks per SM are resident at once.
  const uint64_t cap = a.sm_count > 0 ? static_cast<uint64_t>(a.sm_count) * (kMaxThreadsPerSM / kThreads)
                                      : needed;
  const uint64_t blocks = needed < cap ? needed : cap;
  const int shift = page_shift_of(a.page_size);
  // Div32 needs every flattened index plus one grid stride below 2^31.
  if (total + blocks * per_block < (1ull << 31)) {
    build_dense_kernel<W, Div32><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        a, Div32(static_cast<uint32_t>(words)), shift);
  } else {
    build_dense_kernel<W, Div64><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        a, Div64(words), shift);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_build_dense(const BuildDenseArgs& a, cudaStream_t stream) {
  if (a.num_slots == 0 || a.page_size == 0 || a.row_bytes == 0) return cudaSuccess;
  return by_word({static_cast<uint64_t>(a.row_bytes), static_cast<uint64_t>(a.pool_stride),
                  static_cast<uint64_t>(a.dense_stride), static_cast<uint64_t>(a.src_stride),
                  reinterpret_cast<uint64_t>(a.pool), reinterpret_cast<uint64_t>(a.src),
                  reinterpret_cast<uint64_t>(a.dense)},
                 [&](auto bytes) { return launch_words<decltype(bytes)::value>(a, stream); });
}

}  // namespace cpkv
