// What the serve suite puts in LD_PRELOAD: it loads the ABI shim (libcpkv_abi_shim.so, beside this
// library) into Python processes only. The shim links libtorch; preloaded itself, it was mapped
// into every process the server starts, the compilers of SGLang's JIT paths included (ptxas, gcc,
// cc1, as, ld: one Triton kernel starts about six), and each paid for loading libtorch: `gcc -c`
// of an empty file takes 19 ms, 1.17 s with a libtorch-linked library preloaded and 19 ms through
// this loader (farm-bench medians of 10 on the 2-core CI machine, 2026-12-07), and on the GPU box
// each Triton kernel took 14 to 46 s to compile with the shim preloaded. This one needs only libc.
//
// Loaded from a constructor, before Python's main(), with RTLD_GLOBAL, the shim comes before the
// libtorch it needs in the global lookup scope, as it did preloaded: a kernel wheel loaded later
// still resolves the shim's definitions first, and the shim's dlsym(RTLD_NEXT) still finds
// libtorch's. Built by scripts/serve/abi_shim.py, beside the shim.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifndef SHIM_DLOPEN_FLAGS
#define SHIM_DLOPEN_FLAGS (RTLD_NOW | RTLD_GLOBAL)
#endif
#ifndef SHIM_NAME
#define SHIM_NAME "libcpkv_abi_shim.so"
#endif

static int is_python(void) {
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 0;
  exe[n] = '\0';
  const char* base = strrchr(exe, '/');
  return strncmp(base ? base + 1 : exe, "python", 6) == 0;
}

__attribute__((constructor)) static void load_shim(void) {
  if (!is_python()) return;
  Dl_info self;
  if (!dladdr((void*)&load_shim, &self) || self.dli_fname == NULL) return;
  char shim[PATH_MAX];
  const char* slash = strrchr(self.dli_fname, '/');
  int dir = slash ? (int)(slash - self.dli_fname) + 1 : 0;
  if (snprintf(shim, sizeof shim, "%.*s%s", dir, self.dli_fname, SHIM_NAME) >= (int)sizeof shim) {
    return;
  }
  if (!dlopen(shim, SHIM_DLOPEN_FLAGS)) fprintf(stderr, "cpkv abi shim loader: %s\n", dlerror());
}
