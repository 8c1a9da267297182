// Integer settings read from environment variables (METALRT_CPU_THREADS,
// METALRT_MAX_DISPATCHES, METALRT_SIM_THREADS, METALRT_SIM_STACK_KIB): one parser, so
// every variable accepts and rejects the same spellings.
#pragma once

namespace metalrt {

// The variable `name` as an integer in [1, max], or `fallback` when it is unset or
// empty. Anything else (text, 0, negative, above max) throws std::invalid_argument
// naming the variable and the value.
long PositiveIntFromEnv(const char* name, long fallback, long max);

}  // namespace metalrt
