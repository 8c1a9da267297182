// The CPU oracle of gated_delta_rule, shared by its two algorithms: one request's rows of
// one value head in f32, and the recurrent (gated_delta_rule.cpp) and chunked
// (gated_delta_rule_chunked.cpp) forms over them.
#pragma once
#include <cstdint>
#include <vector>

#include "metalrt/op_registry.h"

namespace metalrt::cpu {

// Rows t < len of one request for one value head: q and k L2-normalised
// (x * 1/sqrt(sum over ascending i of x_i^2 + 1e-6)) and q times the scale, [len][dk];
// v [len][dv]; g, beta [len].
struct DeltaRuleRows {
  int64_t len = 0, dk = 0, dv = 0;
  std::vector<float> q, k, v, g, beta;
};

// Fills `rows` from the op's inputs for the tokens first .. first + len - 1 and value
// head `head`.
void LoadDeltaRuleRows(const OpCall& call, int64_t first, int64_t len, int64_t head,
                       DeltaRuleRows& rows);

// Both advance `state` (f32 [dk][dv], updated in place) over the rows and write
// o [len][dv] in f32.
// The recurrent step per token (transformers' torch_recurrent_gated_delta_rule).
void RecurrentDeltaRule(const DeltaRuleRows& rows, float* state, float* o);
// The chunked form, chunks of kDeltaRuleChunk (transformers' torch_chunk_gated_delta_rule).
void ChunkedDeltaRule(const DeltaRuleRows& rows, float* state, float* o);

}  // namespace metalrt::cpu
