// pretokenize.cpp — the pre-tokenizer table (tokenizer.ggml.pre name ->
// regexes, as llama.cpp defines them), the GPT-2 and Llama 3 splitters, and
// the split driver.
#include "vocab/pretokenize.h"

#include <mutex>
#include <unordered_map>

#include "vocab/pretokenize_split.h"
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

const char* const k_qwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Llama 3's, with whitespace runs cut in power-of-two lengths.
const char* const k_jais2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";
const char* const k_spark_words = R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)" "\r\n" R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[)" "\r\n" R"(]|\s+(?!\S)|\s+)";
const char* const k_youtu_cjk =
    "[\uAC00-\uD7A3\u3131-\u318E]+|[\uFF01\u2026\u201C\u201D\u2018\u2019\u2014\uFF1A\uFF1B\uFF0C\u3001-\u303F"
    "\uFE30-\uFE4F]+|[\u3105-\u312F]+|[\u4E00-\u9FA5\u3040-\u309F\u30A0-\u30FF]+";
#define LP_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"
// Letter case as in the original patterns (in collapsed text every letter
// class is "a letter").
#define LP_CASED_WORDS                                                                                   \
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+)" LP_CONTRACTIONS \
    R"(?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*)" LP_CONTRACTIONS "?"
const char* const k_youtu_words = LP_CASED_WORDS R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_tiny_aya_words =
    LP_CASED_WORDS R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_granite_multi =
    R"([^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+)" LP_CONTRACTIONS
    R"(?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*)" LP_CONTRACTIONS
    R"(?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_minicpm5_words =
    LP_CONTRACTIONS R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_ufakzeka = R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const k_exaone_moe = LP_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)";
// (The U+8C48 and U+0E40 range starts are llama.cpp's.)
const char* const k_afmoe_cjk =
    "[\u4E00-\u9FFF\u3400-\u4DBF\u8C48-\uFAFF\u3040-\u309F\u30A0-\u30FF\uFF65-\uFF9F\u2F00-\u2FDF\u0E40-\u0E7F"
    "\u0E80-\u0EFF\u1780-\u17FF\u1000-\u109F\uAA60-\uAA7F\uA9E0-\uA9FF\uAC00-\uD7AF\u1100-\u11FF]+";
const char* const k_afmoe_words =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
#undef LP_CASED_WORDS
#undef LP_CONTRACTIONS
// Patterns that llama.cpp runs through its own code (pretokenize_split.h).
const char* const k_han = R"(\p{Han}+)";
const char* const k_afmoe_digits = R"(\p{AFMoE_digits})";
const char* const k_tiny_aya_digits = R"(\d{1,3}(?=(?:\d{3})*\b))";
const char* const k_newlines = R"([^\n]+|[\n]+)";

// Pattern sets, one per llama.cpp pre-tokenizer type.
enum pattern_set {
    ps_default, ps_llama3, ps_jais2, ps_deepseek_llm, ps_deepseek3, ps_spark, ps_youtu, ps_deepseek_coder,
    ps_falcon, ps_starcoder, ps_gpt2, ps_qwen2, ps_qwen35, ps_bloom, ps_viking, ps_tekken, ps_chameleon,
    ps_gpt4o, ps_granite_multi, ps_tiny_aya, ps_kimi_k2, ps_superbpe, ps_bailingmoe, ps_seed_coder,
    ps_ufakzeka, ps_afmoe, ps_laguna, ps_exaone_moe, ps_newlines, ps_minicpm5, ps_whitespace,
};

struct pattern_def {
    std::vector<const char*> patterns;
    bool byte_encode;  // false: words stay raw UTF-8 (SPM-style BPE vocabularies)
};

const pattern_def& patterns_of(pattern_set ps) {
    static const std::vector<pattern_def> defs = {
        /* default */ {{k_default_punct, k_gpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, true},
        /* llama3 */ {{k_llama3}, true},
        /* jais2 */ {{k_jais2}, true},
        /* deepseek_llm */ {{"[\r\n]", k_deepseek_letters, k_deepseek_punct, R"(\s+$)", k_cjk_hangul, R"(\p{N}+)"}, true},
        /* deepseek3 */ {{R"(\p{N}{1,3})", k_cjk_kana, k_deepseek3_words}, true},
        /* spark */ {{R"(\p{N}{1,3})", k_cjk_kana, k_spark_words, R"(\p{N})"}, true},
        /* youtu */ {{k_youtu_cjk, k_youtu_words}, true},
        /* deepseek_coder */ {{"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", k_cjk_hangul, R"(\p{N})"}, true},
        /* falcon */ {{R"([\p{P}\$\+<=>\^~\|`]+)", k_gpt2, "[0-9][0-9][0-9]"}, true},
        /* starcoder */ {{R"(\p{N})", k_gpt2}, true},
        /* gpt2 */ {{k_gpt2}, true},
        /* qwen2 */ {{k_qwen2}, true},
        /* qwen35 */ {{k_qwen35}, true},
        /* bloom */ {{k_bloom}, true},
        /* viking */ {{k_bloom, R"(\p{N})"}, true},
        /* tekken */ {{k_tekken}, true},
        /* chameleon */
        {{"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", R"(([\t\n]|    |  ))", R"(\p{N})",
          R"([\p{P}!-/:-@\[-`{-~])", k_gpt2},
         true},
        /* gpt4o */ {{k_gpt4o}, true},
        /* granite_multi */ {{k_granite_multi}, true},
        /* tiny_aya */ {{k_tiny_aya_digits, k_tiny_aya_words}, true},
        /* kimi_k2 */ {{k_han}, true},
        /* superbpe */ {{R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"}, true},
        /* bailingmoe */ {{k_bailingmoe}, true},
        /* seed_coder */ {{k_seed_coder}, true},
        /* ufakzeka */ {{k_ufakzeka}, true},
        /* afmoe */ {{k_afmoe_digits, k_afmoe_cjk, k_afmoe_words}, true},
        /* laguna */ {{k_newlines, k_qwen2}, true},
        /* exaone_moe */ {{k_exaone_moe}, true},
        /* newlines */ {{k_newlines}, false},
        /* minicpm5 */ {{R"(\p{N}{1,3})", k_minicpm5_words}, true},
        /* whitespace */ {{R"(\S+)"}, false},
    };
    return defs[ps];
}

enum : uint32_t {
    f_ignore_merges = 1, f_add_bos = 2, f_keep_spaces = 4, f_add_sep = 8, f_no_bos = 16, f_escape_ws = 32,
    f_gemma4 = 64,
};

struct pre_name { const char* name; pattern_set ps; uint32_t flags; };

// Every tokenizer.ggml.pre value llama.cpp accepts, with its pattern set and
// the vocabulary settings it implies.
const std::vector<pre_name>& pre_names() {
    const uint32_t K = f_keep_spaces;
    static const std::vector<pre_name> t = {
        {"default", ps_default, 0}, {"minicpm5", ps_minicpm5, f_ignore_merges},
        {"llama3", ps_llama3, f_ignore_merges | f_add_bos}, {"llama-v3", ps_llama3, f_ignore_merges | f_add_bos},
        {"llama-bpe", ps_llama3, f_ignore_merges | f_add_bos}, {"falcon3", ps_llama3, f_ignore_merges | f_add_bos},
        {"falcon-h1", ps_llama3, f_ignore_merges | f_add_bos}, {"pixtral", ps_llama3, f_ignore_merges | f_add_bos},
        {"midm-2.0", ps_llama3, f_ignore_merges | f_add_bos}, {"lfm2", ps_llama3, f_ignore_merges | f_add_bos},
        {"jina-v5-nano", ps_llama3, f_ignore_merges | f_add_bos},
        {"deepseek-llm", ps_deepseek_llm, K}, {"deepseek-coder", ps_deepseek_coder, K},
        {"deepseek-v3", ps_deepseek3, K}, {"spark2_5", ps_spark, K}, {"youtu", ps_youtu, K | f_ignore_merges},
        {"falcon", ps_falcon, 0}, {"mpt", ps_gpt2, 0}, {"starcoder", ps_starcoder, 0},
        {"gpt-2", ps_gpt2, 0}, {"phi-2", ps_gpt2, 0}, {"jina-es", ps_gpt2, 0}, {"jina-de", ps_gpt2, 0},
        {"gigachat", ps_gpt2, 0}, {"jina-v2-es", ps_gpt2, 0}, {"jina-v2-de", ps_gpt2, 0}, {"a.x-4.0", ps_gpt2, 0},
        {"mellum", ps_gpt2, 0}, {"modern-bert", ps_gpt2, 0}, {"jais-2", ps_jais2, 0},
        {"gemma4", ps_newlines, f_escape_ws | f_gemma4}, {"granite-embed-multi-311m", ps_newlines, f_escape_ws | f_gemma4},
        {"sarvam-moe", ps_newlines, f_escape_ws | K},
        {"jina-v1-en", ps_gpt2, f_add_sep}, {"jina-v2-code", ps_gpt2, f_add_sep}, {"roberta-bpe", ps_gpt2, f_add_sep},
        {"whitespace", ps_whitespace, 0}, {"refact", ps_starcoder, 0}, {"command-r", ps_starcoder, K},
        {"qwen2", ps_qwen2, K}, {"deepseek-r1-qwen", ps_qwen2, K}, {"kormo", ps_qwen2, K}, {"f2llmv2", ps_qwen2, K},
        {"qwen35", ps_qwen35, K}, {"stablelm2", ps_qwen2, 0}, {"olmo", ps_gpt2, 0}, {"dbrx", ps_llama3, 0},
        {"smaug-bpe", ps_llama3, 0}, {"poro-chat", ps_bloom, K}, {"chatglm-bpe", ps_llama3, f_no_bos},
        {"glm4", ps_llama3, f_no_bos | f_ignore_merges}, {"glm5", ps_llama3, f_no_bos | f_ignore_merges},
        {"viking", ps_viking, K}, {"jais", ps_gpt2, 0}, {"tekken", ps_tekken, K | f_ignore_merges | f_add_bos},
        {"smollm", ps_starcoder, K}, {"codeshell", ps_starcoder, 0}, {"bloom", ps_bloom, 0},
        {"gpt3-finnish", ps_bloom, 0}, {"exaone", ps_starcoder, 0}, {"exaone4", ps_gpt2, 0},
        {"exaone-moe", ps_exaone_moe, 0}, {"chameleon", ps_chameleon, f_add_bos | K},
        {"minerva-7b", ps_starcoder, 0}, {"megrez", ps_qwen2, 0}, {"gpt-4o", ps_gpt4o, K}, {"llama4", ps_gpt4o, K},
        {"kanana2", ps_gpt4o, K}, {"talkie", ps_gpt4o, K}, {"granite-embed-multi-97m", ps_granite_multi, K | f_ignore_merges},
        {"tiny_aya", ps_tiny_aya, K}, {"cohere2moe", ps_tiny_aya, K}, {"superbpe", ps_superbpe, K},
        {"trillion", ps_gpt2, K}, {"granite-docling", ps_gpt2, K}, {"bailingmoe", ps_bailingmoe, K},
        {"bailingmoe2", ps_bailingmoe, K}, {"llada-moe", ps_bailingmoe, K}, {"seed-coder", ps_seed_coder, K},
        {"hunyuan", ps_qwen2, K}, {"hunyuan-dense", ps_deepseek3, K}, {"hy_v4", ps_deepseek3, K},
        {"joyai-llm", ps_deepseek3, K}, {"kimi-k2", ps_kimi_k2, K}, {"ufakzeka", ps_ufakzeka, K},
        {"grok-2", ps_qwen2, K}, {"afmoe", ps_afmoe, K}, {"laguna", ps_laguna, K}, {"minimax-m2", ps_gpt4o, K},
        {"solar-open", ps_qwen2, K}, {"mellum2", ps_starcoder, 0},
    };
    return t;
}

const pre_name* find_pre(const std::string& pre) {
    for (const pre_name& p : pre_names())
        if (pre == p.name) return &p;
    return nullptr;
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

pre_tokenizer::pre_tokenizer(const std::vector<std::string>& patterns, bool byte_encode)
    : patterns_(patterns), byte_encode_(byte_encode) {
    for (const std::string& p : patterns) {
        step s;
        if (p == k_gpt2) s.kind = step_kind::gpt2;
        else if (p == k_llama3 || p == k_llama3_original) s.kind = step_kind::llama3;
        else if (p == k_qwen2) s.kind = step_kind::qwen2;
        else if (p == k_qwen35) s.kind = step_kind::qwen35;
        else if (p == k_han) s.kind = step_kind::kimi_k2;
        else if (p == k_afmoe_digits || p == k_tiny_aya_digits) s.kind = step_kind::afmoe_digits;
        else if (p == k_newlines) s.kind = step_kind::newlines;
        else {
            s.kind = step_kind::regex;
            s.re = std::make_unique<pretok_regex>(p);
        }
        steps_.push_back(std::move(s));
    }
}

pre_options pre_tokenizer::options_for(const std::string& pre, bool* known) {
    const pre_name* p = find_pre(pre);
    if (known) *known = p != nullptr;
    pre_options o;
    if (!p) return o;
    o.ignore_merges = p->flags & f_ignore_merges;
    o.add_bos = p->flags & f_add_bos;
    o.clean_spaces = !(p->flags & f_keep_spaces);
    o.add_sep = p->flags & f_add_sep;
    o.no_bos = p->flags & f_no_bos;
    o.escape_whitespace = p->flags & f_escape_ws;
    o.gemma4 = p->flags & f_gemma4;
    return o;
}

std::shared_ptr<const pre_tokenizer> pre_tokenizer::for_name(const std::string& pre, bool* known) {
    // Compiled once per pattern set and shared (the objects are immutable).
    static std::mutex mu;
    static std::unordered_map<int, std::shared_ptr<const pre_tokenizer>> cache;
    const pre_name* found = find_pre(pre);
    if (known) *known = found != nullptr;
    const pattern_set ps = found ? found->ps : ps_default;
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find((int)ps);
    if (it != cache.end()) return it->second;
    const pattern_def& def = patterns_of(ps);
    auto made = std::make_shared<const pre_tokenizer>(
        std::vector<std::string>(def.patterns.begin(), def.patterns.end()), def.byte_encode);
    cache.emplace((int)ps, made);
    return made;
}

std::vector<std::string> known_pre_tokenizer_names() {
    std::vector<std::string> names;
    for (const pre_name& p : pre_names()) names.emplace_back(p.name);
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
                pretok::piece_cursor c{cpts, start, start + len, start, out};
                switch (s.kind) {
                    case step_kind::gpt2: pretok::split_gpt2(c); break;
                    case step_kind::llama3: pretok::split_llama3_like(c, 3, false); break;
                    case step_kind::qwen2: pretok::split_llama3_like(c, 1, false); break;
                    case step_kind::qwen35: pretok::split_llama3_like(c, 1, true); break;
                    case step_kind::kimi_k2: pretok::split_kimi_k2(c); break;
                    case step_kind::afmoe_digits: pretok::split_afmoe_digits(c); break;
                    case step_kind::newlines: pretok::split_newlines(c); break;
                    case step_kind::regex: break;
                }
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
        if (!byte_encode_) {
            words.push_back(utf8);
        } else {
            std::string word;
            word.reserve(utf8.size() * 2);
            for (unsigned char b : utf8) word += byte_to_unicode_utf8(b);
            words.push_back(std::move(word));
        }
        start += len;
    }
    return words;
}

}  // namespace lp
