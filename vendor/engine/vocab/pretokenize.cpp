// pretokenize.cpp — the pre-tokenizer table (tokenizer.ggml.pre name ->
// regexes, as llama.cpp defines them), the GPT-2 and Llama 3 splitters, and
// the split driver.
#include "vocab/pretokenize.h"

#include <mutex>
#include <unordered_map>

#include "vocab/unicode.h"

namespace lp {

namespace {

// ---------------------------------------------------------------------------
// Patterns. Where llama.cpp rewrote a model's original regex for std::regex
// (no (?i:...), no possessive quantifiers, letter case as "not a-z"), the
// rewritten form is what it runs, so it is what we run.
// ---------------------------------------------------------------------------
const char* const k_gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const k_llama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_llama3_original =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_qwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Letter case as llama.cpp approximates it: an upper-case letter is "a letter
// not in a-z", a lower-case one "a letter not in A-Z".
const char* const k_tekken =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_gpt4o =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_bailingmoe =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
const char* const k_seed_coder =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_deepseek3_words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)" "\r\n" R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)" "\r\n" R"(]*|\s*[)" "\r\n" R"(]+|\s+(?!\S)|\s+)";
// Cased letters (DeepSeek LLM's own list).
const char* const k_deepseek_letters =
    "\\s?[A-Za-z\u00B5\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u01BA\u01BC-\u01BF\u01C4-\u0293\u0295-\u02AF"
    "\u0370-\u0373\u0376\u0377\u037B-\u037D\u037F\u0386\u0388-\u038A\u038C\u038E-\u03A1\u03A3-\u03F5"
    "\u03F7-\u0481\u048A-\u052F\u0531-\u0556\u10A0-\u10C5\u13A0-\u13F5\u13F8-\u13FD\u1C90-\u1CBA"
    "\u1CBD-\u1CBF\u1D00-\u1D2B\u1D6B-\u1D77\u1D79-\u1D9A\u1E00-\u1F15\u1F18-\u1F1D\u1F20-\u1F45"
    "\u1F48-\u1F4D\u1F50-\u1F57\u1F59\u1F5B\u1F5D\u1F5F-\u1F7D\u1F80-\u1FB4\u1FB6-\u1FBC\u1FBE"
    "\u1FC2-\u1FC4\u1FC6-\u1FCC\u1FD0-\u1FD3\u1FD6-\u1FDB\u1FE0-\u1FEC\u1FF2-\u1FF4\u1FF6-\u1FFC"
    "\u2102\u2107\u210A-\u2113\u2115\u2119-\u211D\u2124\u2126\u2128\u212A-\u212D\u212F-\u2134\u2139"
    "\u213C-\u213F\u2145-\u2149\u214E\u2183\u2184\u2C00-\u2C7B\u2C7E-\u2CE4\u2CEB-\u2CEE\u2CF2\u2CF3"
    "\uA640-\uA66D\uA680-\uA69B\uA722-\uA76F\uA771-\uA787\uA78B-\uA78E\uAB70-\uABBF\uFB00-\uFB06"
    "\uFB13-\uFB17\uFF21-\uFF3A\uFF41-\uFF5A\U00010400-\U0001044F\U000104B0-\U000104D3"
    "\U000104D8-\U000104FB\U00010C80-\U00010CB2\U00010CC0-\U00010CF2\U000118A0-\U000118DF"
    "\U0001E900-\U0001E943]+";
const char* const k_deepseek_punct = "\\s?[!-/:-~\uFF01-\uFF0F\uFF1A-\uFF5E\u2018-\u201F\u3000-\u3002]+";
const char* const k_cjk_hangul = "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+";
const char* const k_cjk_kana = "[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
const char* const k_bloom = " ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+";
const char* const k_default_punct = R"([\p{P}\$\+<=>\^~\|]+)";

struct pre_group {
    std::vector<const char*> names;
    std::vector<const char*> patterns;
};

const std::vector<pre_group>& groups() {
    static const std::vector<pre_group> g = {
        {{"default"}, {k_default_punct, k_gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}},
        {{"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "dbrx",
          "smaug-bpe", "glm4", "chatglm-bpe"},
         {k_llama3}},
        {{"deepseek-llm"}, {"[\r\n]", k_deepseek_letters, k_deepseek_punct, R"(\s+$)", k_cjk_hangul, R"(\p{N}+)"}},
        {{"deepseek-v3", "hunyuan-dense"}, {R"(\p{N}{1,3})", k_cjk_kana, k_deepseek3_words}},
        {{"deepseek-coder"}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", k_cjk_hangul, R"(\p{N})"}},
        {{"falcon"}, {R"([\p{P}\$\+<=>\^~\|`]+)", k_gpt2, "[0-9][0-9][0-9]"}},
        {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"},
         {R"(\p{N})", k_gpt2}},
        {{"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum",
          "jina-v1-en", "jina-v2-code", "roberta-bpe", "mpt", "olmo", "jais", "trillion", "granite-docling",
          "exaone4"},
         {k_gpt2}},
        {{"qwen2", "deepseek-r1-qwen", "kormo", "stablelm2", "hunyuan", "megrez", "grok-2"}, {k_qwen2}},
        {{"poro-chat", "bloom", "gpt3-finnish"}, {k_bloom}},
        {{"viking"}, {k_bloom, R"(\p{N})"}},
        {{"tekken"}, {k_tekken}},
        {{"chameleon"},
         {"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"(([\t\n]|    |  ))", R"(\p{N})",
          R"([\p{P}!-/:-@\[-`{-~])", k_gpt2}},
        {{"gpt-4o", "llama4", "minimax-m2"}, {k_gpt4o}},
        {{"superbpe"}, {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"}},
        {{"bailingmoe", "bailingmoe2", "llada-moe"}, {k_bailingmoe}},
        {{"seed-coder"}, {k_seed_coder}},
    };
    return g;
}

// ---------------------------------------------------------------------------
// Hand-written splitters. They follow llama.cpp's, quirks included (e.g. the
// "\s+(?!\S)" rule leaves the last whitespace of a run for the next word only
// when something follows inside the same piece).
// ---------------------------------------------------------------------------
constexpr uint32_t k_out = 0xFFFFFFFFu;

struct piece_cursor {
    const std::vector<uint32_t>& cpts;
    size_t ini, end;
    size_t prev;
    std::vector<size_t>& out;

    uint32_t cpt(size_t p) const { return p >= ini && p < end ? cpts[p] : k_out; }
    uint16_t flags(size_t p) const { return p >= ini && p < end ? cpt_flags(cpts[p]) : 0; }
    void emit(size_t e) {
        if (e > prev) out.push_back(e - prev);
        prev = e;
    }
};

bool is_word_other(uint16_t f) {  // [^\s\p{L}\p{N}] for an in-range codepoint
    return f && !(f & (cpt_flag_whitespace | cpt_flag_letter | cpt_flag_number));
}

// The contractions 's 't 're 've 'm 'll 'd at pos; their length or 0.
size_t contraction_len(const piece_cursor& c, size_t pos, bool any_case) {
    if (c.cpt(pos) != '\'' || pos + 1 >= c.end) return 0;
    auto low = [&](uint32_t x) { return any_case ? cpt_ascii_lower(x) : x; };
    const uint32_t n1 = low(c.cpt(pos + 1));
    if (n1 == 's' || n1 == 't' || n1 == 'm' || n1 == 'd') return 2;
    if (pos + 2 >= c.end) return 0;
    const uint32_t n2 = low(c.cpt(pos + 2));
    if ((n1 == 'r' && n2 == 'e') || (n1 == 'v' && n2 == 'e') || (n1 == 'l' && n2 == 'l')) return 3;
    return 0;
}

void split_gpt2(piece_cursor& c) {
    size_t pos = c.ini;
    while (pos < c.end) {
        const uint32_t cp = c.cpt(pos);
        const uint16_t f = c.flags(pos);
        if (size_t n = contraction_len(c, pos, false)) { pos += n; c.emit(pos); continue; }
        uint16_t f2 = cp == ' ' ? c.flags(pos + 1) : f;
        if (f2 & cpt_flag_letter) {  // ' ?\p{L}+'
            pos += cp == ' ';
            while (c.flags(pos) & cpt_flag_letter) ++pos;
            c.emit(pos);
            continue;
        }
        if (f2 & cpt_flag_number) {  // ' ?\p{N}+'
            pos += cp == ' ';
            while (c.flags(pos) & cpt_flag_number) ++pos;
            c.emit(pos);
            continue;
        }
        if (is_word_other(f2)) {  // ' ?[^\s\p{L}\p{N}]+'
            pos += cp == ' ';
            while (is_word_other(c.flags(pos))) ++pos;
            c.emit(pos);
            continue;
        }
        size_t n_ws = 0;
        while (c.flags(pos + n_ws) & cpt_flag_whitespace) ++n_ws;
        if (n_ws > 1 && c.cpt(pos + n_ws) != k_out) { pos += n_ws - 1; c.emit(pos); continue; }  // '\s+(?!\S)'
        if (n_ws > 0) { pos += n_ws; c.emit(pos); continue; }                                    // '\s+'
        c.emit(++pos);
    }
}

void split_llama3(piece_cursor& c) {
    size_t pos = c.ini;
    while (pos < c.end) {
        const uint32_t cp = c.cpt(pos);
        const uint16_t f = c.flags(pos);
        if (size_t n = contraction_len(c, pos, true)) { pos += n; c.emit(pos); continue; }
        // '[^\r\n\p{L}\p{N}]?\p{L}+'
        if (!(cp == '\r' || cp == '\n' || (f & cpt_flag_number)) &&
            ((f & cpt_flag_letter) || (c.flags(pos + 1) & cpt_flag_letter))) {
            ++pos;
            while (c.flags(pos) & cpt_flag_letter) ++pos;
            c.emit(pos);
            continue;
        }
        if (f & cpt_flag_number) {  // '\p{N}{1,3}'
            size_t ini = pos;
            while (c.flags(pos) & cpt_flag_number) {
                if (++pos - ini >= 3) { c.emit(pos); ini = pos; }
            }
            c.emit(pos);
            continue;
        }
        // ' ?[^\s\p{L}\p{N}]+[\r\n]*' (llama.cpp tests the first codepoint's
        // flags for being in range, so a lone trailing space lands here too)
        uint16_t f2 = cp == ' ' ? c.flags(pos + 1) : f;
        if (!(f2 & (cpt_flag_whitespace | cpt_flag_letter | cpt_flag_number)) && f) {
            pos += cp == ' ';
            while (is_word_other(c.flags(pos))) ++pos;
            while (c.cpt(pos) == '\r' || c.cpt(pos) == '\n') ++pos;
            c.emit(pos);
            continue;
        }
        size_t n_ws = 0, last_nl_end = 0;
        while (c.flags(pos + n_ws) & cpt_flag_whitespace) {
            const uint32_t w = c.cpt(pos + n_ws);
            if (w == '\r' || w == '\n') last_nl_end = pos + n_ws + 1;
            ++n_ws;
        }
        if (last_nl_end > 0) { pos = last_nl_end; c.emit(pos); continue; }                       // '\s*[\r\n]+'
        if (n_ws > 1 && c.cpt(pos + n_ws) != k_out) { pos += n_ws - 1; c.emit(pos); continue; }  // '\s+(?!\S)'
        if (n_ws > 0) { pos += n_ws; c.emit(pos); continue; }                                    // '\s+'
        c.emit(++pos);
    }
}

// Split every piece of `offsets` by `re` (std::regex_iterator semantics:
// after an empty match, retry at the same place for a non-empty one, else
// move on one symbol).
std::vector<size_t> regex_split(const pretok_regex& re, const std::vector<uint32_t>& syms,
                                const std::vector<size_t>& offsets) {
    std::vector<size_t> out;
    out.reserve(offsets.size() * 2);
    pretok_regex::scratch scratch;
    size_t start = 0;
    for (size_t len : offsets) {
        const size_t end = start + len;
        size_t prev_end = start, pos = start;
        bool last_empty = false, any = false;
        while (true) {
            size_t mb = 0, me = 0;
            bool found = false;
            if (any && last_empty) {
                if (pos == end) break;
                found = re.search(syms.data(), start, end, pos, true, scratch, mb, me);
                if (!found) ++pos;
            }
            if (!found) found = re.search(syms.data(), start, end, pos, false, scratch, mb, me);
            if (!found) break;
            if (mb > prev_end) out.push_back(mb - prev_end);
            out.push_back(me - mb);
            prev_end = me;
            pos = me;
            last_empty = (mb == me);
            any = true;
        }
        if (prev_end < end) out.push_back(end - prev_end);
        start = end;
    }
    return out;
}

}  // namespace

pre_tokenizer::pre_tokenizer(const std::vector<std::string>& patterns) : patterns_(patterns) {
    for (const std::string& p : patterns) {
        step s;
        if (p == k_gpt2) {
            s.kind = step_kind::gpt2;
        } else if (p == k_llama3 || p == k_llama3_original) {
            s.kind = step_kind::llama3;
        } else {
            s.kind = step_kind::regex;
            s.re = std::make_unique<pretok_regex>(p);
        }
        steps_.push_back(std::move(s));
    }
}

std::shared_ptr<const pre_tokenizer> pre_tokenizer::for_name(const std::string& pre, bool* known) {
    // Compiled once per name and shared (the objects are immutable).
    static std::mutex mu;
    static std::unordered_map<std::string, std::shared_ptr<const pre_tokenizer>> cache;
    const pre_group* found = nullptr;
    for (const pre_group& g : groups())
        for (const char* n : g.names)
            if (pre == n) found = &g;
    if (known) *known = found != nullptr;
    if (!found) found = &groups()[0];
    const std::string key = found->names[0];
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    auto made = std::make_shared<const pre_tokenizer>(
        std::vector<std::string>(found->patterns.begin(), found->patterns.end()));
    cache.emplace(key, made);
    return made;
}

std::vector<std::string> known_pre_tokenizer_names() {
    std::vector<std::string> names;
    for (const pre_group& g : groups())
        for (const char* n : g.names) names.emplace_back(n);
    return names;
}

std::vector<size_t> pre_tokenizer::split_offsets(const std::vector<uint32_t>& cpts) const {
    std::vector<size_t> offsets{cpts.size()};
    std::vector<uint32_t> collapsed, wide;  // symbol views, made on first use
    for (const step& s : steps_) {
        if (s.kind != step_kind::regex) {
            std::vector<size_t> out;
            out.reserve(offsets.size() * 2);
            size_t start = 0;
            for (size_t len : offsets) {
                piece_cursor c{cpts, start, start + len, start, out};
                if (s.kind == step_kind::gpt2) split_gpt2(c); else split_llama3(c);
                start += len;
            }
            offsets = std::move(out);
            continue;
        }
        std::vector<uint32_t>& syms = s.re->collapsed() ? collapsed : wide;
        if (syms.size() != cpts.size()) {
            syms.resize(cpts.size());
            for (size_t k = 0; k < cpts.size(); ++k)
                syms[k] = s.re->collapsed() ? collapse_symbol(cpts[k]) : wide_symbol(cpts[k]);
        }
        offsets = regex_split(*s.re, syms, offsets);
    }
    return offsets;
}

std::vector<std::string> pre_tokenizer::split(std::string_view text) const {
    const std::vector<uint32_t> cpts = utf8_decode(text);
    const std::vector<size_t> offsets = split_offsets(cpts);
    std::vector<std::string> words;
    words.reserve(offsets.size());
    std::string utf8;
    size_t start = 0;
    for (size_t len : offsets) {
        utf8.clear();
        for (size_t k = start; k < start + len; ++k) utf8_append(utf8, cpts[k]);
        std::string word;
        word.reserve(utf8.size() * 2);
        for (unsigned char b : utf8) word += byte_to_unicode_utf8(b);
        words.push_back(std::move(word));
        start += len;
    }
    return words;
}

}  // namespace lp
