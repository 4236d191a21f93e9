// delta_net.h — the kernels of the recurrent (linear-attention) layers on the
// CPU: the short causal convolution with its per-sequence state tail, and the
// gated delta rule and Mamba-2's selective scan in their sequential form (one token after another per head),
// the form decode needs and the reference for any faster one. Semantics and
// layouts: backend/op_args.h (ssm_conv_args, gated_delta_args).
// Each kernel does a range of channels / heads over all rows, so the backend
// spreads ranges over threads and every result is independent of the split.
// The gated delta rule the backend runs takes, for a long run of consecutive
// rows of one sequence (prefill), the chunked form (cpu/delta_chunked.cpp):
// the same sums re-associated into matrix products, equal within rounding.
// Not here: the layer around them (model/delta_net.cpp), the state memory
// (recurrent_state.h).
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

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

// Which form gated_delta gives a run of consecutive rows on one slot: runs of
// at least min_run rows the chunked form, in chunks of `chunk` rows (the last
// one shorter), shorter runs (decode steps, short tails) the step form. The
// defaults by measurement (benchmarks/delta_net_prefill.py, Qwen3.5-4B's heads,
// CPU time of one thread): chunks of 32 beat 16 and 64 at every level (512
// rows: 2.1x the step form at AVX-512, 1.4x at AVX2, 2.4x scalar); the chunked
// form pays from runs of 16 rows (AVX2: even there, AVX-512 1.6x). Tests
// force either form with min_run 1 or never().
struct gated_delta_plan {
    static constexpr int64_t never() { return std::numeric_limits<int64_t>::max(); }
    static constexpr int max_chunk = 256;  // chunk: 1 .. max_chunk
    int chunk = 32;
    int64_t min_run = 16;
};
// gated_delta with a plan and caller-owned work memory (grown on use: one
// vector per thread, so a backend's threads never allocate per call).
void gated_delta(const gated_delta_args& a, int h0, int h1, const gated_delta_plan& plan, std::vector<float>& work);
// The chunked form alone (cpu/delta_chunked.cpp): value head h over rows
// [t0, t1), which must all be on one slot, in chunks of `chunk` rows, with
// the matrix products of ISA level `level`. `work`: at least
// gated_delta_chunk_floats(head_dim, chunk) floats.
int64_t gated_delta_chunk_floats(int64_t head_dim, int chunk);
void gated_delta_chunked(const gated_delta_args& a, int h, int64_t t0, int64_t t1, int chunk, float* work, isa level);
// Heads [h0, h1) of a (Mamba-2's selective scan): the reference (scalar, in
// order), and the form the backend runs (each state row with the vectors of
// the given level, or of best_isa(); the same within rounding).
void ssm_scan_ref(const ssm_scan_args& a, int h0, int h1);
void ssm_scan(const ssm_scan_args& a, int h0, int h1, isa level);
void ssm_scan(const ssm_scan_args& a, int h0, int h1);

}  // namespace lp
