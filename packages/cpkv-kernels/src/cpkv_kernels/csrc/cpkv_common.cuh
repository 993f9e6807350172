// Shared device helpers for the cpkv kernels: vector types and the unrolled word copy for
// opaque-byte copies, and a fast division by a run-time constant. Plain CUDA, no torch headers: binding.cpp owns the torch side.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cpkv {

// Threads per block for the copy kernels; each thread moves kUnroll vectors (loads issued
// before stores, so several independent 16-byte loads are in flight per thread).
constexpr int kThreads = 256;
constexpr int kUnroll = 4;

// An opaque word of BYTES bytes; rows are copied as arrays of the widest word that divides the
// row width, every stride and every base pointer.
template <int BYTES>
struct Word;
template <>
struct Word<16> {
  using T = uint4;
};
template <>
struct Word<8> {
  using T = uint2;
};
template <>
struct Word<4> {
  using T = uint32_t;
};
template <>
struct Word<2> {
  using T = uint16_t;
};
template <>
struct Word<1> {
  using T = uint8_t;
};

// Where one word of a flattened copy comes from and goes to; `to == nullptr` skips the word.
template <typename W>
struct WordMove {
  const W* from;
  W* to;
};

// One thread's share of a copy flattened over words: words base, base + kThreads, ... (U of
// them, those below total). Every load is issued before any store, so U independent loads are in
// flight per thread. locate(i) names word i's source and destination; the three copy kernels
// (materialize, build_dense, fill_current) differ only in it.
template <typename W, int U, typename I, typename Locate>
__device__ __forceinline__ void copy_words(I base, I total, Locate&& locate) {
  W v[U];
  W* dst[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const I i = base + static_cast<I>(u) * kThreads;
    dst[u] = nullptr;
    if (i < total) {
      const WordMove<W> m = locate(i);
      if (m.to != nullptr) {
        v[u] = __ldg(m.from);
        dst[u] = m.to;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (dst[u] != nullptr) *dst[u] = v[u];
  }
}

// Unsigned division by a run-time constant via multiply-high and shift (Granlund–Montgomery, the
// scheme of CUTLASS's FastDivmod). Exact for dividends < 2^31; the host picks Div64 beyond that.
struct Div32 {
  using index_t = uint32_t;
  uint32_t divisor;
  uint32_t mul;
  uint32_t shr;

  explicit Div32(uint32_t d) : divisor(d), mul(0), shr(0) {
    if (d > 1) {
      uint32_t log2_ceil = 0;
      while ((1ull << log2_ceil) < d) ++log2_ceil;
      const uint32_t p = 31 + log2_ceil;
      mul = static_cast<uint32_t>(((1ull << p) + d - 1) / d);
      shr = p - 32;
    }
  }
  __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return divisor == 1 ? n : (__umulhi(n, mul) >> shr);
  }
};

struct Div64 {
  using index_t = uint64_t;
  uint64_t divisor;
  explicit Div64(uint64_t d) : divisor(d) {}
  __device__ __forceinline__ uint64_t div(uint64_t n) const { return n / divisor; }
};

// Page index and offset of a pool location; page_shift >= 0 when the page size is a power of two.
template <typename T>
__device__ __forceinline__ void split_loc(T loc, int64_t page_size, int page_shift, int64_t& page,
                                          int64_t& offset) {
  const int64_t l = static_cast<int64_t>(loc);
  if (page_shift >= 0) {
    page = l >> page_shift;
    offset = l & (page_size - 1);
  } else {
    page = l / page_size;
    offset = l - page * page_size;
  }
}

}  // namespace cpkv
