// regex.cpp — parser, compiler and backtracking matcher for pretok_regex.
//
// Pipeline: pattern (UTF-8) -> codepoints -> syntax tree -> program.
// Sub-patterns that always consume exactly one symbol (a class, an
// alternation of classes, or lookaheads of one symbol followed by a class,
// e.g. ((?=[\p{L}])([^a-z]))) become one predicate, so their repetitions run
// as a counted loop (REP) instead of a chain of backtracking frames.
#include "vocab/regex.h"

#include <algorithm>
#include <climits>

#include "common.h"
#include "vocab/unicode.h"

namespace lp {

uint32_t collapse_symbol(uint32_t cpt) {
    if (cpt < 128) return cpt;
    const uint16_t f = cpt_flags(cpt);
    if (f & cpt_flag_whitespace) return collapsed_whitespace;
    switch (f & cpt_flag_categories) {
        case cpt_flag_number: return collapsed_number;
        case cpt_flag_letter: return collapsed_letter;
        case cpt_flag_punctuation: return collapsed_punctuation;
        case cpt_flag_mark: return collapsed_mark;
        case cpt_flag_symbol: return collapsed_symbol;
        default: return collapsed_other;
    }
}

uint32_t wide_symbol(uint32_t cpt) {
    if (cpt > 0x7F && (cpt_flags(cpt) & cpt_flag_whitespace)) return collapsed_whitespace;
    return cpt;
}

namespace {

const char* const k_category_names[] = {"\\p{N}", "\\p{L}", "\\p{P}", "\\p{M}", "\\p{S}",
                                        "\\p{Lu}", "\\p{Ll}", "\\p{Lt}", "\\p{Lm}", "\\p{Lo}"};

using range_list = std::vector<std::pair<uint32_t, uint32_t>>;

// Collapsed-mode members of \p{X}: the category code plus its ASCII members.
// (These ASCII lists are llama.cpp's: '~' is not in \p{S} there.)
range_list category_ranges(std::string_view name) {
    if (name == "N") return {{collapsed_number, collapsed_number}, {0x30, 0x39}};
    if (name == "L" || name == "Lu" || name == "Ll" || name == "Lt" || name == "Lm" || name == "Lo")
        return {{collapsed_letter, collapsed_letter}, {0x41, 0x5A}, {0x61, 0x7A}};
    if (name == "P")
        return {{collapsed_punctuation, collapsed_punctuation}, {0x21, 0x23}, {0x25, 0x2A}, {0x2C, 0x2F},
                {0x3A, 0x3B}, {0x3F, 0x40}, {0x5B, 0x5D}, {0x5F, 0x5F}, {0x7B, 0x7B}, {0x7D, 0x7D}};
    if (name == "M") return {{collapsed_mark, collapsed_mark}};
    if (name == "S")
        return {{collapsed_symbol, collapsed_symbol}, {0x24, 0x24}, {0x2B, 0x2B}, {0x3C, 0x3E},
                {0x5E, 0x5E}, {0x60, 0x60}, {0x7C, 0x7C}};
    return {};
}

const range_list k_space = {{0x09, 0x0D}, {0x20, 0x20}};
const range_list k_digit = {{0x30, 0x39}};
const range_list k_word = {{0x30, 0x39}, {0x41, 0x5A}, {0x5F, 0x5F}, {0x61, 0x7A}};

struct node {
    enum kind_t { SYM, SEQ, ALT, REP, LOOK, BOL, EOL } kind = SEQ;
    int pred = -1;
    std::vector<int> kids;
    int min = 0, max = 0;
    bool greedy = true;
    bool negated = false;
};

}  // namespace

bool regex_uses_categories(std::string_view pattern) {
    for (const char* name : k_category_names)
        if (pattern.find(name) != std::string_view::npos) return true;
    return false;
}

struct regex_compiler {
    pretok_regex& re;
    std::vector<uint32_t> p;  // pattern codepoints
    size_t i = 0;
    std::vector<node> nodes;

    explicit regex_compiler(pretok_regex& r) : re(r) {}

    [[noreturn]] void fail(const std::string& what) const {
        throw value_error("pre-tokenizer regex: " + what + " at position " + std::to_string(i) +
                          " in '" + re.pattern_ + "'");
    }
    bool more() const { return i < p.size(); }
    uint32_t peek(size_t k = 0) const { return i + k < p.size() ? p[i + k] : 0xFFFFFFFFu; }

    int add_node(node n) { nodes.push_back(std::move(n)); return (int)nodes.size() - 1; }

    int add_set(range_list ranges, bool negated) {
        pretok_regex::pred pr;
        pr.kind = pretok_regex::pred::SET;
        std::sort(ranges.begin(), ranges.end());
        pr.ranges = std::move(ranges);
        pr.negated = negated;
        re.preds_.push_back(std::move(pr));
        return (int)re.preds_.size() - 1;
    }
    int add_combo(pretok_regex::pred::kind_t kind, std::vector<int> kids) {
        pretok_regex::pred pr;
        pr.kind = kind;
        pr.kids = std::move(kids);
        re.preds_.push_back(std::move(pr));
        return (int)re.preds_.size() - 1;
    }
    int sym_node(int pred) { node n; n.kind = node::SYM; n.pred = pred; return add_node(n); }

    uint32_t parse_hex(int n_digits) {
        uint32_t v = 0;
        for (int k = 0; k < n_digits; ++k) {
            const uint32_t c = peek();
            int d;
            if (c >= '0' && c <= '9') d = (int)(c - '0');
            else if (c >= 'a' && c <= 'f') d = (int)(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') d = (int)(c - 'A' + 10);
            else fail("bad hex escape");
            v = v * 16 + (uint32_t)d;
            ++i;
        }
        return v;
    }

    // After a backslash. Either a single codepoint (returned, *cls = -1) or a
    // class predicate (*cls >= 0).
    uint32_t parse_escape(bool in_class, int* cls) {
        *cls = -1;
        if (!more()) fail("dangling backslash");
        const uint32_t c = p[i++];
        switch (c) {
            case 's': *cls = add_set(k_space, false); return 0;
            case 'S': *cls = add_set(k_space, true); return 0;
            case 'd': *cls = add_set(k_digit, false); return 0;
            case 'D': *cls = add_set(k_digit, true); return 0;
            case 'w': *cls = add_set(k_word, false); return 0;
            case 'W': *cls = add_set(k_word, true); return 0;
            case 'r': return '\r';
            case 'n': return '\n';
            case 't': return '\t';
            case 'f': return '\f';
            case 'v': return '\v';
            case '0': return 0;
            case 'x': return parse_hex(2);
            case 'u': return parse_hex(4);
            case 'b':
                if (in_class) return 0x08;
                fail("word boundaries are not supported");
            case 'p': {
                if (!re.collapsed_) fail("\\p{...} outside the supported categories");
                if (peek() != '{') fail("bad \\p");
                std::string name;
                ++i;
                while (more() && peek() != '}') name.push_back((char)p[i++]);
                if (!more()) fail("unterminated \\p{");
                ++i;
                range_list r = category_ranges(name);
                if (r.empty()) fail("unsupported category \\p{" + name + "}");
                *cls = add_set(std::move(r), false);
                return 0;
            }
            default:
                if ((c >= '1' && c <= '9')) fail("backreferences are not supported");
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) fail("unsupported escape");
                return c;  // escaped punctuation or other literal
        }
    }

    int parse_class() {  // after '['
        bool negated = false;
        if (peek() == '^') { negated = true; ++i; }
        range_list ranges;
        std::vector<int> extra;  // predicates that are not plain ranges
        bool first = true;
        while (true) {
            if (!more()) fail("unterminated class");
            uint32_t c = p[i];
            if (c == ']' && !first) { ++i; break; }
            first = false;
            ++i;
            uint32_t lo;
            if (c == '\\') {
                int cls;
                lo = parse_escape(true, &cls);
                if (cls >= 0) {
                    const auto& pr = re.preds_[cls];
                    if (!pr.negated) ranges.insert(ranges.end(), pr.ranges.begin(), pr.ranges.end());
                    else extra.push_back(cls);
                    continue;
                }
            } else {
                lo = c;
            }
            // A range lo-hi, unless '-' is last in the class.
            if (peek() == '-' && peek(1) != ']' && i + 1 < p.size()) {
                ++i;
                uint32_t hi = p[i++];
                if (hi == '\\') {
                    int cls;
                    hi = parse_escape(true, &cls);
                    if (cls >= 0) fail("class escape as a range end");
                }
                if (hi < lo) fail("reversed range");
                ranges.push_back({lo, hi});
            } else {
                ranges.push_back({lo, lo});
            }
        }
        if (extra.empty()) return add_set(std::move(ranges), negated);
        extra.push_back(add_set(std::move(ranges), false));
        int any = add_combo(pretok_regex::pred::OR, extra);
        return negated ? add_combo(pretok_regex::pred::NOT, {any}) : any;
    }

    // {n}, {n,}, {n,m} at p[i] == '{'; false (nothing consumed) if not one.
    bool parse_braces(int& mn, int& mx) {
        size_t k = i + 1;
        auto number = [&](int& out) {
            size_t start = k;
            long v = 0;
            while (k < p.size() && p[k] >= '0' && p[k] <= '9') {
                v = v * 10 + (long)(p[k] - '0');
                if (v > 100000) return false;
                ++k;
            }
            out = (int)v;
            return k > start;
        };
        if (!number(mn)) return false;
        mx = mn;
        if (k < p.size() && p[k] == ',') {
            ++k;
            if (k < p.size() && p[k] == '}') mx = -1;
            else if (!number(mx)) return false;
        }
        if (k >= p.size() || p[k] != '}') return false;
        if (mx >= 0 && mx < mn) fail("bad repeat bounds");
        i = k + 1;
        return true;
    }

    int parse_atom() {
        const uint32_t c = p[i++];
        switch (c) {
            case '^': { node n; n.kind = node::BOL; return add_node(n); }
            case '$': { node n; n.kind = node::EOL; return add_node(n); }
            case '.': return sym_node(add_set({{'\n', '\n'}, {'\r', '\r'}}, true));
            case '[': return sym_node(parse_class());
            case '\\': {
                int cls;
                const uint32_t lit = parse_escape(false, &cls);
                return sym_node(cls >= 0 ? cls : add_set({{lit, lit}}, false));
            }
            case '(': {
                bool look = false, negated = false;
                if (peek() == '?') {
                    const uint32_t k = peek(1);
                    if (k == ':') { i += 2; }
                    else if (k == '=' || k == '!') { look = true; negated = (k == '!'); i += 2; }
                    else fail("unsupported group");
                }
                const int body = parse_disjunction();
                if (peek() != ')') fail("missing )");
                ++i;
                if (!look) return body;
                node n;
                n.kind = node::LOOK;
                n.negated = negated;
                n.kids = {body};
                return add_node(n);
            }
            case '*': case '+': case '?': fail("nothing to repeat");
            case ')': fail("unbalanced )");
            default: return sym_node(add_set({{c, c}}, false));
        }
    }

    int parse_term() {
        const int atom = parse_atom();
        const node::kind_t k = nodes[atom].kind;
        if (!more()) return atom;
        int mn, mx;
        const uint32_t c = peek();
        if (c == '*') { mn = 0; mx = -1; ++i; }
        else if (c == '+') { mn = 1; mx = -1; ++i; }
        else if (c == '?') { mn = 0; mx = 1; ++i; }
        else if (c == '{' && parse_braces(mn, mx)) {}
        else return atom;
        if (k == node::BOL || k == node::EOL || k == node::LOOK) fail("quantified assertion");
        node n;
        n.kind = node::REP;
        n.kids = {atom};
        n.min = mn;
        n.max = mx;
        if (peek() == '?') { n.greedy = false; ++i; }
        return add_node(n);
    }

    int parse_alternative() {
        node n;
        n.kind = node::SEQ;
        while (more() && peek() != '|' && peek() != ')') n.kids.push_back(parse_term());
        return add_node(n);
    }

    int parse_disjunction() {
        std::vector<int> alts{parse_alternative()};
        while (peek() == '|') { ++i; alts.push_back(parse_alternative()); }
        if (alts.size() == 1) return alts[0];
        node n;
        n.kind = node::ALT;
        n.kids = std::move(alts);
        return add_node(n);
    }

    // The predicate of a sub-pattern that always consumes exactly one symbol, or -1.
    int as_pred(int ni) {
        const node& n = nodes[ni];
        switch (n.kind) {
            case node::SYM: return n.pred;
            case node::ALT: {
                std::vector<int> kids;
                for (int k : n.kids) {
                    const int pk = as_pred(k);
                    if (pk < 0) return -1;
                    kids.push_back(pk);
                }
                return add_combo(pretok_regex::pred::OR, kids);
            }
            case node::SEQ: {
                if (n.kids.empty()) return -1;
                std::vector<int> conj;
                for (size_t k = 0; k + 1 < n.kids.size(); ++k) {
                    const node& look = nodes[n.kids[k]];
                    if (look.kind != node::LOOK) return -1;
                    const int pl = as_pred(look.kids[0]);
                    if (pl < 0) return -1;
                    conj.push_back(look.negated ? add_combo(pretok_regex::pred::NOT, {pl}) : pl);
                }
                const int last = as_pred(n.kids.back());
                if (last < 0) return -1;
                if (conj.empty()) return last;
                conj.push_back(last);
                return add_combo(pretok_regex::pred::AND, conj);
            }
            default: return -1;
        }
    }

    bool nullable(int ni) const {
        const node& n = nodes[ni];
        switch (n.kind) {
            case node::SYM: return false;
            case node::SEQ:
                for (int k : n.kids) if (!nullable(k)) return false;
                return true;
            case node::ALT:
                for (int k : n.kids) if (nullable(k)) return true;
                return false;
            case node::REP: return n.min == 0 || nullable(n.kids[0]);
            default: return true;
        }
    }

    using inst = pretok_regex::inst;
    std::vector<inst>& prog() { return re.prog_; }
    int emit(inst in) { prog().push_back(in); return (int)prog().size() - 1; }

    void compile(int ni) {
        const node n = nodes[ni];  // copy: nodes may grow in as_pred
        switch (n.kind) {
            case node::SYM: { inst in; in.op = inst::SYM; in.a = n.pred; emit(in); break; }
            case node::BOL: { inst in; in.op = inst::BOL; emit(in); break; }
            case node::EOL: { inst in; in.op = inst::EOL; emit(in); break; }
            case node::SEQ: for (int k : n.kids) compile(k); break;
            case node::ALT: {
                std::vector<int> jumps;
                for (size_t k = 0; k < n.kids.size(); ++k) {
                    if (k + 1 < n.kids.size()) {
                        inst sp; sp.op = inst::SPLIT;
                        const int at = emit(sp);
                        prog()[at].a = at + 1;
                        compile(n.kids[k]);
                        inst j; j.op = inst::JMP;
                        jumps.push_back(emit(j));
                        prog()[at].b = (int)prog().size();
                    } else {
                        compile(n.kids[k]);
                    }
                }
                for (int j : jumps) prog()[j].a = (int)prog().size();
                break;
            }
            case node::LOOK: {
                const int pl = as_pred(n.kids[0]);
                if (pl >= 0) {
                    inst in; in.op = inst::PEEK; in.a = pl; in.flag = n.negated;
                    emit(in);
                    break;
                }
                inst lk; lk.op = inst::LOOK; lk.flag = n.negated;
                const int at = emit(lk);
                inst j; j.op = inst::JMP;
                const int jat = emit(j);
                prog()[at].a = (int)prog().size();
                compile(n.kids[0]);
                inst m; m.op = inst::MATCH;
                emit(m);
                prog()[jat].a = (int)prog().size();
                break;
            }
            case node::REP: {
                const int body = n.kids[0];
                const int pb = as_pred(body);
                if (pb >= 0) {
                    inst in; in.op = inst::REP; in.a = pb; in.min = n.min; in.max = n.max; in.flag = n.greedy;
                    emit(in);
                    break;
                }
                if (nullable(body)) fail("quantified sub-pattern that can match empty");
                for (int k = 0; k < n.min; ++k) compile(body);
                if (n.max < 0) {
                    inst sp; sp.op = inst::SPLIT;
                    const int at = emit(sp);
                    compile(body);
                    inst j; j.op = inst::JMP; j.a = at;
                    emit(j);
                    const int body_at = at + 1, exit_at = (int)prog().size();
                    prog()[at].a = n.greedy ? body_at : exit_at;
                    prog()[at].b = n.greedy ? exit_at : body_at;
                } else {
                    std::vector<int> splits;
                    for (int k = n.min; k < n.max; ++k) {
                        inst sp; sp.op = inst::SPLIT;
                        splits.push_back(emit(sp));
                        compile(body);
                    }
                    const int exit_at = (int)prog().size();
                    for (int at : splits) {
                        prog()[at].a = n.greedy ? at + 1 : exit_at;
                        prog()[at].b = n.greedy ? exit_at : at + 1;
                    }
                }
                break;
            }
        }
    }

    void finish_preds() {
        for (size_t k = 0; k < re.preds_.size(); ++k)
            for (uint32_t s = 0; s < 256; ++s) re.preds_[k].low[s] = re.test_slow((int)k, s);
    }
};

pretok_regex::pretok_regex(std::string_view pattern) : pattern_(pattern) {
    collapsed_ = regex_uses_categories(pattern);
    regex_compiler c(*this);
    c.p = utf8_decode(pattern);
    if (collapsed_)
        for (uint32_t cp : c.p)
            if (cp >= 128) throw value_error("pre-tokenizer regex mixes \\p{..} with non-ASCII characters: '" + pattern_ + "'");
    const int root = c.parse_disjunction();
    if (c.more()) c.fail("unbalanced )");
    c.compile(root);
    inst m;
    m.op = inst::MATCH;
    c.emit(m);
    c.finish_preds();
}

bool pretok_regex::test_slow(int p, uint32_t sym) const {
    const pred& pr = preds_[p];
    switch (pr.kind) {
        case pred::SET: {
            auto it = std::upper_bound(pr.ranges.begin(), pr.ranges.end(), std::make_pair(sym, UINT32_MAX));
            bool in = false;
            // Ranges may overlap: check every range that starts at or before sym.
            while (it != pr.ranges.begin()) {
                --it;
                if (it->second >= sym) { in = true; break; }
            }
            return in != pr.negated;
        }
        case pred::AND:
            for (int k : pr.kids) if (!test(k, sym)) return false;
            return true;
        case pred::OR:
            for (int k : pr.kids) if (test(k, sym)) return true;
            return false;
        case pred::NOT: return !test(pr.kids[0], sym);
    }
    return false;
}

inline bool pretok_regex::test(int p, uint32_t sym) const {
    return sym < 256 ? preds_[p].low[sym] : test_slow(p, sym);
}

size_t pretok_regex::run(int pc, const uint32_t* syms, size_t begin, size_t end, size_t pos,
                         size_t not_null_at, scratch& s) const {
    enum { BT_ALT = 0, BT_GREEDY = 1, BT_LAZY = 2 };
    const size_t base = s.stack.size();
    while (true) {
        const inst& in = prog_[pc];
        bool ok = true;
        switch (in.op) {
            case inst::SYM:
                if (pos < end && test(in.a, syms[pos])) { ++pos; ++pc; } else ok = false;
                break;
            case inst::REP: {
                const size_t limit = in.max < 0 ? end : std::min(end, pos + (size_t)in.max);
                size_t k = pos;
                while (k < limit && test(in.a, syms[k])) ++k;
                const size_t lo = pos + (size_t)in.min;
                if (k < lo) { ok = false; break; }
                if (in.flag) {
                    if (k > lo) s.stack.push_back({pc + 1, BT_GREEDY, k, lo});
                    pos = k;
                } else {
                    if (k > lo) s.stack.push_back({pc + 1, BT_LAZY, lo, k});
                    pos = lo;
                }
                ++pc;
                break;
            }
            case inst::SPLIT:
                s.stack.push_back({in.b, BT_ALT, pos, 0});
                pc = in.a;
                break;
            case inst::JMP: pc = in.a; break;
            case inst::PEEK: {
                const bool hit = pos < end && test(in.a, syms[pos]);
                if (hit != in.flag) ++pc; else ok = false;
                break;
            }
            case inst::LOOK: {
                scratch sub;
                const bool hit = run(in.a, syms, begin, end, pos, SIZE_MAX, sub) != SIZE_MAX;
                if (hit != in.flag) ++pc; else ok = false;
                break;
            }
            case inst::BOL: if (pos == begin) ++pc; else ok = false; break;
            case inst::EOL: if (pos == end) ++pc; else ok = false; break;
            case inst::MATCH:
                if (pos == not_null_at) { ok = false; break; }
                s.stack.resize(base);
                return pos;
        }
        if (ok) continue;
        // Backtrack.
        if (s.stack.size() == base) return SIZE_MAX;
        scratch::frame& f = s.stack.back();
        pc = f.pc;
        if (f.kind == BT_ALT) {
            pos = f.pos;
            s.stack.pop_back();
        } else if (f.kind == BT_GREEDY) {
            pos = --f.pos;
            if (f.pos <= f.aux) s.stack.pop_back();
        } else {
            pos = ++f.pos;
            if (f.pos >= f.aux) s.stack.pop_back();
        }
    }
}

bool pretok_regex::search(const uint32_t* syms, size_t begin, size_t end, size_t from, bool not_null_here,
                          scratch& s, size_t& match_begin, size_t& match_end) const {
    if (not_null_here) {
        const size_t r = run(0, syms, begin, end, from, from, s);
        if (r == SIZE_MAX) return false;
        match_begin = from;
        match_end = r;
        return true;
    }
    // A pattern that starts with an unbounded repetition (e.g. \s+$) and
    // failed at st also fails at every later start inside the same run: the
    // repetition there can only end where it already ended from st, and what
    // follows depends on the position alone. Skipping the run keeps such
    // patterns linear.
    const bool skip_runs = prog_[0].op == inst::REP && prog_[0].max < 0;
    for (size_t st = from; st <= end; ++st) {
        const size_t r = run(0, syms, begin, end, st, SIZE_MAX, s);
        if (r != SIZE_MAX) {
            match_begin = st;
            match_end = r;
            return true;
        }
        if (skip_runs) {
            size_t k = st;
            while (k < end && test(prog_[0].a, syms[k])) ++k;
            if (k > st) st = k;
        }
    }
    return false;
}

}  // namespace lp
