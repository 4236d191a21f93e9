// sampler.cpp — see sampler.h. Work is proportional to the vocabulary only in
// the first pass (bias/penalties are sparse edits; top-k selects with a small
// heap); later stages see only the surviving candidates.
#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <queue>
#include <unordered_map>

#include "../common.h"
#include "grammar_state.h"

namespace lp {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The vocabulary passes below look at the logits a block at a time: a
// block's largest value (a branch-free loop over 16 independent lanes, which
// the compiler turns into vector max instructions at any ISA level) says
// whether any entry in it can matter. Gemma's 262k logits: greedy 0.32 ms ->
// ~0.05 ms, top-k 0.38 -> ~0.1 ms per token (Xeon), where a branch per entry
// cost more than the rest of a server step's Python.
constexpr int64_t kScanBlock = 256;

// The largest of x[0..n), n a multiple of 16, NaN ignored (-inf when there
// is nothing else).
float max_of16(const float* x, int64_t n) {
    float m[16];
    for (float& v : m) v = kNegInf;
    for (int64_t i = 0; i < n; i += 16)
        for (int j = 0; j < 16; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
    float r = m[0];
    for (int j = 1; j < 16; ++j) r = m[j] > r ? m[j] : r;
    return r;
}

// The candidates' order, strongest first: larger logit, then lower id, NaN
// ranked as -inf. A total order, so the standard sorts and heaps stay
// defined whatever the logits (a NaN from a logits processor included).
bool by_logit_desc(const token_prob& a, const token_prob& b) {
    const float x = std::isnan(a.logit) ? kNegInf : a.logit, y = std::isnan(b.logit) ? kNegInf : b.logit;
    return x > y || (x == y && a.id < b.id);
}

// The k largest entries of `values` (ties: lower id first), unsorted; over
// ids 0..n-1, or over `ids` only when given.
void select_top_k(const float* values, int32_t n, int32_t k, std::vector<token_prob>& out,
                  const std::vector<int32_t>* ids = nullptr) {
    out.clear();
    if (k <= 0) return;
    // min-heap on by_logit_desc: the root is the weakest kept candidate.
    const auto weaker = by_logit_desc;
    out.reserve(k);
    const int32_t count = ids ? (int32_t)ids->size() : n;
    for (int32_t j = 0; j < count; ++j) {
        // Once the heap is full, a block whose largest value does not beat
        // the root cannot enter (an equal value comes later, so with a
        // higher id: weaker); NaN roots never compare, so nothing is skipped.
        if (!ids && j % kScanBlock == 0 && j + kScanBlock <= count && (int32_t)out.size() == k &&
            max_of16(values + j, kScanBlock) <= out.front().logit) {
            j += kScanBlock - 1;
            continue;
        }
        const int32_t i = ids ? (*ids)[j] : j;
        const float v = values[i];
        if ((int32_t)out.size() < k) {
            out.push_back({i, v, 0.0f});
            std::push_heap(out.begin(), out.end(), weaker);
        } else if (weaker(token_prob{i, v, 0.0f}, out.front())) {  // the new one is stronger
            std::pop_heap(out.begin(), out.end(), weaker);
            out.back() = {i, v, 0.0f};
            std::push_heap(out.begin(), out.end(), weaker);
        }
    }
}

// llama.cpp's seed rule: LLAMA_DEFAULT_SEED asks for a random seed; any other
// value is used as its low 32 bits (the C API takes a uint32_t).
uint32_t rng_seed(uint64_t seed) {
    if ((uint32_t)seed == 0xFFFFFFFFu) return std::random_device{}();
    return (uint32_t)seed;
}

size_t index_of(const std::vector<token_prob>& cand, int32_t id) {
    for (size_t i = 0; i < cand.size(); ++i)
        if (cand[i].id == id) return i;
    return 0;
}

}  // namespace

sampler::sampler(const sampler_params& params, int32_t n_vocab)
    : p_(params), n_vocab_(n_vocab), rng_(rng_seed(params.seed)), mirostat_mu_(2.0f * params.mirostat_tau) {
    if (n_vocab <= 0) throw value_error("sampler: n_vocab must be positive");
    if (p_.min_keep < 1) p_.min_keep = 1;
}

sampler::~sampler() = default;

void sampler::set_grammar(std::unique_ptr<grammar_state> g) {
    if (g && (!g->vocab() || g->vocab()->n_tokens() != n_vocab_))
        throw value_error("set_grammar: the grammar's vocabulary must have n_vocab (" + std::to_string(n_vocab_) +
                          ") tokens");
    grammar_ = std::move(g);
}

void sampler::reseed(uint64_t seed) {
    rng_.seed(rng_seed(seed));
    mirostat_mu_ = 2.0f * p_.mirostat_tau;
}

void sampler::set_logit_bias(const std::vector<std::pair<int32_t, float>>& bias) {
    for (const auto& b : bias)
        if (b.first < 0 || b.first >= n_vocab_)
            throw value_error("logit_bias: token id " + std::to_string(b.first) + " is outside the vocabulary (0.." +
                              std::to_string(n_vocab_ - 1) + ")");
    bias_ = bias;
}

void sampler::set_history(const std::vector<int32_t>& tokens) {
    history_.clear();
    for (int32_t t : tokens) record(t);
}

void sampler::accept(int32_t token) {
    if (grammar_) grammar_->accept_token(token);
    record(token);
}

void sampler::record(int32_t token) {
    if (p_.penalty_last_n == 0) return;
    history_.push_back(token);
    if (p_.penalty_last_n > 0)
        while ((int32_t)history_.size() > p_.penalty_last_n) history_.pop_front();
}

// Logits after bias and penalties. Both touch few tokens, so they are applied
// as sparse edits to a copy; without either the caller's logits are used as is.
const float* sampler::adjusted_logits(const float* logits) {
    const bool penalties = !history_.empty() &&
        (p_.repeat_penalty != 1.0f || p_.frequency_penalty != 0.0f || p_.presence_penalty != 0.0f);
    if (bias_.empty() && !penalties) return logits;
    work_.assign(logits, logits + n_vocab_);
    for (const auto& b : bias_) work_[b.first] += b.second;
    if (penalties) {
        std::unordered_map<int32_t, int32_t> counts;
        for (int32_t t : history_)
            if (t >= 0 && t < n_vocab_) ++counts[t];
        for (const auto& c : counts) {
            float& l = work_[c.first];
            l = l <= 0.0f ? l * p_.repeat_penalty : l / p_.repeat_penalty;
            l -= (float)c.second * p_.frequency_penalty + p_.presence_penalty;
        }
    }
    return work_.data();
}

// The candidates in id order (llama.cpp's starting array), or, when the chain
// begins with top-k, the k best already sorted (what its top-k leaves).
void sampler::build_candidates(const float* src, const std::vector<int32_t>* allowed) {
    sorted_ = false;
    const int32_t n = allowed ? (int32_t)allowed->size() : n_vocab_;
    const bool truncate_k = p_.temperature > 0.0f && p_.mirostat == 0 && p_.top_k > 0 && p_.top_k < n;
    if (truncate_k) {
        select_top_k(src, n_vocab_, std::max(p_.top_k, p_.min_keep), cand_, allowed);
        sort_desc();
    } else if (allowed) {
        cand_.resize(n);
        for (int32_t j = 0; j < n; ++j) cand_[j] = {(*allowed)[j], src[(*allowed)[j]], 0.0f};
    } else {
        cand_.resize(n_vocab_);
        for (int32_t i = 0; i < n_vocab_; ++i) cand_[i] = {i, src[i], 0.0f};
    }
}

void sampler::sort_desc() {
    if (!sorted_) std::sort(cand_.begin(), cand_.end(), by_logit_desc);
    sorted_ = true;
}

// llama.cpp's softmax: the largest logit (the first when sorted), expf, a
// float sum in the current order, then a float division.
void sampler::softmax(bool sort) {
    if (sort) sort_desc();
    if (cand_.empty()) return;
    float mx = cand_[0].logit;
    if (!sorted_)
        for (const auto& c : cand_) mx = std::max(mx, c.logit);
    float sum = 0.0f;
    for (auto& c : cand_) { c.p = std::exp(c.logit - mx); sum += c.p; }
    for (auto& c : cand_) c.p /= sum;
}

void sampler::top_k(int32_t k) {
    if (k <= 0) return;
    k = std::max(k, p_.min_keep);
    if (k >= (int32_t)cand_.size()) { sort_desc(); return; }
    if (!sorted_) std::partial_sort(cand_.begin(), cand_.begin() + k, cand_.end(), by_logit_desc);
    cand_.resize(k);
    sorted_ = true;
}

void sampler::top_p(float p) {
    if (p >= 1.0f) return;
    softmax(false);  // probabilities from the current order's sum, then sorted
    if (!sorted_ && cand_.size() > 1024) {
        // Without top-k the list is the whole vocabulary (262k tokens: a full
        // sort is ~20 ms). Sort only the best m, growing m until their
        // probabilities reach p; the sorted prefix is the one a full sort gives
        // (by_logit_desc is a total order), as in llama.cpp's adaptive sort.
        for (size_t m = 256; m < cand_.size(); m *= 4) {
            std::nth_element(cand_.begin(), cand_.begin() + (std::ptrdiff_t)m, cand_.end(), by_logit_desc);
            std::sort(cand_.begin(), cand_.begin() + (std::ptrdiff_t)m, by_logit_desc);
            float cum = 0.0f;
            for (size_t i = 0; i < m; ++i) {
                cum += cand_[i].p;
                if (cum >= p && i + 1 >= (size_t)p_.min_keep) {
                    cand_.resize(i + 1);
                    sorted_ = true;
                    return;
                }
            }
        }
    }
    sort_desc();
    float cum = 0.0f;
    size_t keep = cand_.size();
    for (size_t i = 0; i < cand_.size(); ++i) {
        cum += cand_[i].p;
        if (cum >= p && i + 1 >= (size_t)p_.min_keep) { keep = i + 1; break; }
    }
    cand_.resize(keep);
}

void sampler::min_p(float p) {
    if (p <= 0.0f || cand_.empty()) return;
    if (!sorted_) {
        // An unsorted list is filtered in place, its order kept, when that
        // leaves at least min_keep tokens (llama.cpp's first attempt).
        float mx = -std::numeric_limits<float>::max();
        for (const auto& c : cand_) mx = std::max(mx, c.logit);
        const float cut = mx + std::log(p);
        size_t kept = 0;
        for (const auto& c : cand_) kept += c.logit >= cut;
        if (kept > 0 && kept >= (size_t)p_.min_keep) {
            size_t at = 0;
            for (const auto& c : cand_)
                if (c.logit >= cut) cand_[at++] = c;
            cand_.resize(at);
            return;
        }
        sort_desc();
    }
    const float cut = cand_[0].logit + std::log(p);
    size_t i = 1;  // the best token always stays
    for (; i < cand_.size(); ++i)
        if (cand_[i].logit < cut && i >= (size_t)p_.min_keep) break;
    cand_.resize(i);
}

void sampler::typical(float p) {
    if (p >= 1.0f || cand_.size() <= 1) return;
    softmax(true);
    float entropy = 0.0f;
    for (const auto& c : cand_)
        if (c.p > 0.0f) entropy += -c.p * std::log(c.p);  // (llama.cpp would turn a p of 0 into NaN)
    std::vector<float> shifted(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) shifted[i] = std::fabs(-std::log(cand_[i].p) - entropy);
    std::vector<size_t> order(cand_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    for (float& x : shifted)
        if (std::isnan(x)) x = std::numeric_limits<float>::infinity();  // (keeps the sort's order total)
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return shifted[a] < shifted[b]; });
    float cum = 0.0f;
    size_t keep = order.size();
    for (size_t i = 0; i < order.size(); ++i) {
        cum += cand_[order[i]].p;
        if (cum > p && i + 1 >= (size_t)p_.min_keep) { keep = i + 1; break; }
    }
    std::vector<token_prob> kept;
    kept.reserve(keep);
    for (size_t i = 0; i < keep; ++i) kept.push_back(cand_[order[i]]);
    cand_.swap(kept);
    sorted_ = false;
}

void sampler::temperature(float t) {
    if (t == 1.0f) return;
    for (auto& c : cand_) c.logit /= t;
}

// llama.cpp's dist stage: one uniform double per draw (also for a single
// candidate); unnormalised float probabilities summed in double, walked in
// the candidates' current order to the first running sum >= sum * u.
int32_t sampler::draw() {
    std::uniform_real_distribution<double> u(0.0, 1.0);
    if (cand_.size() == 1) {
        (void)u(rng_);
        cand_[0].p = 1.0f;
        return cand_[0].id;
    }
    float mx = cand_[0].logit;
    if (!sorted_)
        for (const auto& c : cand_) mx = std::max(mx, c.logit);
    double sum = 0.0;
    for (auto& c : cand_) { c.p = std::exp(c.logit - mx); sum += c.p; }
    const double target = sum * u(rng_);
    double run = 0.0;
    int32_t chosen = cand_.back().id;  // (only if rounding left the target above every running sum)
    for (const auto& c : cand_) {
        run += c.p;
        if (run >= target) { chosen = c.id; break; }
    }
    for (auto& c : cand_) c.p = (float)(c.p / sum);
    return chosen;
}

int32_t sampler::discrete_draw() {
    std::vector<float> probs(cand_.size());
    for (size_t i = 0; i < cand_.size(); ++i) probs[i] = cand_[i].p;
    std::discrete_distribution<int> d(probs.begin(), probs.end());
    const size_t i = (size_t)d(rng_);
    return cand_[i < cand_.size() ? i : 0].id;  // (NaN weights: keep the index in range)
}

// Mirostat v1 (Basu et al. 2020), in llama.cpp's float arithmetic: estimate
// the Zipf exponent from the top m = 100 candidates, derive k from the
// target surprise mu, draw from the top k, move mu toward tau.
int32_t sampler::mirostat_v1() {
    softmax(true);
    const size_t m = 100;
    float sum_tb = 0.0f, sum_tt = 0.0f;
    for (size_t i = 0; i + 1 < m && i + 1 < cand_.size(); ++i) {
        const float t = std::log(float(i + 2) / float(i + 1));
        const float b = std::log(cand_[i].p / cand_[i + 1].p);
        sum_tb += t * b;
        sum_tt += t * t;
    }
    const float s_hat = sum_tb / sum_tt;
    const float eps = s_hat - 1.0f;
    const float k = std::pow((eps * std::pow(2.0f, mirostat_mu_)) / (1.0f - std::pow((float)n_vocab_, -eps)),
                             1.0f / s_hat);
    // int(k) as llama.cpp takes it, kept defined for NaN / huge k
    const size_t ki = !(k >= 1.0f) ? 1 : k >= (float)cand_.size() ? cand_.size() : (size_t)k;
    cand_.resize(ki);
    softmax(true);
    const int32_t id = discrete_draw();
    const float surprise = -std::log2(cand_[index_of(cand_, id)].p);
    mirostat_mu_ -= p_.mirostat_eta * (surprise - p_.mirostat_tau);
    return id;
}

// Mirostat v2: drop the candidates whose surprise exceeds mu, draw from the rest.
int32_t sampler::mirostat_v2() {
    softmax(true);
    size_t keep = 0;
    while (keep < cand_.size() && !(-std::log2(cand_[keep].p) > mirostat_mu_)) ++keep;
    cand_.resize(std::max<size_t>(keep, 1));
    softmax(true);
    const int32_t id = discrete_draw();
    const float surprise = -std::log2(cand_[index_of(cand_, id)].p);
    mirostat_mu_ -= p_.mirostat_eta * (surprise - p_.mirostat_tau);
    return id;
}

int32_t sampler::sample(const float* logits) {
    const float* src = adjusted_logits(logits);
    if (!grammar_) return sample_chain(src, nullptr);
    if (p_.temperature == 0.0f) {
        // Greedy: the best token overall is the best allowed one when the grammar allows it.
        const int32_t first = sample_chain(src, nullptr);
        if (grammar_->allows(first)) return first;
        ++n_grammar_fallbacks_;
    } else if (p_.temperature > 0.0f && p_.mirostat == 0 && p_.top_k > 0 && allowed_top_k(src)) {
        return run_stages();
    }
    grammar_->allowed_tokens(allowed_);
    allowed_.erase(std::remove_if(allowed_.begin(), allowed_.end(), [&](int32_t id) { return src[id] == kNegInf; }),
                   allowed_.end());  // banned by logit_bias (llama.cpp keeps them at -inf: never drawn)
    // The grammar lists tokens in its own order. Where the chain draws from an
    // unsorted list (no top-k; the raw softmax) the order is llama.cpp's id
    // order, restored by a pass over the vocabulary (a sort of ~250k ids costs
    // 10+ ms); everywhere else the candidates get sorted by logit anyway.
    const bool unsorted_draw = p_.temperature < 0.0f || (p_.mirostat == 0 && p_.top_k <= 0);
    if (unsorted_draw && !std::is_sorted(allowed_.begin(), allowed_.end())) {
        mask_.assign((size_t)n_vocab_, 0);
        for (int32_t id : allowed_) mask_[(size_t)id] = 1;
        allowed_.clear();
        for (int32_t id = 0; id < n_vocab_; ++id)
            if (mask_[(size_t)id]) allowed_.push_back(id);
    }
    if (allowed_.empty())
        throw value_error(grammar_->can_end() ? "grammar: the text is complete and no end-of-generation token is known"
                                              : "grammar: no token of the vocabulary can continue the text");
    return sample_chain(src, &allowed_);
}

int32_t sampler::sample_chain(const float* src, const std::vector<int32_t>* allowed) {
    if (p_.temperature == 0.0f) {
        if (!allowed) return argmax(src, n_vocab_);
        int32_t best = (*allowed)[0];
        for (int32_t id : *allowed)
            if (src[id] > src[best] || (src[id] == src[best] && id < best)) best = id;
        return best;
    }
    build_candidates(src, allowed);
    return run_stages();
}

// Top-k over the allowed tokens, without listing them all: the first k allowed
// tokens in descending logit order are exactly that top-k. Probes the best
// max(4k, 256) tokens; false when they hold fewer than k allowed ones (and
// are not the whole vocabulary), leaving the caller to filter everything.
bool sampler::allowed_top_k(const float* src) {
    const int32_t k = std::max(p_.top_k, p_.min_keep);
    const int32_t probe = std::min(n_vocab_, std::max(4 * k, 256));
    select_top_k(src, n_vocab_, probe, cand_);
    std::sort(cand_.begin(), cand_.end(), by_logit_desc);
    size_t at = 0;
    for (size_t i = 0; i < cand_.size() && (int32_t)at < k; ++i)
        if (cand_[i].logit != kNegInf && grammar_->allows(cand_[i].id)) cand_[at++] = cand_[i];
    if ((int32_t)at < k && probe < n_vocab_) return false;
    if (at == 0)
        throw value_error(grammar_->can_end() ? "grammar: the text is complete and no end-of-generation token is known"
                                              : "grammar: no token of the vocabulary can continue the text");
    cand_.resize(at);
    sorted_ = true;
    return true;
}

// The chain from its candidates on.
int32_t sampler::run_stages() {
    if (p_.temperature < 0.0f) return draw();
    if (p_.mirostat == 1) return mirostat_v1();
    if (p_.mirostat == 2) return mirostat_v2();
    top_k(p_.top_k);
    typical(p_.typical_p);
    top_p(p_.top_p);
    min_p(p_.min_p);
    temperature(p_.temperature);
    return draw();
}

logprob_result compute_logprobs(const float* logits, int32_t n_vocab, int32_t chosen, int32_t n_top) {
    float mx = kNegInf;
    for (int32_t i = 0; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += std::exp((double)(logits[i] - mx));
    const float lse = mx + (float)std::log(sum);
    logprob_result r;
    r.chosen_logprob = (chosen >= 0 && chosen < n_vocab) ? logits[chosen] - lse : kNegInf;
    std::vector<token_prob> top;
    select_top_k(logits, n_vocab, std::min(n_top, n_vocab), top);
    std::sort(top.begin(), top.end(), by_logit_desc);
    for (const auto& t : top) r.top.push_back({t.id, t.logit - lse});
    return r;
}

int32_t argmax(const float* logits, int32_t n_vocab) {
    // The first index of the largest value; NaN never wins, except at index 0,
    // which nothing then beats (the plain loop `if (x[i] > x[best]) best = i`).
    if (n_vocab <= 1 || std::isnan(logits[0])) return 0;
    float best = kNegInf;
    int64_t block = 0;
    for (int64_t b = 0; b < n_vocab; b += kScanBlock) {
        const int64_t len = std::min<int64_t>(kScanBlock, n_vocab - b), len16 = len & ~(int64_t)15;
        float m = max_of16(logits + b, len16);
        for (int64_t i = b + len16; i < b + len; ++i) m = logits[i] > m ? logits[i] : m;
        if (m > best) {
            best = m;
            block = b;
        }
    }
    // best == -inf: nothing above -inf anywhere, and x[0] (not NaN) is -inf
    const int64_t end = std::min<int64_t>(block + kScanBlock, n_vocab);
    for (int64_t i = block; i < end; ++i)
        if (logits[i] == best) return (int32_t)i;
    return 0;
}

}  // namespace lp
