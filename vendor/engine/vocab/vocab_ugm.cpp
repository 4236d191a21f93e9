// vocab_ugm.cpp — the trie-based tokenizers, as llama.cpp runs them.
//
// PLaMo 2 ("plamo2"): the best-scoring split (scores rounded to 1e-4, a
// codepoint no token covers costs 1e7 and becomes its UTF-8 byte tokens),
// the longest token winning ties, after a leading BOM is dropped.
//
// RWKV ("rwkv"): token texts are escaped (\t \n \r \xhh, "\\" before any
// other byte); the text is cut greedily into the longest unescaped tokens,
// a byte no token starts with becoming the unknown token.
//
// Unigram ("t5"):
//  1. normalization: at each position the longest user-defined token prefix
//     is kept as is; otherwise the longest prefix the precompiled charsmap
//     (SentencePiece's XOR-compressed double array) maps is replaced; other
//     text is copied one UTF-8 sequence at a time (a bad byte becomes
//     U+FFFD). Spaces become U+2581; a space prefix is added, or with
//     remove_extra_whitespaces every whitespace run collapses to one;
//  2. segmentation: the best-scoring split into tokens (Viterbi over a byte
//     trie of the normal, user-defined and unused tokens; user-defined ones
//     score 0, a codepoint no token covers costs the lowest score - 10 as
//     the unknown token, and consecutive unknowns merge into one).
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common.h"
#include "vocab/unicode.h"
#include "vocab/vocab.h"
#include "vocab/vocab_impl.h"

namespace lp {

namespace {

const char* const k_space_marker = "\xE2\x96\x81";

void trie_insert(std::vector<ugm_node>& t, const std::string& text, token_id id) {
    int32_t node = 0;
    for (unsigned char c : text) {
        int32_t child = ugm_child(t, node, c);
        if (child < 0) {
            child = (int32_t)t.size();
            auto& next = t[node].next;
            next.insert(std::lower_bound(next.begin(), next.end(), std::make_pair(c, (int32_t)INT32_MIN)), {c, child});
            t.emplace_back();  // after the insert: `next` refers into t
        }
        node = child;
    }
    t[node].token = id;  // a later duplicate wins, as in llama.cpp's trie
}

// Length of the UTF-8 sequence at s[i], or 0 if it is not well formed (by
// lead byte and continuation bytes only, as llama.cpp checks it).
size_t utf8_sequence_len(std::string_view s, size_t i) {
    const unsigned char c = (unsigned char)s[i];
    size_t n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return 0;
    for (size_t k = 1; k < n; ++k)
        if (((unsigned char)s[i + k] & 0xC0) != 0x80) return 0;
    return n;
}

}  // namespace

void vocab::build_ugm(const vocab_data& d) {
    impl& m = *impl_;
    float min_score = FLT_MAX;
    for (token_id id = 0; id < n_tokens(); ++id) {
        const uint32_t a = attr_[id];  // the GGUF types: before load-time rules change them
        if (a & token_attr_normal) min_score = std::min(min_score, score_[id]);
        if (a & (token_attr_normal | token_attr_user_defined | token_attr_unused)) trie_insert(m.ugm_tokens, text_[id], id);
        if (a & token_attr_user_defined) trie_insert(m.ugm_user, text_[id], id);
    }
    m.ugm_unknown_score = (double)(min_score - 10.0f);

    const std::vector<uint8_t>& cm = d.charsmap;
    if (cm.empty()) return;
    if (cm.size() < 4) throw value_error("tokenizer.ggml.precompiled_charsmap is too small for its header");
    uint32_t blob = 0;
    std::memcpy(&blob, cm.data(), 4);  // little-endian, as GGUF is
    if ((uint64_t)blob + 4 >= cm.size())
        throw value_error("tokenizer.ggml.precompiled_charsmap: its double array runs past its end");
    m.xcda.resize(blob / 4);
    if (!m.xcda.empty()) std::memcpy(m.xcda.data(), cm.data() + 4, m.xcda.size() * 4);
    m.replacements.assign((const char*)cm.data() + 4 + blob, cm.size() - 4 - blob);
}

void vocab::ugm_normalize(std::string_view in, std::string& out) const {
    const impl& m = *impl_;
    auto node_at = [&](size_t i) -> uint32_t {
        if (i >= m.xcda.size()) throw value_error("tokenizer.ggml.precompiled_charsmap: index out of its double array");
        return m.xcda[i];
    };
    auto base = [&](size_t i) { const uint32_t n = node_at(i); return (n >> 10) << ((n & (1u << 9)) >> 6); };
    // One normalization step at `at`: the replacement text and how many input bytes it stands for.
    auto step = [&](size_t at, std::string_view& repl) -> size_t {
        // A user-defined token's text is kept as is. (llama.cpp takes the
        // deepest path into the trie, a whole token or not.)
        int32_t node = 0;
        size_t depth = 0;
        while (at + depth < in.size()) {
            const int32_t child = ugm_child(m.ugm_user, node, (uint8_t)in[at + depth]);
            if (child < 0) break;
            node = child;
            ++depth;
        }
        if (depth > 0) {
            repl = in.substr(at, depth);
            return depth;
        }
        size_t best_len = 0, best_off = 0;
        if (!m.xcda.empty()) {
            uint32_t index = base(0);
            for (size_t p = at; p < in.size(); ++p) {
                const unsigned char c = (unsigned char)in[p];
                if (c == 0) break;
                index ^= c;
                if ((node_at(index) & ((1u << 31) | 0xFFu)) != c) break;  // not a child of the last node
                const bool leaf = (node_at(index) >> 8) & 1;
                index ^= base(index);
                if (leaf) {
                    best_len = p - at + 1;
                    best_off = node_at(index) & ((1u << 31) - 1);
                }
            }
        }
        if (best_len > 0) {
            if (best_off >= m.replacements.size())
                throw value_error("tokenizer.ggml.precompiled_charsmap: replacement index out of range");
            const size_t end = m.replacements.find('\0', best_off);
            if (end == std::string::npos) throw value_error("tokenizer.ggml.precompiled_charsmap: unterminated replacement");
            repl = std::string_view(m.replacements).substr(best_off, end - best_off);
            return best_len;
        }
        if (const size_t n = utf8_sequence_len(in, at)) {
            repl = in.substr(at, n);
            return n;
        }
        repl = "\xEF\xBF\xBD";  // U+FFFD for one bad byte
        return 1;
    };

    out.clear();
    out.reserve(in.size() * 3);
    const bool prepend = add_space_prefix_, merge = remove_extra_whitespaces_;
    bool prepended = false, in_word = false;
    for (size_t at = 0; at < in.size();) {
        std::string_view repl;
        at += step(at, repl);
        for (char c : repl) {
            if (c != ' ') {
                if (!in_word) {
                    in_word = true;
                    if ((prepend && !prepended) || merge) {
                        out += k_space_marker;
                        prepended = true;
                    }
                }
                out.push_back(c);
            } else {
                in_word = false;
                if (!merge) out += k_space_marker;
            }
        }
    }
}

void vocab::tokenize_ugm(std::string_view text, std::vector<token_id>& out) const {
    const impl& m = *impl_;
    std::string s;
    ugm_normalize(text, s);
    const size_t n = s.size();
    if (n == 0) return;
    struct best { token_id id; size_t from; double score; };
    std::vector<best> at(n + 1, {unk_, 0, -DBL_MAX});
    at[0] = {unk_, 0, 0.0};
    for (size_t i = 0; i < n;) {
        const size_t cp_len = std::min(utf8_len((uint8_t)s[i]), n - i);
        const double here = at[i].score;
        bool whole_codepoint = false;
        int32_t node = ugm_child(m.ugm_tokens, 0, (uint8_t)s[i]);
        for (size_t k = i + 1; node >= 0; ++k) {
            const token_id id = m.ugm_tokens[node].token;
            if (id != token_null) {
                if (k - i == cp_len) whole_codepoint = true;
                // user-defined tokens score 0 (normal scores are log probabilities, below 0)
                const double score = here + ((attr_[id] & token_attr_user_defined) ? 0.0 : (double)score_[id]);
                if (score > at[k].score) at[k] = {id, i, score};
            }
            if (k >= n) break;
            node = ugm_child(m.ugm_tokens, node, (uint8_t)s[k]);
        }
        if (!whole_codepoint) {
            const double score = here + m.ugm_unknown_score;
            if (score > at[i + cp_len].score) at[i + cp_len] = {unk_, i, score};
        }
        i += cp_len;
    }
    // Back from the end; runs of unknown tokens become one.
    const size_t first = out.size();
    bool prev_unknown = false;
    for (size_t pos = n;;) {
        const best& b = at[pos];
        const bool unknown = b.id == unk_;
        if (!(prev_unknown && unknown) && b.id != token_null) out.push_back(b.id);
        if (b.from == 0) break;
        prev_unknown = unknown;
        pos = b.from;
    }
    std::reverse(out.begin() + (std::ptrdiff_t)first, out.end());
}

// RWKV token text -> bytes. Hex digits are read as llama.cpp reads them
// (lowercase; other characters by their distance from '0').
std::string rwkv_unescape(const std::string& escaped) {
    std::string out;
    out.reserve(escaped.size());
    bool escaping = false;
    int hex_left = 0;
    uint8_t acc = 0;
    for (char c : escaped) {
        if (hex_left > 0) {
            acc = (uint8_t)((acc << 4) + (c >= 'a' ? c - 'a' + 10 : c - '0'));
            if (--hex_left == 0) {
                out.push_back((char)acc);
                acc = 0;
            }
        } else if (escaping) {
            escaping = false;
            if (c == 't') out.push_back('\t');
            else if (c == 'n') out.push_back('\n');
            else if (c == 'r') out.push_back('\r');
            else if (c == 'x') hex_left = 2;
            else out.push_back(c);
        } else if (c == '\\') {
            escaping = true;
        } else {
            out.push_back(c);
        }
    }
    return out;
}

void vocab::build_rwkv() {
    impl& m = *impl_;
    for (token_id id = 0; id < n_tokens(); ++id) trie_insert(m.ugm_tokens, rwkv_unescape(text_[id]), id);
}

void vocab::tokenize_rwkv(std::string_view text, std::vector<token_id>& out) const {
    const impl& m = *impl_;
    size_t pos = 0;
    while (pos < text.size()) {
        int32_t node = ugm_child(m.ugm_tokens, 0, (uint8_t)text[pos]);
        token_id best = token_null;
        size_t best_end = pos + 1;
        for (size_t k = pos + 1; node >= 0; ++k) {
            if (m.ugm_tokens[node].token != token_null) {
                best = m.ugm_tokens[node].token;
                best_end = k;
            }
            if (k >= text.size()) break;
            node = ugm_child(m.ugm_tokens, node, (uint8_t)text[k]);
        }
        // No token: the unknown one for this byte. (llama.cpp loops for ever
        // where a byte starts only longer texts that do not match; here it
        // is unknown too.)
        if (best == token_null) best = unk_;
        if (best != token_null) out.push_back(best);
        pos = best_end;
    }
}

constexpr int32_t k_plamo_invalid = -20000000, k_plamo_unknown = -10000000;

void vocab::build_plamo2() {
    impl& m = *impl_;
    m.plamo_score.assign((size_t)n_tokens(), k_plamo_invalid);
    byte_tokens_.assign(256, token_null);
    for (token_id id = 0; id < n_tokens(); ++id) {
        const std::string& t = text_[id];
        if (attr_[id] & token_attr_byte) {  // the GGUF type: llama.cpp builds this before its load-time rules
            if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit((unsigned char)t[3]) &&
                std::isxdigit((unsigned char)t[4]))
                byte_tokens_[std::stoi(t.substr(3, 2), nullptr, 16)] = id;
            continue;
        }
        trie_insert(m.ugm_tokens, t, id);
        const double sc = (double)score_[id] * 1e4;
        if (std::isfinite(sc) && std::fabs(sc) < 1e9) m.plamo_score[id] = (int32_t)std::round(sc);
    }
    for (int b = 0; b < 256; ++b)  // (id 0 does not count: llama.cpp takes 0 for "unset")
        if (byte_tokens_[b] == token_null || byte_tokens_[b] == 0)
            throw value_error("plamo2 vocabulary: no byte token <0x" + std::to_string(b) + ">");
}

void vocab::tokenize_plamo2(std::string_view text, std::vector<token_id>& out) const {
    const impl& m = *impl_;
    std::vector<uint32_t> cpts = utf8_decode(text);
    if (!cpts.empty() && cpts[0] == 0xFEFF) cpts.erase(cpts.begin());
    const size_t n = cpts.size();
    if (n == 0) return;
    // The text re-encoded (bad bytes are U+FFFD now) and where each codepoint starts.
    std::string u;
    std::vector<int32_t> cpt_at;  // byte offset -> codepoint index, -1 inside a codepoint
    std::vector<size_t> start(n + 1);
    for (size_t k = 0; k < n; ++k) {
        start[k] = u.size();
        utf8_append(u, cpts[k]);
    }
    start[n] = u.size();
    cpt_at.assign(u.size() + 1, -1);
    for (size_t k = 0; k <= n; ++k) cpt_at[start[k]] = (int32_t)k;

    std::vector<int64_t> cost(n + 1, (int64_t)1 << 60);
    std::vector<std::pair<int32_t, token_id>> step(n + 1, {1, token_null});  // (codepoints, token) from each position
    cost[n] = 0;
    for (size_t i = n; i-- > 0;) {
        // Tokens matching here, shortest first; "<=" lets the longest of equal costs win.
        int32_t node = 0;
        for (size_t b = start[i]; b < u.size(); ++b) {
            node = ugm_child(m.ugm_tokens, node, (uint8_t)u[b]);
            if (node < 0) break;
            const token_id id = m.ugm_tokens[node].token;
            if (id == token_null || cpt_at[b + 1] < 0 || m.plamo_score[id] <= k_plamo_invalid) continue;
            const size_t j = (size_t)cpt_at[b + 1];
            const int64_t c = cost[j] - m.plamo_score[id];
            if (c <= cost[i]) {
                cost[i] = c;
                step[i] = {(int32_t)(j - i), id};
            }
        }
        const int64_t c = cost[i + 1] - k_plamo_unknown;
        if (c < cost[i]) {
            cost[i] = c;
            step[i] = {1, token_null};
        }
    }
    for (size_t pos = 0; pos < n; pos += (size_t)step[pos].first) {
        if (step[pos].second != token_null) {
            out.push_back(step[pos].second);
            continue;
        }
        std::string bytes;
        utf8_append(bytes, cpts[pos]);
        for (unsigned char c : bytes) out.push_back(byte_tokens_[c]);
    }
}

}  // namespace lp
