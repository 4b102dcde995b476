// Launch helpers shared by every kernel family: programmatic dependent launch (PDL), the early L2
// prefetch, the launch wrapper and the resident-block query.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

namespace fp8ops {

// PDL (sm_90+): a kernel launched with programmatic stream serialization may start while the
// previous kernel of its stream is still running; it must wait for that grid before its first
// memory access, and it lets the next kernel start early once its own loads are issued. In decode
// graphs this hides most of the launch latency. Without the launch attribute both are no-ops.
__device__ __forceinline__ void wait_for_prior_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// L2 prefetch of the line holding ptr. It changes no value any load returns (the L2 is the
// device memory's point of coherence, and a prefetch is not a read), so it may run before
// wait_for_prior_grid: blocks resident while the previous grid finishes request their first
// lines then, and their loads after the wait find them in L2. ptr must lie in an allocation.
__device__ __forceinline__ void prefetch_l2(const void* ptr) { asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr)); }

// Launches kernel on stream, with programmatic stream serialization allowed when pdl is set, in
// clusters of `cluster` blocks along x unless it is 0 (grid.x a multiple of it). Clusters ask for
// the load-balancing placement (the hardware balances a cluster's blocks over the multiprocessors),
// level with the default or faster on rms_norm_quant's clustered grids (DESIGN.md).
template <typename... KArgs, typename... Args>
cudaError_t launch_kernel_clustered(void (*kernel)(KArgs...), dim3 grid, dim3 block, uint32_t cluster,
                                    cudaStream_t stream, bool pdl, Args... args) {
  cudaLaunchAttribute attr[3];
  unsigned n = 0;
  if (pdl) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster != 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster;
    attr[n].val.clusterDim.y = 1;
    attr[n++].val.clusterDim.z = 1;
    attr[n].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    attr[n++].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicyLoadBalancing;
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, args...);
}

template <typename... KArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, cudaStream_t stream, bool pdl,
                          Args... args) {
  return launch_kernel_clustered(kernel, grid, block, 0, stream, pdl, args...);
}

// Resident blocks per multiprocessor of kKernel at threads per block (a power of two), asked once
// per kernel and block size (the same on every device of the architecture the library runs on);
// 0 when the query failed, whose error is cleared so that no later check reports it.
template <auto kKernel>
int resident_blocks_per_sm(uint32_t threads) {
  static std::array<std::atomic<int>, 11> cache{};  // by log2(threads); 0: not asked yet
  std::atomic<int>& slot = cache[std::min(31 - __builtin_clz(threads | 1u), 10)];
  int n = slot.load(std::memory_order_relaxed);
  if (n == 0) {
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, static_cast<int>(threads), 0) != cudaSuccess) {
      (void)cudaGetLastError();
      n = -1;
    }
    slot.store(n, std::memory_order_relaxed);
  }
  return n > 0 ? n : 0;
}

// Blocks of kKernel's first wave on sm_count multiprocessors at threads per block: those resident
// at once, which can start while the previous grid is finishing (0 when the query failed).
template <auto kKernel>
uint32_t first_wave_blocks(uint32_t threads, int sm_count) {
  return static_cast<uint32_t>(resident_blocks_per_sm<kKernel>(threads) * sm_count);
}

}  // namespace fp8ops
