// decoder.h — the forward pass of every supported decoder architecture:
// token (or embedding) rows in, logits and final hidden states of the
// requested rows out, keys and values of every row written to the KV cache.
// It is a loop over the shared blocks (blocks.h); the block_variant of the
// model (model.h) switches the few steps in which architectures differ.
// Not here: splitting batches, finding cache cells, building attention masks
// (context.cpp, kv_cache.cpp), the ops themselves (backend/).
#pragma once

#include "blocks.h"

namespace lp {

// Runs the model on one micro-batch (p: a pass of ub.n_tok rows). rope[0] /
// rope[1]: RoPE of the global / sliding-window layers. logits: (n_out,
// n_vocab), or null to skip the output head; embd: (n_out, n_embd) final
// normalised hidden states, or null. kv_swa: the sliding-window layers' own
// cache (cells ub.cells_swa), or null when kv holds every layer.
void decoder_forward(const model& m, const rope_params rope[2], kv_cache& kv, kv_cache* kv_swa, run_state& rs,
                     const ubatch& ub, pass& p, float* logits, float* embd);

// The output head alone: logits (n, n_vocab) of the final normalised hidden
// states h (n, n_embd) (p: a pass of n rows).
void decoder_logits(const model& m, const float* h, pass& p, float* logits);

}  // namespace lp
