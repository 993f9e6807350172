// Lets sglang-kernel 0.4.7 and sgl-deep-gemm 0.2.0, built for torch 2.13, load and register their
// CUDA kernels on torch 2.11. Built and put in LD_PRELOAD by scripts/serve/abi_shim.py, only on a
// box whose torch is not the release the wheels were built for, and only after it checked that the
// forwarded symbols are exactly the ones missing there. Two parts:
//
// 1. Forwards: five symbols the wheels import that torch 2.11 has under another name.
// 2. Dispatch keys: torch 2.13 removed the `Named` dispatch key (2.11: value 16) and swapped
//    `Python` (12) and `Fake` (13), so every key from `Conjugate` on, the per-backend ones
//    included, is one lower in the wheels than in 2.11: a kernel the wheel registers for CUDA (50
//    in 2.13) lands on CPU (50 in 2.11), and SGLang's first FlashMLA call finds no CUDA kernel.
//    The torch::Library constructor and Library::_impl, called from the wheels' registration
//    code only, get their key translated; calls from anywhere else pass through unchanged.
//
// Each forward keeps the ABI of the original: the renamed type (torch::headeronly::Tag, which
// torch 2.11 spells at::Tag) has the same layout, and the exception constructors build the base
// c10::Error and then install the derived class's vtable, which is all the derived constructor
// does. Pointers stand in for the C++ types this file does not include.
#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <string>

#define LINK_NAME(name) asm(name)

struct SourceLocation { const char* function; const char* file; uint32_t line; };

// torch::Library::_def(FunctionSchema&&, OperatorName*, const std::vector<Tag>&, _RegisterOrVerify) &
void* library_def_schema_211(void*, void*, void*, const void*, int) LINK_NAME(
    "_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorIN2at3TagESaIS8_EENS_17_RegisterOrVerifyE");
void* library_def_schema_213(void*, void*, void*, const void*, int) LINK_NAME(
    "_ZNR5torch7Library4_defEON3c1014FunctionSchemaEPNS1_12OperatorNameERKSt6vectorINS_10headeronly3TagESaIS8_EENS_17_RegisterOrVerifyE");
void* library_def_schema_213(void* self, void* schema, void* name, const void* tags, int rv) {
  return library_def_schema_211(self, schema, name, tags, rv);
}

// torch::Library::_def(std::variant<OperatorName, FunctionSchema>&&, CppFunction&&, const std::vector<Tag>&) &
void* library_def_impl_211(void*, void*, void*, const void*) LINK_NAME(
    "_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorIN2at3TagESaISB_EE");
void* library_def_impl_213(void*, void*, void*, const void*) LINK_NAME(
    "_ZNR5torch7Library4_defEOSt7variantIJN3c1012OperatorNameENS2_14FunctionSchemaEEEONS_11CppFunctionERKSt6vectorINS_10headeronly3TagESaISB_EE");
void* library_def_impl_213(void* self, void* name_or_schema, void* fn, const void* tags) {
  return library_def_impl_211(self, name_or_schema, fn, tags);
}

// c10::Error::Error(SourceLocation, std::string): the base both derived errors are built on
void error_base_ctor(void*, SourceLocation, std::string) LINK_NAME(
    "_ZN3c105ErrorC2ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
extern char not_implemented_vtable[] LINK_NAME("_ZTVN3c1019NotImplementedErrorE");
extern char value_error_vtable[] LINK_NAME("_ZTVN3c1010ValueErrorE");
// The vtable symbol points at the offset-to-top and typeinfo words; objects point past them.
constexpr int kVtableHeader = 2 * sizeof(void*);

void not_implemented_ctor(void*, SourceLocation, std::string) LINK_NAME(
    "_ZN3c1019NotImplementedErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
void not_implemented_ctor(void* self, SourceLocation loc, std::string msg) {
  error_base_ctor(self, loc, std::move(msg));
  *static_cast<void**>(self) = not_implemented_vtable + kVtableHeader;
}

void value_error_ctor(void*, SourceLocation, std::string) LINK_NAME(
    "_ZN3c1010ValueErrorC1ENS_14SourceLocationENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE");
void value_error_ctor(void* self, SourceLocation loc, std::string msg) {
  error_base_ctor(self, loc, std::move(msg));
  *static_cast<void**>(self) = value_error_vtable + kVtableHeader;
}

// at::TensorBase::const_data_ptr<float>(): 2.13 instantiates it without the enable_if argument
const float* const_data_ptr_211(const void*) LINK_NAME("_ZNK2at10TensorBase14const_data_ptrIfLi0EEEPKT_v");
const float* const_data_ptr_213(const void*) LINK_NAME("_ZNK2at10TensorBase14const_data_ptrIfEEPKT_v");
const float* const_data_ptr_213(const void* self) { return const_data_ptr_211(self); }

// ---- 2. dispatch keys ------------------------------------------------------------------------
#define INTERPOSED_NAME(name) asm(name)

static uint16_t key_213_to_211(uint16_t key) {
  if (key == 12) return 13;  // Python
  if (key == 13) return 12;  // Fake
  return key >= 16 ? key + 1 : key;  // from Conjugate on: Named (16 in 2.11) is gone in 2.13
}

// Only registrations made by the wheels built for 2.13 are translated: libtorch's own, and those
// of extensions built on this box (flashinfer's and cpkv's JIT kernels), already use 2.11's keys.
static bool called_from_wheel(void* return_address) {
  Dl_info info;
  if (!dladdr(return_address, &info) || info.dli_fname == nullptr) return false;
  return std::strstr(info.dli_fname, "/sgl_kernel/") || std::strstr(info.dli_fname, "/deep_gemm/");
}

// std::optional<c10::DispatchKey>: the uint16_t key at byte 0, the engaged flag at byte 2.
static uint32_t translate_optional_key(uint32_t optional_key) {
  if (((optional_key >> 16) & 0xff) == 0) return optional_key;
  return (optional_key & 0xffff0000u) | key_213_to_211(optional_key & 0xffffu);
}

#define LIBRARY_CTOR "_ZN5torch7LibraryC1ENS0_4KindENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESt8optionalIN3c1011DispatchKeyEEPKcj"
#define LIBRARY_IMPL "_ZNR5torch7Library5_implEPKcONS_11CppFunctionENS_17_RegisterOrVerifyE"

// torch::Library::Library(Kind, std::string (by invisible reference), std::optional<DispatchKey>, const char*, uint32_t)
using LibraryCtor = void (*)(void*, int, void*, uint32_t, const char*, uint32_t);
void library_ctor(void*, int, void*, uint32_t, const char*, uint32_t) INTERPOSED_NAME(LIBRARY_CTOR);
void library_ctor(void* self, int kind, void* ns, uint32_t key, const char* file, uint32_t line) {
  static auto real = reinterpret_cast<LibraryCtor>(dlsym(RTLD_NEXT, LIBRARY_CTOR));
  if (called_from_wheel(__builtin_return_address(0))) key = translate_optional_key(key);
  real(self, kind, ns, key, file, line);
}

// torch::Library& torch::Library::_impl(const char*, CppFunction&&, _RegisterOrVerify) &; the
// CppFunction's first member is its std::optional<DispatchKey> (m.impl(name, torch::kCUDA, fn)).
using LibraryImpl = void* (*)(void*, const char*, void*, int);
void* library_impl(void*, const char*, void*, int) INTERPOSED_NAME(LIBRARY_IMPL);
void* library_impl(void* self, const char* name, void* function, int rv) {
  static auto real = reinterpret_cast<LibraryImpl>(dlsym(RTLD_NEXT, LIBRARY_IMPL));
  if (called_from_wheel(__builtin_return_address(0))) {
    auto* optional_key = static_cast<uint32_t*>(function);
    *optional_key = translate_optional_key(*optional_key);
  }
  return real(self, name, function, rv);
}
