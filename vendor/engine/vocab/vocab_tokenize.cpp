// vocab_tokenize.cpp — text to token ids: special-token partition, SPM and
// byte-level BPE, following llama.cpp's llama_tokenize.
#include <algorithm>
#include <map>
#include <queue>

#include "common.h"
#include "vocab/pretokenize.h"
#include "vocab/unicode.h"
#include "vocab/unicode_norm.h"
#include "vocab/vocab.h"
#include "vocab/vocab_impl.h"

namespace lp {

namespace {

inline bool c_isspace(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// A symbol of the merge loops: a byte span of the text being merged, linked
// to its live neighbours.
struct symbol {
    int32_t prev, next;
    uint32_t offset, n;   // bytes; n == 0 once merged into its left neighbour
    int32_t sym;          // BPE: symbol id (vocab::impl), -1 if the text is unknown
};

}  // namespace

// ---------------------------------------------------------------------------
// Special tokens. llama.cpp takes the special tokens one at a time, longest
// first, and cuts every occurrence of the current one out of the raw text
// that is left (leftmost first, without overlaps). We find all occurrences
// with a trie, then accept them in that same order.
// ---------------------------------------------------------------------------
std::vector<vocab::fragment> vocab::partition(std::string_view text, bool parse_special) const {
    const impl& m = *impl_;
    struct hit { int32_t rank; uint32_t pos; token_id id; };
    std::vector<hit> hits;
    const auto* s = (const unsigned char*)text.data();
    const size_t n = text.size();
    for (size_t pos = 0; pos < n; ++pos) {
        if (!m.first_byte[s[pos]]) continue;
        int32_t node = 0;
        for (size_t k = pos; k < n; ++k) {
            const auto& next = m.trie[node].next;
            auto it = std::lower_bound(next.begin(), next.end(), std::make_pair(s[k], (int32_t)INT32_MIN));
            if (it == next.end() || it->first != s[k]) break;
            node = it->second;
            for (token_id id : m.trie[node].ends) {
                if (!parse_special && (attr_[id] & (token_attr_control | token_attr_unknown))) continue;
                hits.push_back({m.special_rank[id], (uint32_t)pos, id});
            }
        }
    }
    std::vector<fragment> out;
    if (hits.empty()) {
        if (n > 0) out.push_back({token_null, 0, n});
        return out;
    }
    std::sort(hits.begin(), hits.end(),
              [](const hit& a, const hit& b) { return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos; });

    // Accepted tokens: span start -> (span end, token); spans include any
    // whitespace the token strips.
    std::map<size_t, std::pair<size_t, token_id>> taken;
    for (const hit& h : hits) {
        const size_t b = h.pos, e = h.pos + text_[h.id].size();
        auto after = taken.lower_bound(e);
        size_t left_limit = 0;
        if (after != taken.begin()) {
            auto before = std::prev(after);
            if (before->second.first > b) continue;  // overlaps a token already cut out
            left_limit = before->second.first;
        }
        const size_t right_limit = after == taken.end() ? n : after->first;
        size_t sb = b, se = e;
        if (attr_[h.id] & token_attr_lstrip)
            while (sb > left_limit && c_isspace(s[sb - 1])) --sb;
        if (attr_[h.id] & token_attr_rstrip)
            while (se < right_limit && c_isspace(s[se])) ++se;
        taken.emplace(sb, std::make_pair(se, h.id));
    }
    size_t at = 0;
    for (const auto& t : taken) {
        if (t.first > at) out.push_back({token_null, at, t.first - at});
        out.push_back({t.second.second, 0, 0});
        at = t.second.first;
    }
    if (at < n) out.push_back({token_null, at, n - at});
    return out;
}

std::vector<token_id> vocab::tokenize(std::string_view text, bool add_special, bool parse_special) const {
    if (kind_ == kind::none) throw value_error("this model has no tokenizer (tokenizer.ggml.model = none)");
    std::vector<token_id> out;
    const std::vector<fragment> frags = partition(text, parse_special);
    if (kind_ == kind::spm) {
        bool prev_special = true;  // a space prefix goes at the start and after special tokens
        if (add_special && add_bos_ && bos_ != token_null) out.push_back(bos_);
        std::string buf;
        for (const fragment& f : frags) {
            if (f.token != token_null) {
                out.push_back(f.token);
                prev_special = true;
                continue;
            }
            buf.clear();
            if (add_space_prefix_ && prev_special) buf.push_back(' ');
            buf.append(text.data() + f.offset, f.length);
            tokenize_spm(buf, out);
            prev_special = false;
        }
        if (add_special && add_eos_ && eos_ != token_null) out.push_back(eos_);
    } else if (kind_ == kind::test) {  // each 5 bytes: a hash of them, modulo the vocabulary size
        for (const fragment& f : frags) {
            if (f.token != token_null) {
                out.push_back(f.token);
                continue;
            }
            for (size_t pos = f.offset, end = f.offset + f.length; pos < end; pos += 5) {
                uint64_t hash = 0;
                for (size_t i = pos; i < std::min(end, pos + 5); ++i) hash = hash * 31 + (uint8_t)text[i];
                if (n_tokens() > 0) out.push_back((token_id)(hash % (uint64_t)n_tokens()));
            }
        }
    } else if (kind_ == kind::rwkv || kind_ == kind::plamo2) {  // nothing is ever added
        for (const fragment& f : frags) {
            if (f.token != token_null) out.push_back(f.token);
            else if (kind_ == kind::rwkv) tokenize_rwkv(text.substr(f.offset, f.length), out);
            else tokenize_plamo2(text.substr(f.offset, f.length), out);
        }
    } else if (kind_ == kind::ugm) {
        if (add_special && add_bos_ && bos_ != token_null) out.push_back(bos_);
        for (const fragment& f : frags) {
            if (f.token != token_null) out.push_back(f.token);
            else tokenize_ugm(text.substr(f.offset, f.length), out);
        }
        if (add_special && add_eos_ && eos_ != token_null) out.push_back(eos_);
    } else if (kind_ == kind::wpm) {
        // As llama.cpp: [CLS] text [SEP] whatever the add_* flags say.
        if (add_special && bos_ != token_null) out.push_back(bos_);
        for (const fragment& f : frags) {
            if (f.token != token_null) out.push_back(f.token);
            else tokenize_wpm(text.substr(f.offset, f.length), out);
        }
        if (add_special && sep_ != token_null) out.push_back(sep_);
    } else {
        if (add_special && add_bos_ && bos_ != token_null) out.push_back(bos_);
        std::string buf;
        for (const fragment& f : frags) {
            if (f.token != token_null) {
                out.push_back(f.token);
            } else if (escape_whitespace_) {  // SPM-style BPE: spaces are U+2581 in the vocabulary
                buf.clear();
                for (char c : text.substr(f.offset, f.length)) {
                    if (c == ' ') buf += "\xE2\x96\x81";
                    else buf.push_back(c);
                }
                tokenize_bpe_model(buf, out);
            } else {
                tokenize_bpe_model(text.substr(f.offset, f.length), out);
            }
        }
        if (add_special && add_eos_ && eos_ != token_null) out.push_back(eos_);
    }
    return out;
}

// The tokenizer models built on BPE: "whitespace" tokenizes each run of
// non-whitespace on its own (lowercased if the normalizer says so);
// "hybriddna" turns <dna>...</dna> spans into 6-mer tokens.
void vocab::tokenize_bpe_model(std::string_view text, std::vector<token_id>& out) const {
    if (model_ == "whitespace") {
        std::string segment;
        std::vector<uint32_t> lower;
        for (uint32_t cpt : utf8_decode(text)) {
            if (cpt_is_whitespace(cpt)) {
                if (!segment.empty()) tokenize_bpe(segment, out);
                segment.clear();
            } else if (wpm_lowercase_) {
                lower.clear();
                cpt_append_lower(cpt, lower);
                for (uint32_t l : lower) utf8_append(segment, l);
            } else {
                utf8_append(segment, cpt);
            }
        }
        if (!segment.empty()) tokenize_bpe(segment, out);
        return;
    }
    if (model_ == "hybriddna") {
        const token_id open = text_to_token("<dna>"), close = text_to_token("</dna>"), oov = text_to_token("<oov>");
        if (open == token_null || close == token_null || oov == token_null) return tokenize_bpe(text, out);
        static const std::string marker = "\xEE\x80\x80";
        constexpr size_t k = 6;
        size_t pos = 0;
        while (pos < text.size()) {
            const size_t start = text.find("<dna>", pos);
            if (start == std::string_view::npos) {
                tokenize_bpe(text.substr(pos), out);
                break;
            }
            if (start > pos) tokenize_bpe(text.substr(pos, start - pos), out);
            out.push_back(open);
            const size_t body = start + 5, end = text.find("</dna>", body);
            std::string seq(text.substr(body, (end == std::string_view::npos ? text.size() : end) - body));
            for (char& c : seq) if (c >= 'a' && c <= 'z') c = (char)(c - 32);
            for (size_t i = 0; i < seq.size(); i += k) {
                std::string kmer = seq.substr(i, k);
                kmer.append(k - kmer.size(), 'A');  // the last, short k-mer is padded
                const token_id t = text_to_token(kmer + marker);
                out.push_back(t != token_null ? t : oov);
            }
            if (end == std::string_view::npos) break;
            out.push_back(close);
            pos = end + 6;
        }
        return;
    }
    tokenize_bpe(text, out);
}

// ---------------------------------------------------------------------------
// SPM: ' ' becomes U+2581; characters merge pairwise, the pair whose joined
// text is the highest-scoring token first (leftmost on ties); symbols that are
// not tokens come out as byte tokens.
// ---------------------------------------------------------------------------
void vocab::tokenize_spm(std::string_view raw, std::vector<token_id>& out) const {
    std::string text;
    text.reserve(raw.size() + raw.size() / 2);
    for (char c : raw) {
        if (c == ' ') text += "\xE2\x96\x81";
        else text.push_back(c);
    }
    std::vector<symbol> syms;
    syms.reserve(text.size());
    for (size_t off = 0; off < text.size();) {
        const uint32_t len = (uint32_t)std::min(utf8_len((uint8_t)text[off]), text.size() - off);
        const int32_t idx = (int32_t)syms.size();
        syms.push_back({idx - 1, off + len == text.size() ? -1 : idx + 1, (uint32_t)off, len, -1});
        off += len;
    }
    struct bigram { int32_t left, right; float score; uint32_t size; };
    auto lower = [](const bigram& a, const bigram& b) {
        return a.score < b.score || (a.score == b.score && a.left > b.left);
    };
    std::priority_queue<bigram, std::vector<bigram>, decltype(lower)> queue(lower);
    auto try_add = [&](int32_t l, int32_t r) {
        if (l < 0 || r < 0) return;
        const std::string_view joined(text.data() + syms[l].offset, syms[l].n + syms[r].n);
        const token_id id = text_to_token(joined);
        if (id == token_null) return;
        queue.push({l, r, score_[id], (uint32_t)joined.size()});
    };
    for (int32_t i = 1; i < (int32_t)syms.size(); ++i) try_add(i - 1, i);
    while (!queue.empty()) {
        const bigram b = queue.top();
        queue.pop();
        symbol& l = syms[b.left];
        symbol& r = syms[b.right];
        if (l.n == 0 || r.n == 0 || l.n + r.n != b.size) continue;  // stale
        l.n += r.n;
        r.n = 0;
        l.next = r.next;
        if (r.next >= 0) syms[r.next].prev = b.left;
        try_add(l.prev, b.left);
        try_add(b.left, l.next);
    }
    for (int32_t i = syms.empty() ? -1 : 0; i != -1; i = syms[i].next) {
        const symbol& sy = syms[i];
        const token_id id = text_to_token(std::string_view(text.data() + sy.offset, sy.n));
        if (id != token_null) {
            out.push_back(id);
            continue;
        }
        // Merged symbols are always tokens, so this is one character: bytes.
        for (uint32_t k = 0; k < sy.n; ++k) {
            const token_id bt = spm_byte_token((uint8_t)text[sy.offset + k]);
            if (bt != token_null) out.push_back(bt);
            else if (unk_ != token_null) out.push_back(unk_);
        }
    }
}

// ---------------------------------------------------------------------------
// Byte-level BPE: pre-tokenize into words, then in each word merge the pair
// with the lowest merge rank first (leftmost on ties).
// ---------------------------------------------------------------------------
void vocab::tokenize_bpe(std::string_view raw, std::vector<token_id>& out) const {
    const impl& m = *impl_;
    const std::vector<std::string> words = pre_tok_->split(raw);
    std::vector<symbol> syms;
    struct bigram { int32_t left, right; int32_t rank; int32_t lsym, rsym, result; };
    auto later = [](const bigram& a, const bigram& b) {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    };
    std::vector<bigram> heap;
    for (const std::string& word : words) {
        if (word.empty()) continue;
        // Words taken whole: any token with ignore_merges; with Gemma 4's
        // pre-tokenizer, a run of newlines that is a token.
        if (ignore_merges_ || (gemma4_ && word.find_first_not_of('\n') == std::string::npos)) {
            const token_id whole = text_to_token(word);
            if (whole != token_null) {
                out.push_back(whole);
                continue;
            }
        }
        syms.clear();
        heap.clear();
        for (size_t off = 0; off < word.size();) {
            const uint32_t len = (uint32_t)std::min(utf8_len((uint8_t)word[off]), word.size() - off);
            const int32_t idx = (int32_t)syms.size();
            syms.push_back({idx - 1, off + len == word.size() ? -1 : idx + 1, (uint32_t)off, len,
                            m.sym_of(std::string_view(word.data() + off, len))});
            off += len;
        }
        auto try_add = [&](int32_t l, int32_t r) {
            if (l < 0 || r < 0 || syms[l].sym < 0 || syms[r].sym < 0) return;
            auto it = m.merges.find(impl::pair_key(syms[l].sym, syms[r].sym));
            if (it == m.merges.end()) return;
            heap.push_back({l, r, it->second.rank, syms[l].sym, syms[r].sym, it->second.result});
            std::push_heap(heap.begin(), heap.end(), later);
        };
        for (int32_t i = 1; i < (int32_t)syms.size(); ++i) try_add(i - 1, i);
        while (!heap.empty()) {
            std::pop_heap(heap.begin(), heap.end(), later);
            const bigram b = heap.back();
            heap.pop_back();
            symbol& l = syms[b.left];
            symbol& r = syms[b.right];
            if (l.n == 0 || r.n == 0 || l.sym != b.lsym || r.sym != b.rsym) continue;  // stale
            l.n += r.n;
            l.sym = b.result;
            r.n = 0;
            l.next = r.next;
            if (r.next >= 0) syms[r.next].prev = b.left;
            try_add(l.prev, b.left);
            try_add(b.left, l.next);
        }
        for (int32_t i = 0; i != -1; i = syms[i].next) {
            const symbol& sy = syms[i];
            const token_id id = sy.sym >= 0 ? m.sym_token[sy.sym] : token_null;
            if (id != token_null) {
                out.push_back(id);
                continue;
            }
            // Not a token: each byte as its byte token, if there is one.
            for (uint32_t k = 0; k < sy.n; ++k) {
                const token_id bt = byte_tokens_[(uint8_t)word[sy.offset + k]];
                if (bt != token_null) out.push_back(bt);
            }
        }
    }
}

}  // namespace lp
