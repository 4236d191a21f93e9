// vocab_gguf.h — read a model's tokenizer metadata (tokenizer.ggml.*) from a
// GGUF file into a vocab_data. Not here: interpreting it (vocab.h).
#pragma once

#include "vocab/vocab.h"

namespace lp {

class gguf_file;

// Throws lp::gguf_error when a tokenizer key has the wrong type or a required
// one (tokenizer.ggml.model, .tokens; .merges for "gpt2") is missing.
vocab_data vocab_data_from_gguf(const gguf_file& f);

}  // namespace lp
