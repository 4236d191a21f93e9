// context_embd.cpp — the embedding side of context (see context.h): decoding
// with encoder models (no KV cache, a batch of whole sequences in one pass)
// and pooling every row's final state into one vector per sequence (mean,
// first row = cls, last row), natively, for encoders and decoders alike;
// rank pooling (rerankers) then runs the classifier head on the pooled rows.
#include <algorithm>
#include <cstring>
#include <string>

#include "common.h"
#include "context.h"
#include "model/classifier.h"
#include "model/encoder.h"

namespace lp {

void context::decode_encoder(const batch_view& b) {
    const hparams& hp = model_->hp();
    if (!p_.embeddings)
        throw value_error("model architecture '" + hp.arch + "' is an encoder: it computes embeddings only; create "
                          "the context with embeddings=True");
    if (!b.tokens) throw value_error("decode: encoder models take token ids, not embeddings");
    if (b.n > p_.n_ubatch)
        throw value_error("decode: an encoder batch has at most n_ubatch " + std::to_string(p_.n_ubatch) + " rows");
    for (int64_t i = 0; i < b.n; ++i) {
        if (hp.n_pos_embd > 0 && b.pos[i] >= hp.n_pos_embd)
            throw value_error("decode: position " + std::to_string(b.pos[i]) + " at row " + std::to_string(i) +
                              " is beyond the model's " + std::to_string(hp.n_pos_embd) +
                              " learned positions (truncate the input)");
        first_seq_[(size_t)i] = b.seq_ids[b.seq_begin ? b.seq_begin[i] : i];
    }
    const bool all = !b.want && pooling_ == 0;
    int64_t n_out = 0;
    for (int64_t i = 0; i < b.n; ++i) n_out += b.want ? (b.want[i] != 0) : (all || i == b.n - 1);
    ensure_output_capacity(n_out);

    ubatch ub;
    ub.n_tok = b.n;
    ub.tokens = b.tokens;
    ub.pos = b.pos;
    backend_.use_pool((b.n > 1 && pool_batch_) ? *pool_batch_ : *pool_);
    pass ps(backend_, rs_, &tensor_cb_, b.n);
    if (!part_be_.empty()) ps.set_parts(&part_be_);
    if (!host_weights_.empty()) ps.set_host_weights(&host_weights_, &backend_);
    n_out_ = 0;
    if (pooling_ != 0) pool_begin();
    try {
        encoder_forward(*model_, rope_[0], rs_, ub, first_seq_.data(), ps, hidden_.data());
    } catch (...) {
        for (auto& g : gpu_backends_) g->discard();
        if (pooling_ != 0) pool_begin();
        throw;
    }
    if (pooling_ != 0) {
        pool_rows(b, 0, b.n, hidden_.data());
        pool_end();
    }
    int64_t kept = 0;
    keep_rows(b, 0, b.n, hidden_.data(), kept);
    n_out_ = kept;
}

void context::keep_rows(const batch_view& b, int64_t row0, int64_t n, const float* h, int64_t& out_at) {
    const int64_t E = model_->hp().n_embd;
    const bool all = !b.want && pooling_ == 0;
    for (int64_t t = 0; t < n; ++t) {
        const int64_t i = row0 + t;
        const bool keep = b.want ? b.want[i] != 0 : (all || i == b.n - 1);
        if (!keep) continue;
        std::memcpy(embd_->data() + out_at * E, h + t * E, sizeof(float) * (size_t)E);
        ++out_at;
    }
}

void context::pool_begin() {
    std::fill(embd_seq_.begin(), embd_seq_.end(), 0.0f);
    std::fill(seq_n_rows_.begin(), seq_n_rows_.end(), 0);
}

// Rows [row0, row0 + n) of batch b, with states h (n, n_embd), pooled into
// every sequence they belong to.
void context::pool_rows(const batch_view& b, int64_t row0, int64_t n, const float* h) {
    const int64_t E = model_->hp().n_embd;
    // Rank keeps the row the classifier reads: the first (the BERT family's
    // [CLS]) or, for a causal model, the last (Qwen3-Reranker's answer position).
    const int kind = pooling_ == 4 ? (model_->hp().causal ? 3 : 2) : pooling_;
    for (int64_t t = 0; t < n; ++t) {
        const int64_t i = row0 + t;
        const float* row = h + t * E;
        const int32_t s0 = b.seq_begin ? b.seq_begin[i] : (int32_t)i;
        const int32_t s1 = b.seq_begin ? b.seq_begin[i + 1] : (int32_t)i + 1;
        for (int32_t k = s0; k < s1; ++k) {
            const size_t s = (size_t)b.seq_ids[k];
            float* acc = embd_seq_.data() + s * (size_t)E;
            const int32_t pos = b.pos[i];
            const bool first = seq_n_rows_[s] == 0;
            ++seq_n_rows_[s];
            if (kind == 1) {
                add_row(acc, row, E);
            } else if ((kind == 2 && (first || pos < seq_pos_[s])) || (kind == 3 && (first || pos > seq_pos_[s]))) {
                std::memcpy(acc, row, sizeof(float) * (size_t)E);
                seq_pos_[s] = pos;
            }
        }
    }
}

void context::pool_end() {
    if (pooling_ == 4) classify_pooled();
    if (pooling_ != 1) return;
    const int64_t E = model_->hp().n_embd;
    for (size_t s = 0; s < seq_n_rows_.size(); ++s)
        if (seq_n_rows_[s] > 0) scale_row(embd_seq_.data() + s * (size_t)E, E, 1.0f / (float)seq_n_rows_[s]);
}

// The pooled rows of the sequences the last decode saw, gathered, through the
// classifier head (on the output part's backend, as the output head runs), in
// chunks of at most n_ubatch rows: what run_state and the backends are sized for.
void context::classify_pooled() {
    const hparams& hp = model_->hp();
    const int64_t E = hp.n_embd, C = hp.n_cls_out;
    std::vector<int> seqs;
    for (size_t s = 0; s < seq_n_rows_.size(); ++s)
        if (seq_n_rows_[s] > 0) seqs.push_back((int)s);
    for (size_t k = 0; k < seqs.size(); ++k)
        std::memcpy(cls_in_.data() + k * (size_t)E, embd_seq_.data() + (size_t)seqs[k] * (size_t)E,
                    sizeof(float) * (size_t)E);
    std::vector<float> scores(seqs.size() * (size_t)C);  // (n_seqs, n_cls_out)
    try {
        for (size_t k0 = 0; k0 < seqs.size(); k0 += (size_t)p_.n_ubatch) {
            const int64_t n = std::min<int64_t>((int64_t)(seqs.size() - k0), p_.n_ubatch);
            pass ps(backend_, rs_, &tensor_cb_, n);
            if (!part_be_.empty()) ps.set_parts(&part_be_);
            if (!host_weights_.empty()) ps.set_host_weights(&host_weights_, &backend_);
            classifier_head(*model_, rows{cls_in_.data() + k0 * (size_t)E, E},
                            rows{cls_mid_.data() + k0 * (size_t)E, E}, scores.data() + k0 * (size_t)C, ps);
        }
    } catch (...) {
        for (auto& g : gpu_backends_) g->discard();
        pool_begin();  // no sequence has scores
        throw;
    }
    for (size_t k = 0; k < seqs.size(); ++k)
        std::memcpy(seq_score_.data() + (size_t)seqs[k] * (size_t)C, scores.data() + k * (size_t)C,
                    sizeof(float) * (size_t)C);
}

const float* context::embeddings_seq(int seq) const {
    if (!p_.embeddings) throw value_error("the context was created without embeddings=True");
    if (pooling_ == 0)
        throw value_error("the context does not pool (pooling type none): use the per-row embeddings");
    check_seq(seq, "sequence id");
    if (seq_n_rows_[(size_t)seq] == 0)
        throw value_error("sequence " + std::to_string(seq) + " had no rows in the last decode");
    if (pooling_ == 4) return seq_score_.data() + (size_t)seq * (size_t)model_->hp().n_cls_out;
    return embd_seq_.data() + (size_t)seq * (size_t)model_->hp().n_embd;
}

int64_t context::n_embd_seq() const { return pooling_ == 4 ? model_->hp().n_cls_out : model_->hp().n_embd; }

}  // namespace lp
