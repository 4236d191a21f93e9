// grammar_parse.cpp — the GBNF text parser (format: grammar.h). It turns the
// text into rules made of element runs plus a table of deduplicated character
// sets, lowering groups and repetitions into helper rules as it goes;
// grammar::compile (grammar.cpp) checks the result and flattens it.
// Every error names the line and column where it was found.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <unordered_map>

#include "grammar.h"

namespace lp {

namespace {

constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kMaxRepeat = 100000;   // bound on {m,n} counts: grammars stay small
constexpr int kMaxNesting = 1000;         // bound on nested groups: the parser recurses per level

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

// Line and column (1-based, in code points) of byte offset `at`, and that line.
static std::string location(std::string_view s, size_t at) {
    at = std::min(at, s.size());
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at; ++i)
        if (s[i] == '\n') { ++line; line_start = i + 1; }
    size_t col = 1;
    for (size_t i = line_start; i < at; ++i)
        if (((unsigned char)s[i] & 0xC0) != 0x80) ++col;
    size_t line_end = s.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = s.size();
    // The line as valid UTF-8 (a bad byte shows as '?'), so the message is too.
    std::string text;
    const std::string_view line_text = s.substr(line_start, std::min<size_t>(line_end - line_start, 200));
    for (size_t i = 0; i < line_text.size();) {
        size_t n = 1;
        const unsigned char b = (unsigned char)line_text[i];
        if (b >= 0xF0) n = 4; else if (b >= 0xE0) n = 3; else if (b >= 0xC0) n = 2;
        utf8_partial pend;
        std::vector<uint32_t> cp;
        if (i + n <= line_text.size() && decode_utf8(line_text.substr(i, n), pend, cp) && cp.size() == 1) {
            text.append(line_text.substr(i, n));
            i += n;
        } else {
            text += '?';
            ++i;
        }
    }
    if (!text.empty() && text.back() == '\r') text.pop_back();
    return "line " + std::to_string(line) + ", column " + std::to_string(col) + "\n  " + text + "\n  " +
           std::string(col - 1, ' ') + "^";
}

[[noreturn]] void throw_grammar_error(std::string_view text, size_t at, const std::string& msg) {
    // The message first, then where: "undefined rule 'x' (line 3, column 7)".
    std::string loc = location(text, at);
    const size_t nl = loc.find('\n');
    throw grammar_error("grammar error at " + loc.substr(0, nl) + ": " + msg + loc.substr(nl));
}

class gbnf_parser {
public:
    explicit gbnf_parser(std::string_view text) : s_(text) {}

    std::shared_ptr<grammar> run(std::string_view root) {
        skip_space(true);
        while (!eof()) {
            parse_rule();
            skip_space(true);
        }
        auto it = rule_ids_.find(std::string(root));
        const int32_t root_id = it == rule_ids_.end() ? -1 : (int32_t)it->second;
        std::shared_ptr<grammar> g(new grammar());
        g->compile(std::move(rules_), std::move(charsets_), s_, root, root_id);
        return g;
    }

private:
    using elem = grammar::elem;
    using seq = std::vector<elem>;
    using op = grammar::op;

    [[noreturn]] void fail(size_t at, const std::string& msg) const { throw_grammar_error(s_, at, msg); }
    int depth_ = 0;  // groups open at the parse position
    bool eof() const { return p_ >= s_.size(); }
    // The character at byte `at`, quoted for a message (whole, if UTF-8).
    std::string shown(size_t at) const {
        if (at >= s_.size()) return "the end of the text";
        const unsigned char b = (unsigned char)s_[at];
        if (b == '\n' || b == '\r') return "a line break";
        size_t n = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        utf8_partial pend;
        std::vector<uint32_t> cp;
        if (at + n <= s_.size() && decode_utf8(s_.substr(at, n), pend, cp) && cp.size() == 1 && cp[0] >= 0x20)
            return "'" + std::string(s_.substr(at, n)) + "'";
        char hex[8];
        std::snprintf(hex, sizeof hex, "\\x%02X", b);
        return std::string("byte ") + hex;
    }
    char peek(size_t k = 0) const { return p_ + k < s_.size() ? s_[p_ + k] : '\0'; }
    static bool is_newline(char c) { return c == '\n' || c == '\r'; }

    // Blanks and comments; line breaks only where a rule may continue.
    void skip_space(bool newline_ok) {
        while (!eof()) {
            const char c = peek();
            if (c == ' ' || c == '\t') {
                ++p_;
            } else if (c == '#') {
                while (!eof() && !is_newline(peek())) ++p_;
            } else if (is_newline(c) && newline_ok) {
                ++p_;
            } else {
                break;
            }
        }
    }

    std::string parse_name() {
        const size_t start = p_;
        while (!eof() && is_name_char(peek())) ++p_;
        return std::string(s_.substr(start, p_ - start));
    }

    uint32_t named_rule(const std::string& name, size_t at) {
        auto it = rule_ids_.find(name);
        if (it != rule_ids_.end()) return it->second;
        const uint32_t id = (uint32_t)rules_.size();
        rules_.emplace_back();
        rules_.back().name = name;
        rules_.back().offset = at;
        rules_.back().owner = id;
        rule_ids_.emplace(name, id);
        return id;
    }

    // A rule made by the parser (a group or a repetition) inside the current rule.
    uint32_t helper_rule(std::vector<seq> alts, size_t at) {
        const uint32_t id = (uint32_t)rules_.size();
        rules_.emplace_back();
        rules_.back().name = rules_[cur_rule_].name + "_" + std::to_string(++n_helpers_);
        rules_.back().offset = at;
        rules_.back().owner = cur_rule_;
        rules_.back().defined = true;
        rules_.back().alts = std::move(alts);
        return id;
    }

    uint32_t charset_id(std::vector<grammar::range> r, bool negate) {
        std::sort(r.begin(), r.end(), [](const auto& a, const auto& b) { return a.lo < b.lo; });
        std::vector<grammar::range> merged;
        for (const auto& x : r) {
            if (!merged.empty() && x.lo <= merged.back().hi + 1)
                merged.back().hi = std::max(merged.back().hi, x.hi);
            else
                merged.push_back(x);
        }
        if (negate) {
            std::vector<grammar::range> inv;
            uint32_t next = 0;
            for (const auto& x : merged) {
                if (x.lo > next) inv.push_back({next, x.lo - 1});
                next = x.hi + 1;
            }
            if (next <= kMaxCodePoint) inv.push_back({next, kMaxCodePoint});
            merged.swap(inv);
        }
        std::vector<std::pair<uint32_t, uint32_t>> key;
        for (const auto& x : merged) key.emplace_back(x.lo, x.hi);
        auto it = charset_ids_.find(key);
        if (it != charset_ids_.end()) return it->second;
        const uint32_t id = (uint32_t)charsets_.size();
        charsets_.push_back(std::move(merged));
        charset_ids_.emplace(std::move(key), id);
        return id;
    }

    void parse_rule() {
        const size_t at = p_;
        if (!is_name_char(peek())) fail(at, "expected a rule name, found " + shown(at));
        const std::string name = parse_name();
        skip_space(false);
        if (s_.substr(p_, 3) != "::=") fail(p_, "expected '::=' after the rule name '" + name + "'");
        p_ += 3;
        skip_space(true);
        const uint32_t id = named_rule(name, at);
        if (rules_[id].defined) {
            const std::string first = location(s_, rules_[id].offset);
            fail(at, "rule '" + name + "' is defined twice (first at " + first.substr(0, first.find('\n')) + ")");
        }
        rules_[id].defined = true;
        rules_[id].offset = at;
        cur_rule_ = id;
        std::vector<seq> alts = parse_alternates(false);
        rules_[id].alts = std::move(alts);
        skip_space(false);
        if (eof()) return;
        if (!is_newline(peek())) fail(p_, "unexpected " + shown(p_));
        ++p_;
    }

    std::vector<seq> parse_alternates(bool nested) {
        std::vector<seq> alts;
        alts.push_back(parse_sequence(nested));
        while (peek() == '|') {
            ++p_;
            skip_space(true);
            alts.push_back(parse_sequence(nested));
        }
        return alts;
    }

    seq parse_sequence(bool nested) {
        seq out;
        size_t last = std::string_view::npos;  // where the last item's elements start
        for (;;) {
            const size_t at = p_;
            const char c = peek();
            if (c == '"') {
                ++p_;
                last = out.size();
                while (peek() != '"') {
                    if (eof() || is_newline(peek())) fail(at, "unterminated string literal");
                    const uint32_t cp = parse_char();
                    out.push_back({op::chars, charset_id({{cp, cp}}, false)});
                }
                ++p_;
            } else if (c == '[') {
                last = out.size();
                out.push_back({op::chars, parse_class()});
            } else if (c == '.') {
                ++p_;
                last = out.size();
                out.push_back({op::chars, charset_id({{0, kMaxCodePoint}}, false)});
            } else if (c == '(') {
                ++p_;
                skip_space(true);
                if (depth_ >= kMaxNesting)
                    fail(at, "groups nested more than " + std::to_string(kMaxNesting) + " deep");
                ++depth_;
                std::vector<seq> alts = parse_alternates(true);
                --depth_;
                if (peek() != ')') {
                    if (eof()) fail(at, "unclosed '('");
                    fail(p_, std::string("expected ')' to close the group at ") +
                                 location(s_, at).substr(0, location(s_, at).find('\n')) + ", found " + shown(p_));
                }
                ++p_;
                last = out.size();
                out.push_back({op::rule, helper_rule(std::move(alts), at)});
            } else if (is_name_char(c)) {
                const std::string name = parse_name();
                if (!nested) {  // `a ::= b c ::= d`: a second definition on the same line
                    const size_t save = p_;
                    skip_space(false);
                    if (s_.substr(p_, 3) == "::=") fail(at, "expected a line break before the definition of '" + name + "'");
                    p_ = save;
                }
                last = out.size();
                out.push_back({op::rule, named_rule(name, at)});
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (last == std::string_view::npos) fail(at, std::string("'") + c + "' must follow an item to repeat");
                uint32_t lo = 0, hi = kUnbounded;
                ++p_;
                if (c == '+') lo = 1;
                else if (c == '?') hi = 1;
                else if (c == '{') parse_braces(at, lo, hi);
                repeat(out, last, lo, hi, at);
            } else if (c == '<') {
                fail(at, "token references (<...>) are not supported");
            } else {
                break;
            }
            skip_space(nested);
        }
        return out;
    }

    uint32_t parse_count() {
        const size_t at = p_;
        uint64_t v = 0;
        if (peek() < '0' || peek() > '9') fail(at, "expected a number");
        while (peek() >= '0' && peek() <= '9') {
            v = v * 10 + (uint64_t)(peek() - '0');
            if (v > kMaxRepeat) fail(at, "repetition count too large (at most " + std::to_string(kMaxRepeat) + ")");
            ++p_;
        }
        return (uint32_t)v;
    }

    // {m} {m,} {m,n} {,n}
    void parse_braces(size_t at, uint32_t& lo, uint32_t& hi) {
        skip_space(true);
        lo = peek() == ',' ? 0 : parse_count();
        skip_space(true);
        if (peek() == ',') {
            ++p_;
            skip_space(true);
            hi = peek() == '}' ? kUnbounded : parse_count();
            skip_space(true);
        } else {
            hi = lo;
        }
        if (peek() != '}') fail(p_, "expected '}' to close the repetition");
        ++p_;
        if (hi < lo) fail(at, "repetition {m,n} with n < m");
    }

    // Replaces the item out[last..] by `lo` copies of it followed by up to
    // hi - lo optional ones (or any number, if hi is unbounded).
    void repeat(seq& out, size_t last, uint32_t lo, uint32_t hi, size_t at) {
        const seq item(out.begin() + (std::ptrdiff_t)last, out.end());
        out.resize(last);
        if (item.empty()) return;  // "" repeated is still ""
        const uint64_t n_copies = (uint64_t)lo + (hi == kUnbounded ? 1 : hi - lo);
        if (n_copies * item.size() > 4 * (uint64_t)kMaxRepeat) fail(at, "repetition makes the grammar too large");
        for (uint32_t i = 0; i < lo; ++i) out.insert(out.end(), item.begin(), item.end());
        if (hi == kUnbounded) {
            // R ::= item R | ""
            const uint32_t r = helper_rule({}, at);
            seq loop = item;
            loop.push_back({op::rule, r});
            rules_[r].alts = {loop, seq()};
            out.push_back({op::rule, r});
        } else if (hi > lo) {
            // R1 ::= item | "" ; Rk ::= item R(k-1) | "" — nested, so unambiguous
            uint32_t inner = helper_rule({item, seq()}, at);
            for (uint32_t k = 1; k < hi - lo; ++k) {
                seq more = item;
                more.push_back({op::rule, inner});
                inner = helper_rule({more, seq()}, at);
            }
            out.push_back({op::rule, inner});
        }
    }

    uint32_t parse_hex(int n_digits, size_t at) {
        uint32_t v = 0;
        for (int i = 0; i < n_digits; ++i) {
            const int h = hex_value(peek());
            if (h < 0) fail(at, "expected " + std::to_string(n_digits) + " hex digits in the escape");
            v = v * 16 + (uint32_t)h;
            ++p_;
        }
        if (v > kMaxCodePoint) fail(at, "code point beyond U+10FFFF in the escape");
        return v;
    }

    // One character of a literal or class: an escape or a UTF-8 code point.
    uint32_t parse_char() {
        const size_t at = p_;
        if (peek() == '\\') {
            const char e = peek(1);
            p_ += 2;
            switch (e) {
                case 'x': return parse_hex(2, at);
                case 'u': return parse_hex(4, at);
                case 'U': return parse_hex(8, at);
                case 'n': return '\n';
                case 'r': return '\r';
                case 't': return '\t';
                case '\\': case '"': case '[': case ']': case '-': case '^': case '/': return (uint32_t)e;
                default:
                    if (e == '\0' && eof()) fail(at, "escape at the end of the text");
                    fail(at, "unknown escape: backslash and " + shown(at + 1));
            }
        }
        utf8_partial pend;
        std::vector<uint32_t> cp;
        size_t n = 1;
        const unsigned char b = (unsigned char)peek();
        if (b >= 0xF0) n = 4; else if (b >= 0xE0) n = 3; else if (b >= 0xC0) n = 2;
        if (p_ + n > s_.size() || !decode_utf8(s_.substr(p_, n), pend, cp) || cp.size() != 1)
            fail(at, "invalid UTF-8 in the grammar text");
        p_ += n;
        return cp[0];
    }

    // [abc] [a-z] [^...]
    uint32_t parse_class() {
        const size_t at = p_;
        ++p_;
        bool negate = false;
        if (peek() == '^') { negate = true; ++p_; }
        std::vector<grammar::range> ranges;
        while (peek() != ']') {
            if (eof() || is_newline(peek())) fail(at, "unterminated character class");
            const size_t c_at = p_;
            const uint32_t lo = parse_char();
            uint32_t hi = lo;
            if (peek() == '-' && peek(1) != ']' && !eof()) {
                ++p_;
                if (eof() || is_newline(peek())) fail(at, "unterminated character class");
                hi = parse_char();
                if (hi < lo) fail(c_at, "character range is out of order");
            }
            ranges.push_back({lo, hi});
        }
        ++p_;
        return charset_id(std::move(ranges), negate);
    }

    std::string_view s_;
    size_t p_ = 0;
    std::vector<grammar::rule_src> rules_;
    std::unordered_map<std::string, uint32_t> rule_ids_;
    std::vector<std::vector<grammar::range>> charsets_;
    std::map<std::vector<std::pair<uint32_t, uint32_t>>, uint32_t> charset_ids_;
    uint32_t cur_rule_ = 0;
    uint32_t n_helpers_ = 0;
};

std::shared_ptr<grammar> grammar::parse(std::string_view text, std::string_view root) {
    return gbnf_parser(text).run(root);
}

}  // namespace lp
