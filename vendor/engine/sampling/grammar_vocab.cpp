// grammar_vocab.cpp — decodes a vocabulary's token texts and builds the trie
// (grammar_vocab.h), and the per-grammar index over it.
#include "grammar_vocab.h"

#include <algorithm>
#include <numeric>
#include <string_view>

namespace lp {

grammar_vocab::grammar_vocab(const std::vector<std::string>& texts, const std::vector<int32_t>& eog) {
    const int32_t n = (int32_t)texts.size();
    if (n <= 0) throw value_error("grammar vocabulary: no tokens");
    tokens.resize(n);
    std::vector<char> is_eog(n, 0);
    for (int32_t id : eog) {
        if (id < 0 || id >= n)
            throw value_error("grammar vocabulary: end-of-generation id " + std::to_string(id) +
                              " is outside the vocabulary (0.." + std::to_string(n - 1) + ")");
        if (!is_eog[id]) eog_ids.push_back(id);
        is_eog[id] = 1;
    }
    size_t total = 0;
    for (const auto& t : texts) total += t.size();
    bytes.reserve(total);
    cps.reserve(total);
    std::vector<int32_t> whole;
    std::vector<uint32_t> tmp;
    for (int32_t i = 0; i < n; ++i) {
        token& t = tokens[i];
        t.byte_begin = (uint32_t)bytes.size();
        t.n_bytes = (uint32_t)texts[i].size();
        bytes += texts[i];
        t.cp_begin = (uint32_t)cps.size();
        t.n_cps = 0;
        if (is_eog[i]) { t.k = kind::eog; continue; }
        if (texts[i].empty()) { t.k = kind::empty; continue; }
        utf8_partial pend;
        tmp.clear();
        if (!decode_utf8(texts[i], pend, tmp)) { t.k = kind::fragment; continue; }
        cps.insert(cps.end(), tmp.begin(), tmp.end());
        t.n_cps = (uint32_t)tmp.size();
        if (pend.empty()) {
            t.k = kind::whole;
            whole.push_back(i);
        } else {
            t.k = kind::tail;
            t.tail = pend;
            tail_ids.push_back(i);
        }
    }

    // UTF-8 byte order is code point order, so sorting by bytes sorts the
    // code point sequences: prefixes come first and shared prefixes cluster.
    auto text_of = [&](int32_t id) {
        return std::string_view(bytes.data() + tokens[id].byte_begin, tokens[id].n_bytes);
    };
    std::sort(whole.begin(), whole.end(), [&](int32_t a, int32_t b) {
        const auto ta = text_of(a), tb = text_of(b);
        return ta < tb || (ta == tb && a < b);
    });

    auto add_node = [&](uint32_t cp, uint32_t parent, uint32_t tok) {
        node_cp.push_back(cp);
        node_size.push_back(0);
        node_parent.push_back(parent);
        node_tok.push_back(tok);
        node_n_end.push_back(0);
        node_height.push_back(0);
        return (uint32_t)node_cp.size() - 1;
    };
    std::vector<uint32_t> path = {add_node(0, 0, 0)};  // path[d] = node at depth d
    trie_ids.reserve(whole.size());
    for (size_t k = 0; k < whole.size(); ++k) {
        const token& t = tokens[whole[k]];
        const uint32_t* c = cps.data() + t.cp_begin;
        size_t common = 0;
        while (common + 1 < path.size() && common < t.n_cps && node_cp[path[common + 1]] == c[common]) ++common;
        while (path.size() > common + 1) {
            node_size[path.back()] = n_nodes() - path.back();
            path.pop_back();
        }
        for (size_t d = common; d < t.n_cps; ++d) path.push_back(add_node(c[d], path.back(), (uint32_t)k));
        ++node_n_end[path.back()];
        trie_ids.push_back(whole[k]);
    }
    while (!path.empty()) {
        node_size[path.back()] = n_nodes() - path.back();
        path.pop_back();
    }
    node_tok.push_back((uint32_t)trie_ids.size());
    for (uint32_t i = n_nodes(); i-- > 1;) {
        uint16_t& h = node_height[node_parent[i]];
        h = std::max<uint16_t>(h, (uint16_t)std::min<uint32_t>(node_height[i] + 1u, 65535u));
    }
}

std::shared_ptr<const grammar_vocab_index> vocab_index_for(const grammar& g,
                                                           const std::shared_ptr<const grammar_vocab>& v) {
    std::lock_guard<std::mutex> lock(g.index_mu_);
    auto& cache = g.indexes_;
    cache.erase(std::remove_if(cache.begin(), cache.end(), [](const auto& e) { return e.first.expired(); }),
                cache.end());
    for (const auto& e : cache)
        if (e.first.lock() == v) return e.second;

    auto idx = std::make_shared<grammar_vocab_index>();
    const uint32_t n = v->n_nodes();
    idx->node_class.resize(n);
    std::vector<uint32_t> count(g.n_classes(), 0);
    for (uint32_t i = 1; i < n; ++i) {
        const int32_t c = g.class_of(v->node_cp[i]);
        idx->node_class[i] = (uint16_t)c;
        ++count[c];
    }
    // The 63 most frequent classes get bits of their own; the rest share bit
    // 63 (a shared bit only counts as looping when all its classes loop).
    std::vector<int32_t> order(g.n_classes());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return count[a] > count[b]; });
    idx->class_bit.assign(g.n_classes(), 63);
    for (size_t r = 0; r < order.size() && r < 63; ++r) idx->class_bit[order[r]] = (uint8_t)r;
    idx->class_weight = count;
    idx->below.assign(n, 0);
    for (uint32_t i = n; i-- > 1;) {
        const uint32_t p = v->node_parent[i];
        idx->below[p] |= idx->below[i] | (1ull << idx->class_bit[idx->node_class[i]]);
    }
    cache.emplace_back(v, idx);
    return idx;
}

}  // namespace lp
