// granitehybrid.cpp — IBM Granite 4.0-H (H-Tiny, H-Small, H-Micro, H-1B, H-350M),
// as llama.cpp reads its GGUF: Mamba-2 layers (model.h ssm_kind::mamba2,
// blocks.h mamba2_block) where the per-layer attention.head_count_kv array
// holds 0, Granite attention layers between them, and in every layer
// Granite's FFN: dense (H-1B, H-350M, H-Micro), or experts with a shared
// expert (H-Tiny, H-Small). Granite's multipliers (embedding, attention,
// residual, logit scales) and its RoPE switch (the hybrids are written with
// rope.scaling.finetuned false: no positions) are granite.cpp's reading.
// Not covered by a fixture: Bamba checkpoints, which llama.cpp's converter
// also writes as this architecture (with RoPE on).
#include "model.h"

namespace lp {

void granite_setup(const gguf_file& f, hparams& hp);  // granite.cpp

namespace {

void setup(const gguf_file& f, hparams& hp) {
    granite_setup(f, hp);
    read_mamba2(f, hp);
    recurrent_from_kv_heads(hp);
}

}  // namespace

extern const arch_def arch_granitehybrid = {"granitehybrid", setup, /*swa_period=*/-1, /*encoder=*/false,
                                            /*chat_format=*/""};

}  // namespace lp
