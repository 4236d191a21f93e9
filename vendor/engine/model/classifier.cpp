// classifier.cpp — see classifier.h. Composed of the seam's ops (product,
// bias, tanh as a soft-cap of 1) on the output part's backend; the softmax of
// a yes / no head is a handful of floats per sequence, done here on the host
// with the CPU's reference row op.
#include "classifier.h"

#include "../common.h"

namespace lp {

void classifier_head(const model& m, rows x, rows mid, float* scores, pass& p) {
    const hparams& hp = m.hp();
    const model_weights& W = m.weights();
    if (!W.has_classifier()) throw value_error("model has no classifier head (cls.output.weight)");
    const int64_t E = hp.n_embd, C = hp.n_cls_out;
    p.part((size_t)hp.n_layer + 1);
    rows in = x;
    if (W.cls.data) {
        p.matmul(W.cls, x, mid);
        p.add_bias(mid, W.cls_b);
        p.softcap(mid, E, 1.0f);  // tanh(y / 1) * 1 = tanh(y)
        in = mid;
    }
    const rows out{scores, C};
    p.matmul(W.cls_out, in, out);
    p.add_bias(out, W.cls_out_b);
    p.finish();
    if (hp.cls_softmax)
        for (int64_t t = 0; t < p.n(); ++t) softmax_row(scores + t * C, C);
    p.tap("result_embd_pooled", -1, out, C);
}

}  // namespace lp
