// recurrent_state.cpp — see recurrent_state.h.
#include "recurrent_state.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "common.h"

namespace lp {

namespace {
constexpr uint32_t kMagic = 0x5352504c;  // "LPRS"
}

recurrent_state::recurrent_state(const hparams& hp, int n_seq, int n_checkpoints, const std::vector<device>& where)
    : n_ckpt_(std::max(0, n_checkpoints)) {
    if (!where.empty() && (int64_t)where.size() != hp.n_layer)
        throw value_error("recurrent state: layer devices do not match n_layer");
    index_.assign((size_t)hp.n_layer, -1);
    for (int64_t il = 0; il < hp.n_layer; ++il)
        if (hp.is_recurrent(il)) index_[(size_t)il] = (int)n_rec_++;
    pos_.assign((size_t)n_seq, -1);
    ckpt_.resize((size_t)n_seq);
    if (n_rec_ == 0) return;
    conv_n_ = hp.ssm.conv_floats();
    delta_n_ = hp.ssm.delta_floats();
    for (int64_t il = 0; il < hp.n_layer; ++il) {
        if (index_[(size_t)il] < 0) continue;
        const device d = where.empty() ? device::host() : where[(size_t)il];
        conv_.push_back(float_buffer(d, (size_t)(n_seq * conv_n_)));
        delta_.push_back(float_buffer(d, (size_t)(n_seq * delta_n_)));
        std::memset(conv_.back().data(), 0, conv_.back().bytes());  // device_buffers come uninitialised
        std::memset(delta_.back().data(), 0, delta_.back().bytes());
    }
}

size_t recurrent_state::bytes_for(const hparams& hp, int n_seq) {
    return bytes_of(hp.n_recurrent(), hp.n_recurrent() ? hp.ssm.conv_floats() : 0,
                    hp.n_recurrent() ? hp.ssm.delta_floats() : 0, n_seq);
}

size_t recurrent_state::checkpoint_bytes() const {
    size_t b = 0;
    for (const auto& v : ckpt_)
        for (const snapshot& s : v) b += sizeof(float) * s.data.size();
    return b;
}

void recurrent_state::save_to(int seq, std::vector<float>& out) const {
    out.resize((size_t)(n_rec_ * (conv_n_ + delta_n_)));
    float* o = out.data();
    for (int64_t r = 0; r < n_rec_; ++r) {
        std::memcpy(o, conv_[(size_t)r].f32() + seq * conv_n_, sizeof(float) * (size_t)conv_n_);
        o += conv_n_;
        std::memcpy(o, delta_[(size_t)r].f32() + seq * delta_n_, sizeof(float) * (size_t)delta_n_);
        o += delta_n_;
    }
}

void recurrent_state::load_from(int seq, const std::vector<float>& in) {
    const float* i = in.data();
    for (int64_t r = 0; r < n_rec_; ++r) {
        std::memcpy(conv_[(size_t)r].f32() + seq * conv_n_, i, sizeof(float) * (size_t)conv_n_);
        i += conv_n_;
        std::memcpy(delta_[(size_t)r].f32() + seq * delta_n_, i, sizeof(float) * (size_t)delta_n_);
        i += delta_n_;
    }
}

void recurrent_state::clear_seq(int seq) {
    for (int64_t r = 0; r < n_rec_; ++r) {
        std::fill_n(conv_[(size_t)r].f32() + seq * conv_n_, conv_n_, 0.0f);
        std::fill_n(delta_[(size_t)r].f32() + seq * delta_n_, delta_n_, 0.0f);
    }
    pos_[(size_t)seq] = -1;
    ckpt_[(size_t)seq].clear();
}

void recurrent_state::clear() {
    for (int s = 0; s < (int)pos_.size(); ++s) clear_seq(s);
}

bool recurrent_state::can_rm(int seq, int32_t p0, int32_t p1, int32_t pos_min) const {
    const int32_t P = pos_[(size_t)seq];
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (n_rec_ == 0 || P < 0 || p1 <= p0 || p0 > P) return true;  // nothing of the state is removed
    if (p1 <= P) return false;                                     // a gap inside what the state summarises
    if (p0 <= std::max(pos_min, 0)) return true;                   // the whole sequence
    for (const snapshot& s : ckpt_[(size_t)seq])
        if (s.pos == p0 - 1) return true;
    return false;
}

void recurrent_state::rm(int seq, int32_t p0, int32_t p1, int32_t pos_min) {
    const int32_t P = pos_[(size_t)seq];
    if (p0 < 0) p0 = 0;
    if (p1 < 0) p1 = INT32_MAX;
    if (n_rec_ == 0 || P < 0 || p1 <= p0 || p0 > P) return;
    if (p0 <= std::max(pos_min, 0)) {
        clear_seq(seq);
        return;
    }
    if (!restore(seq, p0 - 1)) throw std::logic_error("recurrent_state::rm without can_rm");
}

bool recurrent_state::restore(int seq, int32_t p) {
    std::vector<snapshot>& v = ckpt_[(size_t)seq];
    for (const snapshot& s : v)
        if (s.pos == p) {
            load_from(seq, s.data);
            pos_[(size_t)seq] = p;
            // Checkpoints past p belong to tokens that are gone.
            v.erase(std::remove_if(v.begin(), v.end(), [&](const snapshot& c) { return c.pos > p; }), v.end());
            return true;
        }
    return false;
}

void recurrent_state::cp(int src, int dst) {
    if (src == dst) return;
    for (int64_t r = 0; r < n_rec_; ++r) {
        std::memcpy(conv_[(size_t)r].f32() + dst * conv_n_, conv_[(size_t)r].f32() + src * conv_n_,
                    sizeof(float) * (size_t)conv_n_);
        std::memcpy(delta_[(size_t)r].f32() + dst * delta_n_, delta_[(size_t)r].f32() + src * delta_n_,
                    sizeof(float) * (size_t)delta_n_);
    }
    pos_[(size_t)dst] = pos_[(size_t)src];
    ckpt_[(size_t)dst] = ckpt_[(size_t)src];
}

void recurrent_state::keep(int seq) {
    for (int s = 0; s < (int)pos_.size(); ++s)
        if (s != seq) clear_seq(s);
}

void recurrent_state::checkpoint(int seq) {
    const int32_t P = pos_[(size_t)seq];
    if (n_rec_ == 0 || n_ckpt_ == 0 || P < 0) return;
    std::vector<snapshot>& v = ckpt_[(size_t)seq];
    for (const snapshot& s : v)
        if (s.pos == P) return;
    snapshot s;
    if (v.size() >= (size_t)n_ckpt_) {  // reuse the lowest position's memory
        s = std::move(v.front());
        v.erase(v.begin());
    }
    s.pos = P;
    save_to(seq, s.data);
    auto at = std::upper_bound(v.begin(), v.end(), P, [](int32_t p, const snapshot& c) { return p < c.pos; });
    v.insert(at, std::move(s));
}

int32_t recurrent_state::resume_at(int seq, int32_t n) const {
    if (n_rec_ == 0) return n;
    int32_t best = 0;
    const int32_t P = pos_[(size_t)seq];
    if (P + 1 <= n) best = std::max(best, P + 1);
    for (const snapshot& s : ckpt_[(size_t)seq])
        if (s.pos + 1 <= n) best = std::max(best, s.pos + 1);
    return best;
}

// Layout: magic, n_rec, n_seq, conv floats, delta floats (5 × u32/u64), then
// per sequence its position (i32) and, when >= 0, its layers' data as save_to
// lays it out.
void recurrent_state::write_state(std::vector<uint8_t>& out) const {
    auto put = [&](const void* p, size_t n) {
        const size_t at = out.size();
        out.resize(at + n);
        std::memcpy(out.data() + at, p, n);
    };
    const uint32_t magic = kMagic, n_seq = (uint32_t)pos_.size();
    const uint64_t hdr[3] = {(uint64_t)n_rec_, (uint64_t)conv_n_, (uint64_t)delta_n_};
    put(&magic, 4);
    put(&n_seq, 4);
    put(hdr, sizeof(hdr));
    std::vector<float> tmp;
    for (int s = 0; s < (int)n_seq; ++s) {
        const int32_t p = pos_[(size_t)s];
        put(&p, 4);
        if (p < 0) continue;
        save_to(s, tmp);
        put(tmp.data(), sizeof(float) * tmp.size());
    }
}

size_t recurrent_state::read_state(const uint8_t* data, size_t size, bool apply) {
    size_t at = 0;
    auto need = [&](size_t k) {
        if (k > size || at > size - k) throw value_error("context state is truncated (recurrent state)");
    };
    uint32_t magic = 0, n_seq = 0;
    uint64_t hdr[3] = {0, 0, 0};
    need(8 + sizeof(hdr));
    std::memcpy(&magic, data, 4);
    std::memcpy(&n_seq, data + 4, 4);
    std::memcpy(hdr, data + 8, sizeof(hdr));
    at = 8 + sizeof(hdr);
    if (magic != kMagic) throw value_error("context state: bad recurrent-state section");
    if (n_seq != pos_.size() || hdr[0] != (uint64_t)n_rec_ || hdr[1] != (uint64_t)conv_n_ ||
        hdr[2] != (uint64_t)delta_n_)
        throw value_error("context state was saved by a context with another recurrent-state layout (n_seq_max)");
    const size_t per = sizeof(float) * (size_t)(n_rec_ * (conv_n_ + delta_n_));
    std::vector<float> tmp((size_t)(n_rec_ * (conv_n_ + delta_n_)));
    for (uint32_t s = 0; s < n_seq; ++s) {
        need(4);
        int32_t p = 0;
        std::memcpy(&p, data + at, 4);
        at += 4;
        if (p < -1) throw value_error("context state: bad recurrent-state position");
        if (apply) clear_seq((int)s);
        if (p < 0) continue;
        need(per);
        if (apply) {
            std::memcpy(tmp.data(), data + at, per);
            load_from((int)s, tmp);
            pos_[s] = p;
        }
        at += per;
    }
    return at;
}

}  // namespace lp
