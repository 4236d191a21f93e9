// grammar.cpp — checks and compiles parsed GBNF rules (see grammar.h):
// undefined rules, the start rule and left recursion are checked; rules are
// flattened into one element array; code points are partitioned into classes;
// shortest derivations are measured for the random sentence generator.
// UTF-8 helpers shared by the parser and the recogniser live here too.
#include "grammar.h"

#include <algorithm>
#include <limits>
#include <random>
#include <unordered_map>

namespace lp {

namespace {

constexpr uint64_t kInf = std::numeric_limits<uint64_t>::max() / 4;

bool is_surrogate(uint32_t cp) { return cp >= 0xD800 && cp <= 0xDFFF; }

}  // namespace

// ---------------------------------------------------------------------------
// UTF-8
// ---------------------------------------------------------------------------
bool decode_utf8(std::string_view bytes, utf8_partial& pend, std::vector<uint32_t>& out) {
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    for (unsigned char b : bytes) {
        if (pend.n_remain > 0) {
            if ((b & 0xC0) != 0x80) return false;
            pend.value = (pend.value << 6) | (b & 0x3Fu);
            if (--pend.n_remain == 0) {
                const uint32_t cp = pend.value;
                if (cp < min_for_len[pend.len] || cp > kMaxCodePoint || is_surrogate(cp)) return false;
                out.push_back(cp);
                pend = utf8_partial();
            }
        } else if (b < 0x80) {
            out.push_back(b);
        } else if (b < 0xC2) {
            return false;  // stray continuation byte, or an overlong 2-byte lead
        } else if (b < 0xE0) {
            pend = {b & 0x1Fu, 1, 2};
        } else if (b < 0xF0) {
            pend = {b & 0x0Fu, 2, 3};
        } else if (b < 0xF5) {
            pend = {b & 0x07u, 3, 4};
        } else {
            return false;
        }
    }
    return true;
}

std::pair<uint32_t, uint32_t> utf8_partial_range(const utf8_partial& pend) {
    static const uint32_t min_for_len[5] = {0, 0, 0x80, 0x800, 0x10000};
    const uint32_t shift = 6u * pend.n_remain;
    uint32_t lo = pend.value << shift;
    uint32_t hi = lo | ((1u << shift) - 1u);
    lo = std::max(lo, min_for_len[pend.len]);
    hi = std::min(hi, kMaxCodePoint);
    if (lo >= 0xD800 && hi <= 0xDFFF) return {1, 0};  // only surrogates: nothing
    return {lo, hi};
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += (char)cp;
    } else if (cp < 0x800) {
        out += (char)(0xC0 | (cp >> 6));
        out += (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += (char)(0xE0 | (cp >> 12));
        out += (char)(0x80 | ((cp >> 6) & 0x3F));
        out += (char)(0x80 | (cp & 0x3F));
    } else {
        out += (char)(0xF0 | (cp >> 18));
        out += (char)(0x80 | ((cp >> 12) & 0x3F));
        out += (char)(0x80 | ((cp >> 6) & 0x3F));
        out += (char)(0x80 | (cp & 0x3F));
    }
}

// ---------------------------------------------------------------------------
// Compilation
// ---------------------------------------------------------------------------
void grammar::compile(std::vector<rule_src> rules, std::vector<std::vector<range>> charsets, std::string_view text,
                      std::string_view root_name, int32_t root) {
    for (const auto& r : rules)
        if (!r.defined) throw_grammar_error(text, r.offset, "undefined rule '" + r.name + "'");
    if (root < 0)
        throw grammar_error("grammar error: no rule named '" + std::string(root_name) +
                            "' (the start rule); define it as `" + std::string(root_name) + " ::= ...`");
    check_left_recursion(rules, text);

    charsets_ = std::move(charsets);
    root_ = root;
    rule_alts_.push_back(0);
    for (const auto& r : rules) {
        rule_names_.push_back(r.name);
        for (const auto& alt : r.alts) {
            alt_starts_.push_back((uint32_t)elems_.size());
            elems_.insert(elems_.end(), alt.begin(), alt.end());
            elems_.push_back({op::end, 0});
        }
        rule_alts_.push_back((uint32_t)alt_starts_.size());
    }
    build_classes();
    compute_min_lengths();
}

// Left recursion — a rule reaching itself before consuming a character —
// would make the recogniser loop; it is found as a cycle in the graph "A
// starts with B" (B referenced after only elements that can match "").
void grammar::check_left_recursion(const std::vector<rule_src>& rules, std::string_view text) const {
    const size_t n = rules.size();
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < n; ++r) {
            if (nullable[r]) continue;
            for (const auto& alt : rules[r].alts) {
                bool all = true;
                for (const auto& e : alt)
                    if (e.kind != op::rule || !nullable[e.arg]) { all = false; break; }
                if (all) { nullable[r] = 1; changed = true; break; }
            }
        }
    }
    std::vector<std::vector<uint32_t>> starts(n);
    for (size_t r = 0; r < n; ++r)
        for (const auto& alt : rules[r].alts)
            for (const auto& e : alt) {
                if (e.kind != op::rule) break;
                starts[r].push_back(e.arg);
                if (!nullable[e.arg]) break;
            }
    // Iterative depth-first search; 1 = on the current path, 2 = done.
    std::vector<char> color(n, 0);
    std::vector<std::pair<uint32_t, size_t>> path;
    for (uint32_t s = 0; s < n; ++s) {
        if (color[s]) continue;
        path.push_back({s, 0});
        color[s] = 1;
        while (!path.empty()) {
            auto& [r, next] = path.back();
            if (next == starts[r].size()) {
                color[r] = 2;
                path.pop_back();
                continue;
            }
            const uint32_t t = starts[r][next++];
            if (color[t] == 0) {
                color[t] = 1;
                path.push_back({t, 0});
            } else if (color[t] == 1) {
                // The cycle is path[i..] where path[i] == t; name it by the user's rules.
                size_t i = 0;
                while (path[i].first != t) ++i;
                std::vector<std::string> names;
                bool through_helper = false;
                for (size_t k = i; k < path.size(); ++k) {
                    const uint32_t r = path[k].first;
                    through_helper |= rules[r].owner != r;
                    const std::string& nm = rules[rules[r].owner].name;
                    if (names.empty() || names.back() != nm) names.push_back(nm);
                }
                const uint32_t head = rules[t].owner;
                std::string msg = "rule '" + rules[head].name + "' is left-recursive: ";
                if (through_helper && names.size() == 1) {
                    msg += "it can reach itself without consuming input (through a repetition or group "
                           "whose items can all match the empty string)";
                } else {
                    for (const auto& nm : names) msg += nm + " -> ";
                    msg += names.front();
                }
                throw_grammar_error(text, rules[head].offset, msg);
            }
        }
    }
}

void grammar::build_classes() {
    std::vector<uint32_t> b = {0, kMaxCodePoint + 1};
    for (const auto& cs : charsets_)
        for (const auto& r : cs) { b.push_back(r.lo); b.push_back(r.hi + 1); }
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
    const size_t n_int = b.size() - 1, n_cs = charsets_.size(), w = (n_cs + 63) / 64;
    auto index = [&](uint32_t v) { return (size_t)(std::lower_bound(b.begin(), b.end(), v) - b.begin()); };

    // Signature of an interval: the charsets containing it (n_int, w).
    std::vector<uint64_t> sig(n_int * std::max<size_t>(w, 1), 0);
    for (size_t c = 0; c < n_cs; ++c)
        for (const auto& r : charsets_[c])
            for (size_t i = index(r.lo), e = index(r.hi + 1); i < e; ++i) sig[i * w + c / 64] |= 1ull << (c % 64);
    std::unordered_map<std::string, int32_t> ids;
    std::vector<int32_t> cls(n_int);
    for (size_t i = 0; i < n_int; ++i) {
        std::string key((const char*)(sig.data() + i * w), w * sizeof(uint64_t));
        auto it = ids.emplace(std::move(key), (int32_t)ids.size()).first;
        cls[i] = it->second;
    }
    n_classes_ = (int32_t)ids.size();
    if (n_classes_ > 65535) throw grammar_error("grammar error: too many distinct characters (over 65535 classes)");

    for (size_t i = 0; i < n_int; ++i) {
        if (i > 0 && cls[i] == cls[i - 1]) continue;  // merge neighbours of one class
        interval_lo_.push_back(b[i]);
        interval_class_.push_back(cls[i]);
    }
    interval_lo_.push_back(kMaxCodePoint + 1);

    class_words_ = ((size_t)n_classes_ + 63) / 64;
    charset_bits_.assign(n_cs * class_words_, 0);
    for (size_t c = 0; c < n_cs; ++c)
        for (const auto& r : charsets_[c])
            for (size_t i = index(r.lo), e = index(r.hi + 1); i < e; ++i)
                charset_bits_[c * class_words_ + (size_t)cls[i] / 64] |= 1ull << (cls[i] % 64);
    for (uint32_t c = 0; c < 128; ++c) ascii_class_[c] = interval_class_[interval_of(c)];
}

int32_t grammar::interval_of(uint32_t cp) const {
    return (int32_t)(std::upper_bound(interval_lo_.begin(), interval_lo_.end(), cp) - interval_lo_.begin()) - 1;
}

int32_t grammar::class_of(uint32_t cp) const {
    if (cp < 128) return ascii_class_[cp];
    return interval_class_[interval_of(cp)];
}

// ---------------------------------------------------------------------------
// Random sentences
// ---------------------------------------------------------------------------
namespace {

// A character set can be written out if it holds a code point UTF-8 can encode.
bool charset_writable(const std::vector<grammar::range>& cs) {
    for (const auto& r : cs)
        if (r.lo < 0xD800 || r.hi > 0xDFFF) return true;
    return false;
}

bool charset_contains(const std::vector<grammar::range>& cs, uint32_t cp) {
    auto it = std::upper_bound(cs.begin(), cs.end(), cp, [](uint32_t v, const grammar::range& r) { return v < r.lo; });
    return it != cs.begin() && cp <= std::prev(it)->hi;
}

}  // namespace

void grammar::compute_min_lengths() {
    min_len_.assign(rule_names_.size(), kInf);
    std::vector<char> writable(charsets_.size());
    for (size_t c = 0; c < charsets_.size(); ++c) writable[c] = charset_writable(charsets_[c]);
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t r = 0; r < rule_names_.size(); ++r) {
            for (const uint32_t* a = alts_begin((int32_t)r); a != alts_end((int32_t)r); ++a) {
                uint64_t len = 0;
                for (uint32_t p = *a; elems_[p].kind != op::end && len < kInf; ++p)
                    len += elems_[p].kind == op::chars ? (writable[elems_[p].arg] ? 1 : kInf) : min_len_[elems_[p].arg];
                len = std::min(len, kInf);
                if (len < min_len_[r]) { min_len_[r] = len; changed = true; }
            }
        }
    }
}

namespace {

struct sentence_writer {
    const grammar& g;
    const std::vector<std::vector<grammar::range>>& charsets;
    const std::vector<uint64_t>& min_len;
    std::mt19937_64 rng;
    int32_t max_depth;
    std::string out;

    uint64_t alt_len(uint32_t p) const {
        uint64_t len = 0;
        for (; g.at(p).kind != grammar::op::end && len < kInf; ++p)
            len += g.at(p).kind == grammar::op::chars ? 1 : min_len[g.at(p).arg];
        return len;
    }

    uint32_t pick_char(const std::vector<grammar::range>& cs) {
        static const uint32_t samples[] = {'a', 'Z', '0', '9', ' ', '_', '-', '.', '"', '\\', '\n', '\t', '/',
                                           0x7F, 0x01, 0x1F, 0xE9, 0xDF, 0x3B1, 0x416, 0x4E2D, 0x2581, 0x1F600};
        for (int attempt = 0; attempt < 64; ++attempt) {
            const uint64_t roll = rng() % 100;
            uint32_t cp;
            if (roll < 60) {
                cp = 0x20 + (uint32_t)(rng() % 95);
            } else if (roll < 85) {
                cp = samples[rng() % (sizeof(samples) / sizeof(samples[0]))];
            } else {
                const auto& r = cs[rng() % cs.size()];
                cp = r.lo + (uint32_t)(rng() % ((uint64_t)r.hi - r.lo + 1));
            }
            if (!is_surrogate(cp) && charset_contains(cs, cp)) return cp;
        }
        for (const auto& r : cs) {  // the set is small and unusual: take its first writable code point
            if (!is_surrogate(r.lo)) return r.lo;
            if (r.hi > 0xDFFF) return std::max<uint32_t>(r.lo, 0xE000);
        }
        throw grammar_error("grammar: a character set holds nothing UTF-8 can encode");
    }

    void write_rule(int32_t r, int32_t depth) {
        std::vector<uint32_t> choices;
        uint64_t best = kInf;
        for (const uint32_t* a = g.alts_begin(r); a != g.alts_end(r); ++a) {
            const uint64_t len = alt_len(*a);
            if (len >= kInf) continue;
            if (depth >= max_depth) {
                if (len < best) { best = len; choices.assign(1, *a); }
            } else {
                choices.push_back(*a);
            }
        }
        if (choices.empty()) throw grammar_error("grammar: rule '" + g.rule_name(r) + "' derives no finite text");
        for (uint32_t p = choices[rng() % choices.size()]; g.at(p).kind != grammar::op::end; ++p) {
            const auto& e = g.at(p);
            if (e.kind == grammar::op::chars)
                append_utf8(out, pick_char(charsets[e.arg]));
            else
                write_rule((int32_t)e.arg, depth + 1);
            if (out.size() > (64u << 20)) throw grammar_error("grammar: random sentence grew past 64 MiB");
        }
    }
};

}  // namespace

std::string grammar::random_string(uint64_t seed, int32_t max_depth) const {
    if (min_len_[root_] >= kInf)
        throw grammar_error("grammar: the start rule '" + rule_names_[root_] + "' derives no finite text");
    sentence_writer w{*this, charsets_, min_len_, std::mt19937_64(seed), max_depth, {}};
    w.write_rule(root_, 0);
    return std::move(w.out);
}

}  // namespace lp
