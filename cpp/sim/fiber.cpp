#include "sim/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>

#ifdef METALRT_SIM_TSAN
#include <sanitizer/tsan_interface.h>
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
extern "C" void AnnotateIgnoreWritesBegin(const char* file, int line);
extern "C" void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif

namespace metalrt::sim {

namespace {
std::atomic<bool> g_fail_stack_maps{false};
}  // namespace

void FailFiberStackMapsForTesting(bool fail) { g_fail_stack_maps = fail; }

FiberStack::FiberStack(size_t bytes, unsigned color) {
  if (g_fail_stack_maps) throw std::bad_alloc();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  color_bytes_ = (color % (page / 64)) * 64;
  size_ = (bytes + page - 1) / page * page;
  mapping_size_ = size_ + page;
  void* m = mmap(nullptr, mapping_size_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  mapping_ = static_cast<char*>(m);
  mprotect(mapping_, page, PROT_NONE);   // the guard page
  base_ = mapping_ + page;
}

FiberStack::~FiberStack() {
  if (mapping_) munmap(mapping_, mapping_size_);
}

FiberStack::FiberStack(FiberStack&& other) noexcept
    : mapping_(other.mapping_), mapping_size_(other.mapping_size_), base_(other.base_),
      size_(other.size_), color_bytes_(other.color_bytes_) {
  other.mapping_ = nullptr;
}

#ifdef METALRT_SIM_UCONTEXT

namespace {
// makecontext passes int arguments only: the pointers travel in two halves.
void UcontextEntry(unsigned entry_hi, unsigned entry_lo, unsigned arg_hi, unsigned arg_lo) {
  auto join = [](unsigned hi, unsigned lo) {
    return (static_cast<uintptr_t>(hi) << 32) | static_cast<uintptr_t>(lo);
  };
  auto entry = reinterpret_cast<void (*)(void*)>(join(entry_hi, entry_lo));
  entry(reinterpret_cast<void*>(join(arg_hi, arg_lo)));
}
}  // namespace

Fiber::Fiber() = default;

Fiber::~Fiber() {
#ifdef METALRT_SIM_TSAN
  if (owns_tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
#endif
}

void Fiber::Start(const FiberStack& stack, void (*entry)(void*), void* arg) {
  getcontext(&context_);
  context_.uc_stack.ss_sp = stack.bottom();
  context_.uc_stack.ss_size =
      static_cast<size_t>(static_cast<char*>(stack.top()) - static_cast<char*>(stack.bottom()));
  context_.uc_link = nullptr;
  const auto e = reinterpret_cast<uintptr_t>(entry);
  const auto a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&context_, reinterpret_cast<void (*)()>(&UcontextEntry), 4,
              static_cast<unsigned>(e >> 32), static_cast<unsigned>(e),
              static_cast<unsigned>(a >> 32), static_cast<unsigned>(a));
#ifdef METALRT_SIM_TSAN
  // A fresh TSan thread per start: nothing of the previous GPU thread carries over.
  if (owns_tsan_fiber_) __tsan_destroy_fiber(tsan_fiber_);
  tsan_fiber_ = __tsan_create_fiber(0);
  owns_tsan_fiber_ = true;
#endif
}

void Fiber::Switch(Fiber& from, Fiber& to) {
#ifdef METALRT_SIM_TSAN
  // No implicit synchronisation between GPU threads: only barriers and SIMD-group
  // collectives order them (annotated in threadgroup.cpp), so TSan reports the
  // races a missing barrier leaves.
  // The fiber objects are the runtime's, not the GPU threads': ignored by TSan. A
  // scheduler context is whatever OS thread switches from it.
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
  AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
  if (!from.owns_tsan_fiber_) from.tsan_fiber_ = __tsan_get_current_fiber();
  void* target = to.tsan_fiber_;
  AnnotateIgnoreWritesEnd(__FILE__, __LINE__);
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
  __tsan_switch_to_fiber(target, __tsan_switch_to_fiber_no_sync);
#endif
  swapcontext(&from.context_, &to.context_);
}

#else  // hand-written context switch

// metalrt_sim_fiber_switch(void** save_sp, void* load_sp): pushes the callee-saved
// registers, stores the stack pointer in *save_sp, loads load_sp, pops and returns
// into the resumed context. A new fiber's stack is laid out so that the first
// switch "returns" into metalrt_sim_fiber_trampoline, which calls entry(arg).
#if defined(__APPLE__)
#define METALRT_SIM_SYM(name) "_" #name
#define METALRT_SIM_HIDE(name) ".private_extern _" #name "\n"
#else
#define METALRT_SIM_SYM(name) #name
#define METALRT_SIM_HIDE(name) ".hidden " #name "\n"
#endif

extern "C" void metalrt_sim_fiber_switch(void** save_sp, void* load_sp);
extern "C" void metalrt_sim_fiber_trampoline();

#if defined(__x86_64__)
// System V: rbx, rbp, r12-r15 are callee-saved. The trampoline finds entry in r13
// and arg in r12.
asm(".text\n"
    ".globl " METALRT_SIM_SYM(metalrt_sim_fiber_switch) "\n"
    METALRT_SIM_HIDE(metalrt_sim_fiber_switch)
    METALRT_SIM_SYM(metalrt_sim_fiber_switch) ":\n"
    "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
    "  movq %rsp, (%rdi)\n"
    "  movq %rsi, %rsp\n"
    "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
    "  ret\n"
    ".globl " METALRT_SIM_SYM(metalrt_sim_fiber_trampoline) "\n"
    METALRT_SIM_HIDE(metalrt_sim_fiber_trampoline)
    METALRT_SIM_SYM(metalrt_sim_fiber_trampoline) ":\n"
    "  movq %r12, %rdi\n"
    "  callq *%r13\n"
    "  ud2\n");
constexpr int kSavedWords = 6;   // r15 r14 r13 r12 rbx rbp, then the return address
constexpr int kArgSlot = 3, kEntrySlot = 2, kReturnSlot = 6;
#elif defined(__aarch64__)
// AAPCS64: x19-x28, fp, lr and d8-d15 are callee-saved. The trampoline finds arg
// in x19 and entry in x20.
asm(".text\n"
    ".globl " METALRT_SIM_SYM(metalrt_sim_fiber_switch) "\n"
    METALRT_SIM_HIDE(metalrt_sim_fiber_switch)
    ".p2align 2\n"
    METALRT_SIM_SYM(metalrt_sim_fiber_switch) ":\n"
    "  sub sp, sp, #160\n"
    "  stp x19, x20, [sp, #0]\n  stp x21, x22, [sp, #16]\n  stp x23, x24, [sp, #32]\n"
    "  stp x25, x26, [sp, #48]\n  stp x27, x28, [sp, #64]\n  stp x29, x30, [sp, #80]\n"
    "  stp d8, d9, [sp, #96]\n  stp d10, d11, [sp, #112]\n  stp d12, d13, [sp, #128]\n"
    "  stp d14, d15, [sp, #144]\n"
    "  mov x2, sp\n  str x2, [x0]\n  mov sp, x1\n"
    "  ldp x19, x20, [sp, #0]\n  ldp x21, x22, [sp, #16]\n  ldp x23, x24, [sp, #32]\n"
    "  ldp x25, x26, [sp, #48]\n  ldp x27, x28, [sp, #64]\n  ldp x29, x30, [sp, #80]\n"
    "  ldp d8, d9, [sp, #96]\n  ldp d10, d11, [sp, #112]\n  ldp d12, d13, [sp, #128]\n"
    "  ldp d14, d15, [sp, #144]\n"
    "  add sp, sp, #160\n"
    "  ret\n"
    ".globl " METALRT_SIM_SYM(metalrt_sim_fiber_trampoline) "\n"
    METALRT_SIM_HIDE(metalrt_sim_fiber_trampoline)
    ".p2align 2\n"
    METALRT_SIM_SYM(metalrt_sim_fiber_trampoline) ":\n"
    "  mov x0, x19\n"
    "  blr x20\n"
    "  brk #0\n");
constexpr int kSavedWords = 20;  // x19..x30 (12), d8..d15 (8)
constexpr int kArgSlot = 0, kEntrySlot = 1, kReturnSlot = 11;   // x19, x20, x30
#endif

Fiber::Fiber() = default;
Fiber::~Fiber() = default;

void Fiber::Start(const FiberStack& stack, void (*entry)(void*), void* arg) {
  // 16-byte aligned top; on x86-64 the trampoline is entered with rsp 16-aligned
  // (the return slot sits just below the top), as a call instruction expects.
  auto top = reinterpret_cast<uintptr_t>(stack.top()) & ~uintptr_t{15};
#if defined(__x86_64__)
  auto* frame = reinterpret_cast<void**>(top - 8) - kSavedWords;
#else
  auto* frame = reinterpret_cast<void**>(top) - kSavedWords;
#endif
  for (int i = 0; i < kSavedWords; ++i) frame[i] = nullptr;
  frame[kArgSlot] = arg;
  frame[kEntrySlot] = reinterpret_cast<void*>(entry);
  frame[kReturnSlot] = reinterpret_cast<void*>(&metalrt_sim_fiber_trampoline);
  stack_pointer_ = frame;
}

void Fiber::Switch(Fiber& from, Fiber& to) {
  metalrt_sim_fiber_switch(&from.stack_pointer_, to.stack_pointer_);
}

#endif

}  // namespace metalrt::sim
