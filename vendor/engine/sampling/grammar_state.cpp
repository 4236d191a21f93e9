// grammar_state.cpp — the recogniser and token filter (see grammar_state.h).
#include "grammar_state.h"

#include <algorithm>

namespace lp {

namespace {

constexpr size_t kMaxStacks = 20000;       // per state: beyond this a grammar is too ambiguous
constexpr size_t kMaxFrames = 1u << 21;    // interned frames before the stores are rebuilt
constexpr size_t kMaxNodes = 1u << 16;     // automaton states before the stores are rebuilt

}  // namespace

size_t grammar_state::vec_hash::operator()(const std::vector<int32_t>& v) const {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ v.size();
    for (int32_t x : v) h = (h ^ (uint32_t)x) * 0x100000001B3ull + (h >> 29);
    return (size_t)h;
}

grammar_state::grammar_state(std::shared_ptr<const grammar> g, std::shared_ptr<const grammar_vocab> vocab)
    : g_(std::move(g)), v_(std::move(vocab)) {
    if (!g_) throw value_error("grammar_state: no grammar");
    if (v_) idx_ = vocab_index_for(*g_, v_);
    reset();
}

void grammar_state::reset() {
    if (start_ == kDead) start_ = start_node();
    cur_ = start_;
    pend_ = utf8_partial();
}

int32_t grammar_state::frame_id(uint32_t pos, int32_t parent) {
    const uint64_t key = ((uint64_t)pos << 32) | (uint32_t)(parent + 1);
    auto it = frame_ids_.find(key);
    if (it != frame_ids_.end()) return it->second;
    const int32_t id = (int32_t)frames_.size();
    frames_.push_back({pos, parent});
    frame_ids_.emplace(key, id);
    return id;
}

// Adds to `out` the stacks reached from "at `pos`, then resume `parent`" by
// entering rules and leaving finished ones until a character set is on top.
// seen_ (cleared by the caller once per step) stops repeated work.
void grammar_state::expand(uint32_t pos, int32_t parent, std::vector<int32_t>& out) {
    work_.clear();
    work_.push_back({pos, parent});
    while (!work_.empty()) {
        const auto [p, par] = work_.back();
        work_.pop_back();
        const grammar::elem& e = g_->at(p);
        if (e.kind == grammar::op::chars) {
            out.push_back(frame_id(p, par));
            continue;
        }
        if (!seen_.insert(((uint64_t)p << 32) | (uint32_t)(par + 1)).second) continue;
        if (e.kind == grammar::op::end) {
            if (par < 0) {
                out.push_back(-1);  // everything finished: the text can end here
            } else {
                work_.push_back({frames_[par].pos, frames_[par].parent});
            }
            continue;
        }
        // A rule: resume after it, unless nothing follows it (tail call —
        // right-recursive repetitions then keep the stack flat).
        const int32_t ret = g_->at(p + 1).kind == grammar::op::end ? par : frame_id(p + 1, par);
        const uint32_t* a = g_->alts_begin((int32_t)e.arg);
        const uint32_t* a_end = g_->alts_end((int32_t)e.arg);
        for (; a != a_end; ++a) work_.push_back({*a, ret});
    }
    if (out.size() > kMaxStacks)
        throw value_error("grammar: too ambiguous (over " + std::to_string(kMaxStacks) +
                          " parses in progress at once); rewrite the ambiguous rules");
}

int32_t grammar_state::intern(std::vector<int32_t>& stacks) {
    if (stacks.empty()) return kDead;
    std::sort(stacks.begin(), stacks.end());
    stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
    auto it = node_ids_.find(stacks);
    if (it != node_ids_.end()) return it->second;
    const int32_t id = (int32_t)nodes_.size();
    nodes_.emplace_back();
    nodes_.back().stacks = stacks;
    nodes_.back().can_end = stacks.front() == -1;
    node_ids_.emplace(stacks, id);
    return id;
}

int32_t grammar_state::start_node() {
    out_stacks_.clear();
    seen_.clear();
    const int32_t root = g_->root_rule();
    for (const uint32_t* a = g_->alts_begin(root); a != g_->alts_end(root); ++a) expand(*a, -1, out_stacks_);
    const int32_t n = intern(out_stacks_);
    if (n == kDead) throw value_error("grammar: the start rule matches nothing");
    return n;
}

int32_t grammar_state::step(int32_t n, int32_t cls) {
    {
        node& nd = nodes_[n];
        if (nd.next.empty()) nd.next.assign(g_->n_classes(), kUnknown);
        if (nd.next[cls] != kUnknown) return nd.next[cls];
    }
    out_stacks_.clear();
    seen_.clear();
    const std::vector<int32_t>& stacks = nodes_[n].stacks;  // expand() does not touch nodes_
    for (int32_t s : stacks) {
        if (s < 0) continue;
        const frame f = frames_[s];
        if (g_->charset_has_class(g_->at(f.pos).arg, cls)) expand(f.pos + 1, f.parent, out_stacks_);
    }
    const int32_t to = intern(out_stacks_);
    nodes_[n].next[cls] = to;
    return to;
}

// Can some code point that `pend` may still become be matched from n?
bool grammar_state::partial_possible(int32_t n, const utf8_partial& pend) {
    const auto [lo, hi] = utf8_partial_range(pend);
    if (lo > hi) return false;
    for (int32_t i = g_->interval_of(lo); i < g_->n_intervals() && g_->interval_lo(i) <= hi; ++i)
        if (step(n, g_->interval_class(i)) != kDead) return true;
    return false;
}

// The usual successor of n: the live state most of the vocabulary's
// characters (by trie node count) lead to; and the class bits whose classes
// all lead there (a bit shared by several classes counts only if all do).
void grammar_state::find_usual(int32_t n) {
    const int32_t nc = g_->n_classes();
    std::vector<int32_t> to(nc);
    std::unordered_map<int32_t, uint64_t> weight;
    for (int32_t c = 0; c < nc; ++c) {
        to[c] = step(n, c);
        if (to[c] != kDead) weight[to[c]] += idx_->class_weight[c] + 1;
    }
    int32_t usual = kDead;
    uint64_t best = 0;
    for (const auto& [state, w] : weight)
        if (w > best || (w == best && state < usual)) { best = w; usual = state; }
    uint64_t bits = 0;
    if (usual != kDead) {
        bits = ~0ull;
        for (int32_t c = 0; c < nc; ++c)
            if (to[c] != usual) bits &= ~(1ull << idx_->class_bit[c]);
    }
    nodes_[n].usual = usual;
    nodes_[n].usual_bits = bits;
}

// Class bits a trie subtree of the given height may use and still be allowed
// as a whole from state n: at each depth the character takes the usual step.
uint64_t grammar_state::safe_bits(int32_t n, uint32_t height) {
    if (nodes_[n].chain.size() >= height) return nodes_[n].chain[height - 1];
    std::vector<uint64_t> chain = std::move(nodes_[n].chain);
    if (nodes_[n].usual == kUnknown) find_usual(n);
    // Walk the usual successors from where the cached chain ends.
    int32_t s = n;
    for (size_t i = 0; i < chain.size() && s != kDead; ++i) s = nodes_[s].usual;
    uint64_t acc = chain.empty() ? ~0ull : chain.back();
    while (chain.size() < height) {
        if (s == kDead || acc == 0) {
            chain.resize(height, 0);
            break;
        }
        if (nodes_[s].usual == kUnknown) find_usual(s);
        acc &= nodes_[s].usual_bits;
        chain.push_back(acc);
        if (nodes_[s].usual == s) {  // a loop: the mask stays as it is
            chain.resize(height, acc);
            break;
        }
        s = nodes_[s].usual;
    }
    nodes_[n].chain = std::move(chain);
    return nodes_[n].chain[height - 1];
}

bool grammar_state::can_continue() const {
    const auto& s = nodes_[cur_].stacks;
    return !pend_.empty() || s.back() >= 0;
}

bool grammar_state::run_cps(const uint32_t* cps, size_t count, int32_t& n) {
    for (size_t i = 0; i < count; ++i) {
        n = step(n, g_->class_of(cps[i]));
        if (n == kDead) return false;
    }
    return true;
}

bool grammar_state::run_token(int32_t token, int32_t& n, utf8_partial& pend) {
    const grammar_vocab::token& t = v_->tokens[token];
    switch (t.k) {
        case grammar_vocab::kind::empty:
            return false;
        case grammar_vocab::kind::eog:
            return pend.empty() && nodes_[n].can_end;
        case grammar_vocab::kind::whole:
        case grammar_vocab::kind::tail:
            if (pend.empty()) {
                if (!run_cps(v_->cps.data() + t.cp_begin, t.n_cps, n)) return false;
                pend = t.tail;
                return pend.empty() || partial_possible(n, pend);
            }
            break;
        case grammar_vocab::kind::fragment:
            break;
    }
    // Finishing a character an earlier token began: decode from the bytes.
    cps_.clear();
    if (!decode_utf8(std::string_view(v_->bytes.data() + t.byte_begin, t.n_bytes), pend, cps_)) return false;
    if (!run_cps(cps_.data(), cps_.size(), n)) return false;
    return pend.empty() || partial_possible(n, pend);
}

bool grammar_state::accept_bytes(std::string_view bytes) {
    utf8_partial pend = pend_;
    cps_.clear();
    if (!decode_utf8(bytes, pend, cps_)) return false;
    int32_t n = cur_;
    if (!run_cps(cps_.data(), cps_.size(), n)) return false;
    if (!pend.empty() && !partial_possible(n, pend)) return false;
    cur_ = n;
    pend_ = pend;
    maybe_compact();
    return true;
}

bool grammar_state::allows(int32_t token) {
    if (!v_) throw value_error("grammar: no vocabulary attached");
    if (token < 0 || token >= v_->n_tokens()) return false;
    int32_t n = cur_;
    utf8_partial pend = pend_;
    return run_token(token, n, pend);
}

void grammar_state::accept_token(int32_t token) {
    if (!v_) throw value_error("grammar: no vocabulary attached");
    if (token < 0 || token >= v_->n_tokens())
        throw value_error("grammar: token id " + std::to_string(token) + " is outside the vocabulary");
    int32_t n = cur_;
    utf8_partial pend = pend_;
    if (!run_token(token, n, pend))
        throw value_error("grammar: token " + std::to_string(token) + " does not continue the grammar");
    cur_ = n;
    pend_ = pend;
    maybe_compact();
}

void grammar_state::emit(uint32_t tok_begin, uint32_t tok_end, std::vector<int32_t>& out) const {
    out.insert(out.end(), v_->trie_ids.begin() + tok_begin, v_->trie_ids.begin() + tok_end);
}

// Visits the children of trie node t, the text so far having led to state n.
void grammar_state::walk_children(uint32_t t, int32_t n, std::vector<int32_t>& out) {
    const uint32_t end = t + v_->node_size[t];
    for (uint32_t c = t + 1; c < end; c += v_->node_size[c]) {
        const int32_t m = step(n, idx_->node_class[c]);
        if (m == kDead) continue;
        const uint32_t first = v_->node_tok[c];
        const uint32_t after_end = first + v_->node_n_end[c];
        emit(first, after_end, out);
        const uint32_t size = v_->node_size[c];
        if (size == 1) continue;
        if ((idx_->below[c] & ~safe_bits(m, v_->node_height[c])) == 0) {
            emit(after_end, v_->node_tok[c + size], out);  // every longer token is allowed
            continue;
        }
        walk_children(c, m, out);
    }
}

void grammar_state::allowed_tokens(std::vector<int32_t>& out) {
    if (!v_) throw value_error("grammar: no vocabulary attached");
    out.clear();
    if (!pend_.empty()) {
        // Mid-character: only tokens starting with continuation bytes can
        // fit; the byte-level check rejects the rest at their first byte.
        for (int32_t id = 0; id < v_->n_tokens(); ++id) {
            int32_t n = cur_;
            utf8_partial pend = pend_;
            if (run_token(id, n, pend)) out.push_back(id);
        }
        return;
    }
    if (v_->node_height[0] > 0 && (idx_->below[0] & ~safe_bits(cur_, v_->node_height[0])) == 0)
        emit(0, (uint32_t)v_->trie_ids.size(), out);  // e.g. inside `.*`: every whole token fits
    else
        walk_children(0, cur_, out);
    for (int32_t id : v_->tail_ids) {
        int32_t n = cur_;
        utf8_partial pend;
        if (run_token(id, n, pend)) out.push_back(id);
    }
    if (nodes_[cur_].can_end) out.insert(out.end(), v_->eog_ids.begin(), v_->eog_ids.end());
}

// Long generations keep adding frames and states; past a bound, rebuild the
// stores with only what the current position needs.
void grammar_state::maybe_compact() {
    if (frames_.size() <= kMaxFrames && nodes_.size() <= kMaxNodes) return;
    const std::vector<frame> old = std::move(frames_);
    std::vector<int32_t> stacks = nodes_[cur_].stacks;
    frames_.clear();
    frame_ids_.clear();
    nodes_.clear();
    node_ids_.clear();
    std::unordered_map<int32_t, int32_t> moved;
    for (int32_t& s : stacks) {
        // Copy the chain bottom-up so parents exist before their children.
        std::vector<int32_t> chain;
        for (int32_t f = s; f >= 0 && !moved.count(f); f = old[f].parent) chain.push_back(f);
        for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
            const int32_t p = old[*it].parent;
            moved[*it] = frame_id(old[*it].pos, p < 0 ? -1 : moved.at(p));
        }
        if (s >= 0) s = moved.at(s);
    }
    start_ = start_node();
    cur_ = intern(stacks);
}

}  // namespace lp
