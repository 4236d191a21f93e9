// granitemoe.cpp — IBM Granite 3 mixture of experts (granite-3.x-1b-a400m,
// 3b-a800m) and GraniteMoeShared: Granite's block and multipliers with
// experts in every layer (a softmax router, the top expert_used_count,
// weights renormalised; the shared expert where the file has one). The
// whole reading is granite.cpp's: llama.cpp runs both architectures with
// one graph, and a granitemoe file without experts is dense Granite.
#include "model.h"

namespace lp {

void granite_setup(const gguf_file& f, hparams& hp);  // granite.cpp

extern const arch_def arch_granitemoe = {"granitemoe", granite_setup, /*swa_period=*/-1, /*encoder=*/false,
                                         /*chat_format=*/""};

}  // namespace lp
