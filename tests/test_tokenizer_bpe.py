"""Byte-level BPE tokenization, vendor/engine/vocab/, held to exact references.

- Llama 3 ("llama-bpe": the hand-written Llama 3 splitter) and Qwen 3
  ("qwen2": the regex engine) vocabularies are built the way GGUF files hold
  them (GPT-2 byte-to-unicode token texts, merges, control tokens) from the
  rank files the quicktok-v1 package ships, and every id is compared with
  quicktok's (an exact tiktoken/HF tokenizer): adversarial strings and a few
  thousand seeded random strings mixing scripts, with and without special
  tokens. Qwen's HF tokenizer normalizes to NFC and llama.cpp does not, so
  Qwen is compared on NFC text.
- Invalid UTF-8 is decoded as llama.cpp does (each bad byte -> U+FFFD).
- Every pre-tokenizer's splitting is compared with an independent oracle:
  llama.cpp's own procedure (category-collapsed text, each regex splitting
  the previous pieces) run with Python's re module.
"""
from __future__ import annotations

import functools
import random
import re
import unicodedata
import warnings

import pytest

from llamapy import _engine
from conftest import needs

quicktok = needs("quicktok")

CONTROL, NORMAL, USER_DEFINED, UNUSED = 3, 1, 4, 5


# ---------------------------------------------------------------------------
# GGUF-style vocabularies from tiktoken-style rank files
# ---------------------------------------------------------------------------
def byte_to_unicode() -> dict:
    printable = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in printable}
    n = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + n)
            n += 1
    return table


def merges_from_ranks(token_bytes: list) -> list:
    """One merge per token: the two parts byte-level BPE reaches when only
    merges of lower rank are allowed (tokens no merge sequence reaches get
    none, and tiktoken never produces them either)."""
    table = byte_to_unicode()
    ranks = {b: i for i, b in enumerate(token_bytes) if b is not None}
    merges = []
    for rank, tb in enumerate(token_bytes):
        if tb is None or len(tb) < 2:
            continue
        parts = [bytes([x]) for x in tb]
        while len(parts) > 2:
            best, at = None, -1
            for k in range(len(parts) - 1):
                r = ranks.get(parts[k] + parts[k + 1])
                if r is not None and r < rank and (best is None or r < best):
                    best, at = r, k
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        if len(parts) == 2:
            merges.append(" ".join("".join(table[x] for x in p) for p in parts))
    return merges


class BPECase:
    def __init__(self, encoding: str, pre: str):
        self.enc = quicktok.get_encoding(encoding)
        table = byte_to_unicode()
        specials = {self.enc.encode_single_token(s): s for s in self.enc.special_tokens_set}
        token_bytes = []
        for i in range(self.enc.n_vocab):
            if i in specials:
                token_bytes.append(None)
                continue
            try:
                token_bytes.append(self.enc.decode_single_token_bytes(i))
            except Exception:  # a hole in the id space
                token_bytes.append(None)
        self.tokens, self.types = [], []
        for i, tb in enumerate(token_bytes):
            if i in specials:
                self.tokens.append(specials[i]); self.types.append(CONTROL)
            elif tb is None:
                self.tokens.append(f"[UNUSED_{i}]"); self.types.append(UNUSED)
            else:
                self.tokens.append("".join(table[x] for x in tb)); self.types.append(NORMAL)
        self.merges = merges_from_ranks(token_bytes)
        self.pre = pre
        self.nfc = encoding == "qwen3"
        self.vocab = _engine.Vocab("gpt2", pre, self.tokens, None, self.types, self.merges)

    def prepare(self, s: str) -> str:
        return unicodedata.normalize("NFC", s) if self.nfc else s


@functools.lru_cache(maxsize=None)
def bpe_case(encoding: str, pre: str) -> BPECase:
    return BPECase(encoding, pre)


@pytest.fixture(scope="module", params=[("llama3", "llama-bpe"), ("qwen3", "qwen2")], ids=["llama3", "qwen3"])
def case(request):
    return bpe_case(*request.param)


ADVERSARIAL = [
    "", " ", "  ", "   ", "\t", "\n", "\n\n", " \n", "\r\n", "a\r\nb", "\r\n\r\n", "\r", "x\r", "hello world",
    " hello", "hello ", "hello  world", "hello   ", "   hello", "\t\thello\t", "a \n b", "a  \n\n  b", " \n \n ",
    "Hello, World! How's it going? I'm fine; you'll see. We've, they're, he'd",
    "IT'S I'M YOU'LL WE'VE THEY'RE HE'D 'S 'T", "'s 't 're 've 'm 'll 'd", "don't won't can't", "O'Neil's",
    "x's", "''''", "'", "' s", "'ll've", "1234567890", "12 345 6789 0", "3.14159 2,718", "1" * 41, "9999999999999",
    "x1y22z333w4444", "\u0967\u0968\u0969 \u0663\u0664\u0665", "\u00bd \u2153 \u2460\u2461 \u00b2\u00b3",
    "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\uff0c\u5305\u62ec\u6807\u70b9\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u30ab\u30bf\u30ab\u30ca\u3068\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4. \uc548\ub155\ud558\uc138\uc694!",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440!", "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645", "\u05e9\u05dc\u05d5\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0e44\u0e17\u0e22 \u0e20\u0e32\u0e29\u0e32",
    "\U0001F600\U0001F603\U0001F604 \U0001F1F0\U0001F1F7 \U0001F469\u200d\U0001F4BB",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 \U0001F3F3\ufe0f\u200d\U0001F308", "\U0001F44D\U0001F3FD",
    "caf\u00e9 na\u00efve co\u00f6peration", "e\u0301 a\u0308 n\u0303", "\u1e9b\u0323",
    "def foo(x):\n    return x**2  # comment\n\n\tif x > 0:\n\t\tpass\n",
    'int main() { printf("%d\\n", 42); return 0; }', '<html><body class="x">Hi</body></html>',
    "mixed \t \n whitespace \r\n\r\n end", "\n\n\n\n", "    \n    ", "trailing spaces   ", "a\u00a0b\u3000c\u2003d",
    "line\u2028sep\u2029para\u0085nel", "\x00\x01\x1f\x7f\x1c\x1d", "tab\tsep\tvalues", "!!!???...,,,;;;", "a.b.c",
    "--- *** ___ ~~~ ```", "$100 \u20ac200 \u00a3300 \u00a5400", "email@example.com https://x.y/z?q=1&r=2",
    "\u2115 \u2124 \u211a \u211d \u2102", "\u01c5ungla \u01c8", "\uff21\uff22\uff23 \uff41\uff42\uff43 \uff11\uff12\uff13",
    "\u00df \u1e9e \u017f", "\u0130stanbul \u0131", "\ufeffBOM", "\ufffd replacement", "\u200b\u200c\u200d", "\u00ad",
    "a" * 300, " " * 50 + "x", "\n" * 10 + "x", "ab" * 100, "\U000E0041\U000F0000", "<|fake|> <| |>",
]
SPECIAL_CASES = [
    "<|begin_of_text|>hi<|eot_id|>", "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", "<|endoftext|><|endoftext|>", "x<|im_end|>y",
    "<think>\nhmm\n</think>", "<|begin_of_text|", "|<|eot_id|>|",
]

POOLS = ["abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " \t\n\r  ",
         "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "\u4e2d\u6587\u5b57\u7b26\u6d4b\u8bd5\u65e5\u672c\u8a9e",
         "\u3053\u3093\u306b\u3061\u306f\u30ab\u30bf", "\ud55c\uad6d\uc5b4\ud14d\uc2a4\ud2b8",
         "\u041f\u0440\u0438\u0432\u0435\u0442", "\u03b1\u03b2\u03b3\u0394\u03a3", "\u0645\u0631\u062d\u0628\u0627",
         "\U0001F600\U0001F603\U0001F469\u200d\U0001F4BB\U0001F1F0\U0001F1F7", "\u00a0\u3000\u2003\u0301\u200d",
         "\u00e9\u00e8\u00ea\u00eb\u00e0\u00e2\u00e4\u00f4\u00f6\u00fb\u00fc\u00c9", "'sStTdDmMlLvVrReE"]


def random_strings(seed: int, n: int) -> list:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 48)
        out.append("".join(rng.choice(rng.choice(POOLS)) for _ in range(k)))
    return out


def assert_same(case: BPECase, strings: list, special: bool) -> int:
    n = 0
    for s in strings:
        s = case.prepare(s)
        ref = case.enc.encode_with_special(s) if special else case.enc.encode_ordinary(s)
        got = case.vocab.tokenize(s, False, special)
        assert got == ref, (s, special)
        n += 1
    return n


def test_vocabulary_built(case):
    v = case.vocab
    assert v.n_vocab == case.enc.n_vocab and v.n_merges == len(case.merges) and v.pre_known
    # llama.cpp makes a "</s>" token (Qwen 3 has a plain one) control, and says so
    assert [w for w in v.warnings if "'</s>' was not control-type" not in w] == []


def test_adversarial_strings_match_reference(case):
    assert_same(case, ADVERSARIAL, False)
    assert_same(case, ADVERSARIAL + SPECIAL_CASES, True)


def test_random_strings_match_reference(case):
    strings = random_strings(2024, 2500)
    assert assert_same(case, strings, False) == 2500
    assert assert_same(case, strings[:1000], True) == 1000


def test_long_text_matches_reference(case):
    rng = random.Random(3)
    text = "".join(rng.choice(ADVERSARIAL[20:] + random_strings(9, 50)) for _ in range(3000))
    assert_same(case, [text], False)


def test_digits_split_like_the_model(case):
    ids = case.vocab.tokenize("1234567", False, False)
    pieces = [case.vocab.token_to_piece(i) for i in ids]
    assert pieces == ([b"123", b"456", b"7"] if case.pre == "llama-bpe" else [b"1", b"2", b"3", b"4", b"5", b"6", b"7"])


def llama_cpp_decode(raw: bytes) -> str:
    """llama.cpp's lenient UTF-8 decoding: a byte that does not start a
    complete sequence (by lead-byte shape and continuation bytes) is U+FFFD."""
    out, i, n = [], 0, len(raw)
    cont = lambda k: k < n and (raw[k] & 0xC0) == 0x80  # noqa: E731
    while i < n:
        b = raw[i]
        if b < 0x80:
            out.append(b); i += 1
        elif b < 0xC0:
            out.append(0xFFFD); i += 1
        elif b < 0xE0 and cont(i + 1):
            out.append(((b & 0x1F) << 6) | (raw[i + 1] & 0x3F)); i += 2
        elif 0xE0 <= b < 0xF0 and cont(i + 1) and cont(i + 2):
            out.append(((b & 0x0F) << 12) | ((raw[i + 1] & 0x3F) << 6) | (raw[i + 2] & 0x3F)); i += 3
        elif 0xF0 <= b < 0xF8 and cont(i + 1) and cont(i + 2) and cont(i + 3):
            c = ((b & 0x07) << 18) | ((raw[i + 1] & 0x3F) << 12) | ((raw[i + 2] & 0x3F) << 6) | (raw[i + 3] & 0x3F)
            out.append(c if c <= 0x10FFFF else 0xFFFD); i += 4
        else:
            out.append(0xFFFD); i += 1
    return "".join(map(chr, out))


def test_invalid_utf8_is_decoded_like_llama_cpp(case):
    rng = random.Random(11)
    samples = [b"\xff", b"\xc3", b"a\xc3", b"\xe2\x82", b"\xe2\x82 x", b"abc\x80def", b"\xf0\x9f\x98", b"\xc3\xa9\xa9",
               b"\xf8\x88\x80\x80\x80", b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80 \xf7\xbf\xbf\xbf"]
    samples += [bytes(rng.randrange(256) for _ in range(rng.randint(1, 30))) for _ in range(300)]
    for raw in samples:
        text = llama_cpp_decode(raw)
        if any(0xD800 <= ord(c) <= 0xDFFF for c in text):
            continue  # surrogates (from ED A0..BF xx) cannot be passed to the reference as str
        if case.nfc and not unicodedata.is_normalized("NFC", text):
            continue  # the reference would normalize it first; llama.cpp does not
        assert case.vocab.tokenize(raw, False, False) == case.enc.encode_ordinary(text), raw


def test_round_trip_and_pieces(case):
    v = case.vocab
    for s in ADVERSARIAL + random_strings(77, 300):
        s = case.prepare(s)
        # (pieces joined: Vocab.detokenize drops pieces over 32 bytes, as llama-cpp-python does)
        assert b"".join(v.token_to_piece(i) for i in v.tokenize(s, False, False)) == s.encode()
    ids = v.tokenize("\u4e16\U0001F600", False, False)
    pieces = [v.token_to_piece(i) for i in ids]
    assert b"".join(pieces) == "\u4e16\U0001F600".encode()


def test_special_tokens(case):
    v = case.vocab
    marker = "<|eot_id|>" if case.pre == "llama-bpe" else "<|im_end|>"
    mid = case.enc.encode_single_token(marker)
    assert v.tokenize("a" + marker + "b", False, True) == v.tokenize("a", False, False) + [mid] + v.tokenize("b", False, False)
    assert mid not in v.tokenize("a" + marker + "b", False, False)
    assert v.token_to_piece(mid) == b"" and v.token_to_piece(mid, True) == marker.encode()
    assert v.is_eog(mid)


def test_llama3_flags():
    v = bpe_case("llama3", "llama-bpe").vocab
    assert v.add_bos and not v.add_eos  # llama-bpe adds BOS unless the metadata says otherwise
    assert v.bos == 11  # llama.cpp's BPE default when the metadata names no BOS
    assert v.tokenize("hi", True, False)[0] == 11
    assert v.text_to_token("<|begin_of_text|>") == 128000
    assert {128001, 128009} <= set(v.eog_ids)


def test_user_defined_tokens_are_always_matched():
    c = bpe_case("qwen3", "qwen2")
    types = list(c.types)
    think = c.enc.encode_single_token("<think>")
    types[think] = USER_DEFINED
    v = _engine.Vocab("gpt2", "qwen2", c.tokens, None, types, c.merges)
    assert v.tokenize("a<think>b", False, False) == [64, think, 65]
    assert v.token_to_piece(think) == b"<think>"  # user-defined tokens always render
    assert v.tokenize("a<|im_end|>b", False, False) == c.enc.encode_ordinary("a<|im_end|>b")


def test_clean_spaces_in_llama_detokenize():
    c = bpe_case("llama3", "llama-bpe")  # llama-bpe keeps llama.cpp's clean_spaces
    ids = c.vocab.tokenize("Hello , world ! It ' s", False, False)
    assert c.vocab.detokenize(ids) == b"Hello , world ! It ' s"
    assert c.vocab.llama_detokenize(ids) == b"Hello, world! It's"


def test_unknown_pre_tokenizer_falls_back_with_a_warning():
    c = bpe_case("llama3", "llama-bpe")
    v = _engine.Vocab("gpt2", "no-such-pre", c.tokens, None, c.types, c.merges)
    assert not v.pre_known and any("no-such-pre" in w for w in v.warnings)
    assert v.tokenize("Hello world", False, False) == v.tokenize("Hello world", False, False)
    with pytest.raises(ValueError):
        _engine.pretokenize("no-such-pre", "x")


# ---------------------------------------------------------------------------
# Pre-tokenizer regexes against an independent oracle
# ---------------------------------------------------------------------------
WHITESPACE = set(range(0x09, 0x0E)) | {0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000} \
    | set(range(0x2000, 0x200B))
CATEGORY_CODE = {"N": "\xd1", "L": "\xd2", "P": "\xd3", "M": "\xd4", "S": "\xd5"}
CATEGORY_ASCII = {"N": r"\x30-\x39", "L": r"\x41-\x5A\x61-\x7A",
                  "P": r"\x21-\x23\x25-\x2A\x2C-\x2F\x3A-\x3B\x3F-\x40\x5B-\x5D\x5F\x7B\x7D",
                  "M": "", "S": r"\x24\x2B\x3C-\x3E\x5E\x60\x7C"}
CATEGORY_RE = re.compile(r"\\p\{(N|L|P|M|S|Lu|Ll|Lt|Lm|Lo)\}")


def collapse(c: str) -> str:
    o = ord(c)
    if o < 128:
        return c
    if o in WHITESPACE:
        return "\x0b"
    cat = unicodedata.category(c)[0]
    return CATEGORY_CODE.get(cat, "\xd0")


def oracle_regex(pattern: str):
    """llama.cpp's rewrite of one regex for its collapsed (\\p{..} used) or
    wide text, in Python's syntax ($ becomes \\Z: ECMAScript's $ is the very end)."""
    collapsed = CATEGORY_RE.search(pattern) is not None
    out, inside, i = [], False, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "\\":
            m = CATEGORY_RE.match(pattern, i) if collapsed else None
            if m:
                cat = m.group(1)[0]
                body = "\\x%02x" % ord(CATEGORY_CODE[cat]) + CATEGORY_ASCII[cat]
                out.append(body if inside else "[" + body + "]")
                i = m.end()
            else:
                out.append(pattern[i:i + 2])
                i += 2
            continue
        if ch == "[" and not inside:
            inside = True
        elif ch == "]" and inside:
            inside = False
        out.append("\\Z" if ch == "$" and not inside else ch)
        i += 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return collapsed, re.compile("".join(out), re.ASCII)


def oracle_split(pre: str, text: str) -> list:
    pieces = [text]
    for raw_pattern in _engine.pre_tokenizer_patterns(pre):
        collapsed, rx = oracle_regex(raw_pattern.decode())
        out = []
        for piece in pieces:
            syms = "".join(collapse(c) for c in piece) if collapsed else \
                "".join("\x0b" if ord(c) > 0x7F and ord(c) in WHITESPACE else c for c in piece)
            pos = prev = 0
            while True:
                m = rx.search(syms, pos)
                if not m:
                    break
                assert m.end() > m.start(), "empty matches are not modelled here"
                if m.start() > prev:
                    out.append(piece[prev:m.start()])
                out.append(piece[m.start():m.end()])
                prev = pos = m.end()
            if prev < len(piece):
                out.append(piece[prev:])
        pieces = out
    return pieces


def test_pre_tokenizer_names_compile_and_split():
    names = _engine.pre_tokenizer_names()
    for expected in ("default", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
                     "gpt-4o", "tekken", "smollm", "gpt-2", "chameleon", "superbpe", "bloom", "deepseek-v3"):
        assert expected in names
    text = "Hello 123 \u4e16\u754c <sentinel:5> IMGIMGABZ \n\n  1000000 caf\u00e9"
    for name in names:
        words = _engine.pretokenize(name, text)
        assert b"".join(words) == text.encode(), name
    assert _engine.pretokenize("superbpe", "1234567") == [b"1", b"", b"234", b"", b"567"]


@pytest.mark.parametrize("pre", ["default", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "deepseek-v3",
                                 "falcon", "starcoder", "gpt-2", "gpt-4o", "tekken", "bloom", "viking", "chameleon",
                                 "bailingmoe", "seed-coder"])
def test_pre_tokenizer_matches_oracle(pre):
    extra = ["  \n\t x", "IMGIMGAAZ <sentinel:12>", "\u0100\u0101\u1f00 \u2126\u212a", "ABCdef GHI jklMNO",
             "\uff01\uff1f\u3002 \u2018x\u201d", "a   ", "   ", "x\n\n\n  y", "1,000,000.50", "\u00b5\u00c0\u00ff"]
    for s in ADVERSARIAL + extra + random_strings(99, 400):
        s = unicodedata.normalize("NFC", s)
        got = [w.decode("utf-8") for w in _engine.pretokenize(pre, s)]
        assert got == oracle_split(pre, s), (pre, s)


def test_pre_tokenizers_take_any_bytes():
    rng = random.Random(21)
    samples = [bytes(rng.randrange(256) for _ in range(rng.randint(0, 60))) for _ in range(150)]
    samples += [b" " * 2000 + b"x", b"\n" * 500, b"9" * 1000, b"a" * 5000, b"\xe4\xb8\x96" * 1000]
    for name in _engine.pre_tokenizer_names():
        for raw in samples:
            words = _engine.pretokenize(name, raw)
            assert b"".join(words) == llama_cpp_decode(raw).encode("utf-8", "surrogatepass"), (name, raw)
