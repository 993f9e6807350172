// remap_locs: out[n, k] = inverse[req_id[n], loc // P] * P + loc % P for loc = locs[n, k];
// -1 stays -1, and a page the request does not use (or outside the pool) maps to -1.
// Reference: cpkv_runtime's torch backend, op "remap_locs".
#include "cpkv_common.cuh"
#include "cpkv_launch.h"

namespace cpkv {
namespace {

constexpr int kVecs = 2;  // vectors per thread: 2 x 4 locations in flight

template <int VEC, typename LocT>
struct LocVec {
  LocT v[VEC];
};

template <int VEC, typename LocT>
__device__ __forceinline__ LocVec<VEC, LocT> load_locs(const LocT* p) {
  LocVec<VEC, LocT> r;
  if constexpr (VEC == 4 && sizeof(LocT) == 4) {
    const int4 x = __ldg(reinterpret_cast<const int4*>(p));
    r.v[0] = x.x, r.v[1] = x.y, r.v[2] = x.z, r.v[3] = x.w;
  } else if constexpr (VEC == 4 && sizeof(LocT) == 8) {
    const longlong2 x = __ldg(reinterpret_cast<const longlong2*>(p));
    const longlong2 y = __ldg(reinterpret_cast<const longlong2*>(p) + 1);
    r.v[0] = x.x, r.v[1] = x.y, r.v[2] = y.x, r.v[3] = y.y;
  } else {
#pragma unroll
    for (int e = 0; e < VEC; ++e) r.v[e] = __ldg(p + e);
  }
  return r;
}

// Flattened over vectors of VEC locations of one row (VEC divides K, so a vector never straddles
// rows). The request's inverse row is a few KB for realistic page counts and stays in L1/L2.
template <int VEC, typename LocT, typename Div>
__global__ void __launch_bounds__(kThreads) remap_kernel(RemapArgs a, Div row_vecs, int page_shift) {
  using I = typename Div::index_t;
  const LocT* locs = static_cast<const LocT*>(a.locs);
  const I total = static_cast<I>(a.rows) * static_cast<I>(row_vecs.divisor);
  const I base = static_cast<I>(blockIdx.x) * (kThreads * kVecs) + threadIdx.x;
  LocVec<VEC, LocT> in[kVecs];
  int64_t req[kVecs];
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    const I i = base + static_cast<I>(u) * kThreads;
    req[u] = -1;
    if (i < total) {
      req[u] = __ldg(a.req_id + row_vecs.div(i));
      in[u] = load_locs<VEC>(locs + static_cast<int64_t>(i) * VEC);
    }
  }
#pragma unroll
  for (int u = 0; u < kVecs; ++u) {
    const I i = base + static_cast<I>(u) * kThreads;
    if (i >= total) continue;
    const bool req_ok = req[u] >= 0 && req[u] < a.num_reqs;
    const int32_t* inv = a.inverse + (req_ok ? req[u] : 0) * a.num_pages;
    int32_t r[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e) {
      r[e] = -1;
      if (req_ok && in[u].v[e] >= 0) {
        int64_t page, offset;
        split_loc(in[u].v[e], a.page_size, page_shift, page, offset);
        if (page < a.num_pages) {
          const int32_t slot = __ldg(inv + page);
          if (slot >= 0) r[e] = static_cast<int32_t>(slot * a.page_size + offset);
        }
      }
    }
    int32_t* out = a.out + static_cast<int64_t>(i) * VEC;
    if constexpr (VEC == 4) {
      *reinterpret_cast<int4*>(out) = make_int4(r[0], r[1], r[2], r[3]);
    } else {
#pragma unroll
      for (int e = 0; e < VEC; ++e) out[e] = r[e];
    }
  }
}

template <int VEC, typename LocT>
cudaError_t launch_vec(const RemapArgs& a, cudaStream_t stream) {
  const uint64_t vecs = static_cast<uint64_t>(a.cols / VEC);
  const uint64_t total = static_cast<uint64_t>(a.rows) * vecs;
  const uint64_t per_block = kThreads * kVecs;
  const dim3 grid(static_cast<unsigned>((total + per_block - 1) / per_block));
  const int shift = page_shift_of(a.page_size);
  if (total + per_block < (1ull << 31)) {
    remap_kernel<VEC, LocT, Div32><<<grid, kThreads, 0, stream>>>(a, Div32(vecs), shift);
  } else {
    remap_kernel<VEC, LocT, Div64><<<grid, kThreads, 0, stream>>>(a, Div64(vecs), shift);
  }
  return cudaGetLastError();
}

template <typename LocT>
cudaError_t launch_loc(const RemapArgs& a, cudaStream_t stream) {
  const bool vec4 = a.cols % 4 == 0 && reinterpret_cast<uint64_t>(a.locs) % (4 * sizeof(LocT)) == 0 &&
                    reinterpret_cast<uint64_t>(a.out) % 16 == 0;
  return vec4 ? launch_vec<4, LocT>(a, stream) : launch_vec<1, LocT>(a, stream);
}

}  // namespace

cudaError_t launch_remap_locs(const RemapArgs& a, cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return a.locs_is_64 ? launch_loc<int64_t>(a, stream) : launch_loc<int32_t>(a, stream);
}

}  // namespace cpkv
