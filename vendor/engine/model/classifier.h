// classifier.h — the classification head of rerankers, run on pooled rows
// (llama.cpp's pooling "rank"): cross-encoders of the BERT family
// (bge-reranker: XLM-RoBERTa's dense + tanh, then out_proj; a BERT
// classifier's single out_proj, its pooler being dropped by llama.cpp's
// converter) and Qwen3-Reranker (the LM head's "yes" / "no" rows, softmaxed).
// Not here: choosing the pooled row of each sequence (context_embd.cpp),
// loading the tensors (model.cpp load_classifier).
#pragma once

#include "blocks.h"

namespace lp {

// scores (n, n_cls_out) of the pooled states x (n, n_embd): tanh(cls · x +
// cls_b) when the model has cls, then cls_out · (that) + cls_out_b, then a
// softmax over each row's scores where the model asks (hparams::cls_softmax).
// mid: (n, n_embd) work rows; p: a pass of n rows. The model must have a
// classifier (model_weights::has_classifier).  [result_embd_pooled]
void classifier_head(const model& m, rows x, rows mid, float* scores, pass& p);

}  // namespace lp
