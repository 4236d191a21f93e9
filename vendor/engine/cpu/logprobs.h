// logprobs.h — log-probability arithmetic over whole rows of logits, for
// perplexity and KL divergence (llamapy/perplexity.py), so the scored rows
// never pass through Python element by element:
//   - nll_rows:            -log softmax(row)[target] per row;
//   - store_logprob_rows:  llama-perplexity's KL-divergence base rows (the
//                          row's log-softmax in 16-bit levels over the 16
//                          nats below its top, two float32 in front), and
//                          each row's -log p(target);
//   - kld_rows:            per row, KL(base || model) against such a stored
//                          row, p(target) - p_base(target), both -log p
//                          (target) and whether both rows' top tokens agree.
// The arithmetic follows llama-perplexity's (maxima, exponentials,
// quantization in float32; sums of exponentials and of KL terms in double;
// the first of equal maxima is "the top"), so its numbers and ours agree to
// rounding. Rows are shared among the pool's threads.
//
// Each kernel has a scalar reference, always compiled, and AVX2 / AVX-512
// versions (logprobs.cpp); `level` picks them (tests pit the levels against
// each other). NEON runs the scalar reference.
// Not here: the running sums and statistics (Python), the file layout
// (llamapy/_logits_file.py).
#pragma once

#include <cstdint>

#include "../ggml_type.h"
#include "threadpool.h"

namespace lp {

// Below this many nats under a row's top logit a stored row keeps only its
// floor (level 0), and the KL divergence leaves base entries out.
constexpr float kLogProbRange = 16.0f;

// uint16 words of a stored row: two float32 (scale, min log-prob), then one
// level per vocabulary entry, padded to an even count.
constexpr int64_t logprob_row_words(int64_t n_vocab) { return 2 * ((n_vocab + 1) / 2) + 4; }

// logits (n_rows, n_vocab), targets (n_rows) in [0, n_vocab) (unchecked).
// nll (n_rows): max + log(sum exp(x - max)) - x[target] in double.
void nll_rows(isa level, const float* logits, int64_t n_rows, int64_t n_vocab, const int32_t* targets,
              double* nll, thread_pool& pool);

// rows (n_rows, logprob_row_words(n_vocab)) written; nll (n_rows) as the
// stored row has it (float arithmetic: max + float(log(sum)) - x[target]).
void store_logprob_rows(isa level, const float* logits, int64_t n_rows, int64_t n_vocab, const int32_t* targets,
                        uint16_t* rows, double* nll, thread_pool& pool);

// base (n_rows, logprob_row_words(n_vocab)): stored rows. Per row: kld
// (double), p_diff = p(target) - p_base(target), nll and nll_base (-log p
// of the target under each), same_top (1 where the first maximum of the
// logits and of the stored row is the same token).
struct kld_row_out {
    double* kld;
    float* p_diff;
    float* nll;
    float* nll_base;
    uint8_t* same_top;
};
void kld_rows(isa level, const float* logits, const uint16_t* base, int64_t n_rows, int64_t n_vocab,
              const int32_t* targets, const kld_row_out& out, thread_pool& pool);

}  // namespace lp
