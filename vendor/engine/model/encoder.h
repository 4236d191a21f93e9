// encoder.h — the forward pass of bidirectional encoders (bert, nomic-bert):
// token rows of many sequences in, the final hidden state of every row out.
// No KV cache: a sequence is encoded whole within one call, each row attends
// to the rows of its own sequence only (all of them, or those at earlier
// positions when the model is causal), so one call packs many inputs.
// Not here: pooling the rows of a sequence into one vector (context.cpp),
// the decoder pass (decoder.h). Built from the same blocks (blocks.h).
#pragma once

#include <cstdint>

#include "decoder.h"

namespace lp {

// ub: n_tok token rows with positions (cells, out_rows unused); seq: (n_tok)
// the sequence of each row; rope: RoPE of the model (nomic-bert), unused when
// the model has none. hidden: (n_tok, n_embd) output, every row.
// rs must have room for n_tok rows, and its masks for n_tok cells; p is a
// pass of n_tok rows.
void encoder_forward(const model& m, const rope_params& rope, run_state& rs, const ubatch& ub, const int32_t* seq,
                     pass& p, float* hidden);

}  // namespace lp
