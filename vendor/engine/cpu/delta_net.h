// delta_net.h — the kernels of the recurrent (linear-attention) layers on the
// CPU: the short causal convolution with its per-sequence state tail, and the
// gated delta rule and Mamba-2's selective scan in their sequential form (one token after another per head),
// the form decode needs and the reference for any faster one. Semantics and
// layouts: backend/op_args.h (ssm_conv_args, gated_delta_args).
// Each kernel does a range of channels / heads over all rows, so the backend
// spreads ranges over threads and every result is independent of the split.
// Not here: the chunked (parallel-over-tokens) prefill form, the layer around
// them (model/delta_net.cpp), the state memory (recurrent_state.h).
#pragma once

#include <cstdint>

#include "../backend/op_args.h"
#include "../ggml_type.h"

namespace lp {

// Channels [c0, c1) of a.
void ssm_conv_ref(const ssm_conv_args& a, int64_t c0, int64_t c1);
// Value heads [h0, h1) of a: the reference (llama.cpp's order of operations)
// and the form the backend runs (two fused passes per token, SIMD where the
// CPU has it; the same within rounding).
void gated_delta_ref(const gated_delta_args& a, int h0, int h1);
void gated_delta(const gated_delta_args& a, int h0, int h1);
// Heads [h0, h1) of a (Mamba-2's selective scan): the reference (scalar, in
// order), and the form the backend runs (each state row with the vectors of
// the given level, or of best_isa(); the same within rounding).
void ssm_scan_ref(const ssm_scan_args& a, int h0, int h1);
void ssm_scan(const ssm_scan_args& a, int h0, int h1, isa level);
void ssm_scan(const ssm_scan_args& a, int h0, int h1);

}  // namespace lp
