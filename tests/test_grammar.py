"""GBNF grammars: the parser (errors name line and column), the recogniser on
strings, token filtering over synthetic vocabularies (tokens spanning rule
boundaries, UTF-8 split across tokens, end-of-generation only where the text
is complete), and grammar-constrained sampling. JSON-schema conversion:
test_grammar_json_schema.py.

The token filter (a trie walk with subtree shortcuts) is checked against a
brute-force oracle: token t may follow text P iff P + text(t) is a prefix of a
sentence (text-level matching), or, for end-of-generation tokens, iff P is a
whole sentence.
"""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

from llamapy import _engine
from llamapy.grammar import (JSON_ARR_GBNF, JSON_GBNF, JSON_VALUE_GBNF, GrammarError, LlamaGrammar,
                             grammar_for_response_format)

ARITHMETIC = r"""
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
"""


# ---------------------------------------------------------------------------
# Parser
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, line, col, words", [
    ('root ::= "abc', 1, 10, "unterminated string"),
    ('root ::= foo', 1, 10, "undefined rule 'foo'"),
    ('root ::= "a"\n\nx ::= [a-', 3, 7, "unterminated character class"),
    ('root ::= "a" )', 1, 14, "unexpected ')'"),
    ('root ::= ("a" | "b"', 1, 10, "unclosed '('"),
    ('root ::= "\\q"', 1, 11, "unknown escape: backslash and 'q'"),
    ('root ::= "\\x4"', 1, 11, "hex digits"),
    ('root ::= "a"{3,1}', 1, 13, "n < m"),
    ('root ::= "a"{2', 1, 15, "expected '}'"),
    ('root ::= * "a"', 1, 10, "must follow an item"),
    ('root ::= "a" b ::= "c"', 1, 14, "line break"),
    ('root "a"', 1, 6, "expected '::='"),
    ('::= "a"', 1, 1, "expected a rule name"),
    ('root ::= [z-a]', 1, 11, "out of order"),
    ('root ::= "a"\nroot ::= "b"', 2, 1, "defined twice"),
    ('root ::= <[12]>', 1, 10, "token references"),
    ('root ::= a\na ::= b "x"\nb ::= a | "y"', 2, 1, "left-recursive: a -> b -> a"),
    ('root ::= root "a" | "b"', 1, 1, "left-recursive: root -> root"),
    ('root ::= ("a"?)*', 1, 1, "left-recursive"),
    ('root ::= "x"\n  # comment\nitem ::= ws item\nws ::= " "?', 3, 1, "left-recursive"),
])
def test_parse_errors_name_line_and_column(text, line, col, words):
    with pytest.raises(GrammarError) as info:
        _engine.Grammar(text)
    msg = str(info.value)
    assert f"line {line}, column {col}" in msg
    assert words in msg
    assert isinstance(info.value, ValueError)


def test_deep_nesting_is_an_error_not_a_crash():
    """The parser recurses per nested group: 1000 levels parse, deeper
    raises (100,000 levels once overflowed the native stack)."""
    ok = "root ::= " + "(" * 1000 + '"a"' + ")" * 1000
    LlamaGrammar.from_string(ok, verbose=False)
    for n in (1001, 100_000):
        with pytest.raises(GrammarError, match="nested more than 1000"):
            LlamaGrammar.from_string("root ::= " + "(" * n + '"a"' + ")" * n, verbose=False)
    # long chains of rules are iterative all the way: no limit needed
    lines = ["root ::= r0"] + [f'r{i} ::= r{i + 1} "x"' for i in range(50_000)] + ['r50000 ::= "y"']
    LlamaGrammar.from_string("\n".join(lines), verbose=False)


def test_missing_root_and_custom_root():
    with pytest.raises(ValueError, match="no rule named 'root'"):
        _engine.Grammar('start ::= "a"')
    g = _engine.Grammar('start ::= "a"', root="start")
    assert g.matches("a") and g.root == "start"
    with pytest.raises(ValueError, match="no rule named"):
        _engine.Grammar("")


def test_invalid_utf8_in_grammar_text_is_an_error():
    with pytest.raises(ValueError, match="invalid UTF-8"):
        _engine.Grammar(b'root ::= "\xff"')


def test_mutated_grammars_parse_or_raise_value_error():
    rng = random.Random(7)
    alphabet = '"[]()|*+?{},.-^\\#\n :=ax0é\x00'
    n_parsed = 0
    for _ in range(1500):
        text = list(rng.choice([ARITHMETIC, JSON_GBNF]))
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(text))
            op = rng.randrange(3)
            if op == 0:
                del text[at]
            elif op == 1:
                text.insert(at, rng.choice(alphabet))
            else:
                text[at] = rng.choice(alphabet)
        try:
            g = _engine.Grammar("".join(text))
        except ValueError as e:
            assert "grammar" in str(e)
            continue
        n_parsed += 1
        g.matches_prefix('{"a": 1, "b": [x=1')
    assert 0 < n_parsed < 1500


@pytest.mark.parametrize("gbnf, yes, no", [
    (r'root ::= "\x41\u00e9\U0001F600\t\n\\\"\[\]"', ["Aé😀\t\n\\\"[]"], ["A", "Aé😀"]),
    (r'root ::= [a-c] [^a-c] [-x] [x-]', ["a-x-", "bzxx", "c--x"], ["aaxx", "d-x-", "a-y-"]),
    (r'root ::= [\]\-\[] [\u00e0-\u00ff]', ["]é", "-ÿ", "[à"], ["aé", "]a"]),
    (r'root ::= . .', ["ab", "中😀", "\n\t"], ["a", "abc"]),
    (r'root ::= "a"{3}', ["aaa"], ["aa", "aaaa"]),
    (r'root ::= "a"{2,}', ["aa", "aaaaaaa"], ["a", ""]),
    (r'root ::= "ab"{1,3}', ["ab", "abab", "ababab"], ["", "abababab", "aba"]),
    (r'root ::= "a"{,2} "b"', ["b", "ab", "aab"], ["aaab"]),
    (r'root ::= "a"{0}', [""], ["a"]),
    (r'root ::= ("a" | "b" "c")+ "."?', ["a", "bc.", "abca."], ["b", "..", ""]),
    (r'root ::= [] | "x"', ["x"], [""]),
    ('root ::= a |\n   b\na ::= ( "x"\n  "y" )\r\nb ::= "z" # comment\n', ["xy", "z"], ["x", "yz"]),
    (r'root ::= "" "a"* ""', ["", "aaaa"], ["b"]),
])
def test_language_of_small_grammars(gbnf, yes, no):
    g = _engine.Grammar(gbnf)
    for s in yes:
        assert g.matches(s), (gbnf, s)
    for s in no:
        assert not g.matches(s), (gbnf, s)


def test_arithmetic_grammar():
    g = _engine.Grammar(ARITHMETIC)
    for s in ["a=1\n", "(a+b)*3 = x\n", "1+2=3\n4=4\n", "x1_ = ( y /2 )\n"]:
        assert g.matches(s), s
    for s in ["a=1", "=1\n", "a==1\n", "(a=1\n", "A=1\n"]:
        assert not g.matches(s), s
    assert g.matches_prefix("(a+") and not g.matches_prefix("(a+)")
    for seed in range(50):
        s = g.random_string(seed, 10)
        assert g.matches(s), s


def test_json_grammar_accepts_json_and_rejects_non_json():
    g = _engine.Grammar(JSON_VALUE_GBNF)
    rng = random.Random(0)
    for _ in range(200):
        v = random_json_value(rng, 3)
        for text in (json.dumps(v), json.dumps(v, indent=2, ensure_ascii=False)):
            assert g.matches(text), text
    bad = ['{"a" 1}', "[1,]", "{,}", "01", "1.", ".5", '"\\x"', '"a', "tru", "nul", "[1 2]", '{"a":1,}',
           "+1", "1e", '"\\ud800"', '"tab\there"', "{'a': 1}", "[]]"]
    for text in bad:
        assert not g.matches(text), text
    assert _engine.Grammar(JSON_GBNF).matches('{"a": [1, 2]}')
    assert not _engine.Grammar(JSON_GBNF).matches("[1]")
    assert _engine.Grammar(JSON_ARR_GBNF).matches("[1]")
    for seed in range(200):
        json.loads(g.random_string(seed, 12))


def random_json_value(rng: random.Random, depth: int):
    kinds = ["int", "float", "str", "bool", "null"] + (["list", "dict"] * 2 if depth > 0 else [])
    k = rng.choice(kinds)
    if k == "int":
        return rng.randint(-10**6, 10**6)
    if k == "float":
        return round(rng.uniform(-1e3, 1e3), rng.randint(0, 6))
    if k == "str":
        return "".join(rng.choice('ab "\\/\n\té中😀\x01') for _ in range(rng.randint(0, 8)))
    if k == "bool":
        return rng.random() < 0.5
    if k == "null":
        return None
    if k == "list":
        return [random_json_value(rng, depth - 1) for _ in range(rng.randint(0, 4))]
    return {random_json_value(rng, 0).__str__(): random_json_value(rng, depth - 1) for _ in range(rng.randint(0, 4))}


def test_ambiguous_grammar_is_handled():
    g = _engine.Grammar(r'root ::= ("a" | "aa" | "a" "a")* "b"')
    assert g.matches("a" * 40 + "b")
    assert not g.matches("a" * 40)


def test_deep_nesting_and_long_inputs():
    g = _engine.Grammar(JSON_VALUE_GBNF)
    assert g.matches("[" * 300 + "]" * 300)
    assert g.matches('"' + "x" * 100000 + '"')
    # Past 65536 automaton states the matcher rebuilds its stores; matching goes on.
    m = _engine.GrammarMatcher(_engine.Grammar('root ::= "a"{0,70000} "b"'))
    for _ in range(70000):
        assert m.accept_bytes("a")
    assert not m.accept_bytes("a") and m.accept_bytes("b") and m.can_end


# ---------------------------------------------------------------------------
# Token filtering
# ---------------------------------------------------------------------------
BASE_TOKENS = (
    [bytes([c]) for c in range(0x20, 0x7F)]
    + [b"\n", b"\t", b"  ", b"\n  ", b"\n    ", b" \"", b"{\"", b"\":", b"\": ", b"\": \"", b"\",", b"\", \"",
       b"\"}", b"},", b"}]", b"[{", b"[]", b"{}", b"true", b"false", b"null", b"tr", b"ue", b"fal", b"se", b"nu",
       b"ll", b"12", b"345", b"3.5", b"e+", b"E-", b"0.", b".0", b"\\n", b"\\\"", b"\\u00", b"\\u", b"e9", b"name",
       b"age", b"hello", b" world", b"ab", b"abc", b"cd", b"x=", b"=1", b"+(", b")\n"]
    + ["é".encode(), "中文".encode(), "😀".encode(), "中".encode()[:1], "中".encode()[1:], "中".encode()[:2],
       "中".encode()[2:], "😀".encode()[:3], "é\"".encode(), "\"中".encode()]
    + [bytes([b]) for b in range(0x80, 0x100)]
)


def make_vocab(extra=()):
    """(texts, eos id): the base tokens, an empty token, then EOS (printed as "</s>")."""
    texts = list(BASE_TOKENS) + list(extra) + [b""]
    eos = len(texts)
    texts.append(b"</s>")
    return texts, eos


def oracle_allowed(g, texts, eos, prefix: bytes):
    out = []
    for i, t in enumerate(texts):
        if i == eos:
            if g.matches(prefix):
                out.append(i)
        elif t and g.matches_prefix(prefix + t):
            out.append(i)
    return out


def random_prefixes(g, rng, n_sentences, depth=8):
    for _ in range(n_sentences):
        s = g.random_string(rng.randrange(1 << 30), depth).encode()
        cuts = sorted({0, len(s)} | {rng.randrange(len(s) + 1) for _ in range(4)})
        for c in cuts:
            yield s[:c]


@pytest.mark.parametrize("gbnf", [JSON_VALUE_GBNF, ARITHMETIC, r'root ::= "中文" [^"]* "\"" | "😀"{2}',
                                  r'root ::= .* "end"', r'root ::= ("ab" | "abc" | "c" "d"+)+'])
def test_allowed_tokens_match_the_oracle(gbnf):
    g = _engine.Grammar(gbnf)
    texts, eos = make_vocab()
    vocab = _engine.GrammarVocab(texts, [eos])
    rng = random.Random(hash(gbnf) & 0xFFFF)
    n_checked = 0
    for prefix in random_prefixes(g, rng, 12):
        m = _engine.GrammarMatcher(g, vocab)
        assert m.accept_bytes(prefix)
        got = m.allowed_tokens().tolist()
        want = oracle_allowed(g, texts, eos, prefix)
        assert got == want, (gbnf, prefix, sorted(set(got) ^ set(want))[:10])
        for t in rng.sample(range(len(texts)), 40):
            assert m.allows(t) == (t in want)
        n_checked += 1
    assert n_checked > 20


def test_utf8_split_across_tokens():
    g = _engine.Grammar(r'root ::= "中文" | "中国"')
    texts = [b"\xe4", b"\xb8", b"\xad", b"\xe4\xb8", b"\xe6\x96\x87", "文".encode(), b"\xe5\x9b", b"\xbd", b"x", b""]
    eos = len(texts)
    texts.append(b"")
    vocab = _engine.GrammarVocab(texts, [eos])
    m = _engine.GrammarMatcher(g, vocab)
    assert m.allowed_tokens().tolist() == [0, 3]      # a lead byte, or lead + first continuation
    m.accept_token(0)
    assert m.allowed_tokens().tolist() == [1]         # only the continuation that keeps 中 possible
    assert not m.can_end
    m.accept_token(1)
    m.accept_token(2)
    assert m.allowed_tokens().tolist() == [4, 5, 6]   # 文 whole, or the start of 国
    m.accept_token(6)
    assert m.allowed_tokens().tolist() == [7]
    assert not m.allows(eos)
    m.accept_token(7)
    assert m.can_end and m.allowed_tokens().tolist() == [eos]
    with pytest.raises(ValueError, match="does not continue"):
        m.accept_token(8)
    # A lead byte whose character the grammar cannot take is refused at once.
    m2 = _engine.GrammarMatcher(_engine.Grammar(r'root ::= [a-z]+'), vocab)
    assert m2.allowed_tokens().tolist() == [8]
    m3 = _engine.GrammarMatcher(_engine.Grammar(r'root ::= [\u4e00-\u4e2f]'), vocab)
    assert m3.allowed_tokens().tolist() == [0, 3]     # 中 is U+4E2D
    m3.accept_token(3)
    assert m3.allowed_tokens().tolist() == [2]


def test_eos_only_where_the_text_is_complete():
    g = _engine.Grammar(r'root ::= "ab" "c"?')
    texts = [b"a", b"b", b"c", b"ab", b"abc", b"bc"]
    eos = len(texts)
    vocab = _engine.GrammarVocab(texts + [b"<eos>"], [eos])
    m = _engine.GrammarMatcher(g, vocab)
    assert m.allowed_tokens().tolist() == [0, 3, 4]
    m.accept_token(0)
    assert m.allowed_tokens().tolist() == [1, 5]
    m.accept_token(1)
    assert m.can_end and m.can_continue
    assert m.allowed_tokens().tolist() == [2, eos]
    m.accept_token(2)
    assert m.allowed_tokens().tolist() == [eos] and not m.can_continue
    m.reset()
    assert not m.allows(eos)
    # An EOS id's text is never matched as text.
    assert m.allows(3) and not m.allows(eos)


def test_tokens_spanning_rule_boundaries():
    g = _engine.Grammar(r'''root ::= "{" ws "\"k\"" ws ":" ws val ws "}"
val ::= [0-9]+
ws ::= " "?''')
    texts = [b"{", b"{\"", b"{ \"k", b"\"k\"", b"\":", b"\": ", b": 1", b"12}", b"1 }", b"1", b"}", b" ", b"x"]
    vocab = _engine.GrammarVocab(texts, [])
    m = _engine.GrammarMatcher(g, vocab)
    assert m.allowed_tokens().tolist() == [0, 1, 2]
    m.accept_token(2)
    assert m.allowed_tokens().tolist() == [4, 5]
    m.accept_token(5)
    assert m.allowed_tokens().tolist() == [7, 8, 9]
    m.accept_token(7)
    assert m.can_end and m.allowed_tokens().tolist() == []


def test_grammar_vocab_validates_eog_ids():
    with pytest.raises(ValueError, match="outside the vocabulary"):
        _engine.GrammarVocab([b"a"], [3])
    with pytest.raises(ValueError):
        _engine.GrammarVocab([], [])


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------
def constrained_sampler(gbnf, texts, eos, **kw):
    s = _engine.Sampler(len(texts), **kw)
    s.set_grammar(_engine.Grammar(gbnf), _engine.GrammarVocab(texts, [eos]))
    return s


def generate(s, texts, eos, rng, max_tokens=3000):
    out = b""
    for _ in range(max_tokens):
        tok = s.sample((rng.standard_normal(len(texts)) * 2).astype(np.float32))
        if tok == eos:
            assert s.grammar_can_end
            return out
        s.accept(tok)
        out += texts[tok]
    raise AssertionError(f"no EOS after {max_tokens} tokens: {out[:200]!r}")


@pytest.mark.parametrize("params", [
    dict(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),
    dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0),
    dict(temperature=1.5, top_k=5, top_p=0.9, min_p=0.0, repeat_penalty=1.3),
    dict(temperature=0.7, mirostat=2),
])
def test_sampled_text_is_always_valid_json(params):
    texts, eos = make_vocab()
    gbnf = JSON_GBNF.replace("root ::= object", 'root ::= "{" ws "\\"a\\"" ws ":" ws value "}"')
    for seed in range(15):
        s = constrained_sampler(gbnf, texts, eos, seed=seed, **params)
        text = generate(s, texts, eos, np.random.default_rng(seed))
        v = json.loads(text.decode("utf-8"))
        assert isinstance(v, dict) and list(v) == ["a"]


def test_greedy_returns_the_best_allowed_token():
    texts, eos = make_vocab()
    g = _engine.Grammar(JSON_VALUE_GBNF)
    vocab = _engine.GrammarVocab(texts, [eos])
    s = _engine.Sampler(len(texts), temperature=0.0)
    s.set_grammar(g, vocab)
    m = _engine.GrammarMatcher(g, vocab)
    rng = np.random.default_rng(0)
    for _ in range(60):
        logits = rng.standard_normal(len(texts)).astype(np.float32)
        allowed = m.allowed_tokens()
        want = int(allowed[np.argmax(logits[allowed])])
        got = s.sample(logits)
        assert got == want
        if got == eos:
            break
        s.accept(got)
        m.accept_token(got)


def test_sampler_grammar_rules():
    texts, eos = make_vocab()
    s = constrained_sampler(r'root ::= "ab"', texts, eos, temperature=0.0)
    s.set_history([texts.index(b"x"), 5, 7])  # the prompt feeds penalties, not the grammar
    with pytest.raises(ValueError, match="does not continue"):
        s.accept(texts.index(b"x"))
    logits = np.zeros(len(texts), dtype=np.float32)
    logits[texts.index(b"ab")] = -np.inf  # banned by logit bias: the other spelling is used
    assert s.sample(logits) == texts.index(b"a")
    s.accept(texts.index(b"a"))
    s.accept(texts.index(b"b"))
    assert s.sample(logits) == eos
    s.reset_grammar()
    assert not s.grammar_can_end and s.sample(logits) == texts.index(b"a")
    s.set_grammar(None)
    assert not s.grammar_can_end
    with pytest.raises(ValueError, match="n_vocab"):
        _engine.Sampler(10).set_grammar(_engine.Grammar('root ::= "a"'), _engine.GrammarVocab(texts, [eos]))
    # Finished, and no EOS known: a clear error rather than a garbage token.
    s2 = _engine.Sampler(2, temperature=0.0)
    s2.set_grammar(_engine.Grammar('root ::= "a"'), _engine.GrammarVocab([b"a", b"b"], []))
    s2.accept(0)
    with pytest.raises(ValueError, match="complete"):
        s2.sample(np.zeros(2, dtype=np.float32))


# ---------------------------------------------------------------------------
# LlamaGrammar
# ---------------------------------------------------------------------------
def test_llama_grammar_constructors(tmp_path):
    g = LlamaGrammar.from_string(ARITHMETIC)
    assert g.matches("a=1\n") and g.grammar == ARITHMETIC and "rules" in repr(g)
    p = tmp_path / "g.gbnf"
    p.write_text(ARITHMETIC, encoding="utf-8")
    assert LlamaGrammar.from_file(p).matches("b=2\n")
    assert LlamaGrammar.from_file(str(p), verbose=False).matches("b=2\n")
    (tmp_path / "empty.gbnf").write_text("\n")
    with pytest.raises(ValueError, match="empty"):
        LlamaGrammar.from_file(tmp_path / "empty.gbnf")
    with pytest.raises(FileNotFoundError):
        LlamaGrammar.from_file(tmp_path / "missing.gbnf")
    with pytest.raises(GrammarError, match="line 1, column 10"):
        LlamaGrammar.from_string('root ::= nope')
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    for arg in (json.dumps(schema), schema):
        gs = LlamaGrammar.from_json_schema(arg)
        assert gs.matches('{"a": 5}') and not gs.matches('{"a": "5"}')
    assert isinstance(gs.native, _engine.Grammar)


def test_grammar_for_response_format():
    assert grammar_for_response_format(None) is None
    assert grammar_for_response_format({"type": "text"}) is None
    g = grammar_for_response_format({"type": "json_object"})
    assert g.matches('{"x": [1, {}]}') and not g.matches("[1]")
    schema = {"type": "object", "properties": {"n": {"type": "string"}}, "required": ["n"]}
    g = grammar_for_response_format({"type": "json_object", "schema": schema})
    assert g.matches('{"n": "x"}') and not g.matches('{}')
    g = grammar_for_response_format({"type": "json_schema", "json_schema": {"name": "t", "schema": schema}})
    assert g.matches('{"n": "x"}') and not g.matches('{"m": "x"}')
    with pytest.raises(ValueError, match="not supported"):
        grammar_for_response_format({"type": "yaml"})


# ---------------------------------------------------------------------------
# A real vocabulary (Gemma 3, 262k tokens)
# ---------------------------------------------------------------------------
def spm_token_texts(tokens, types):
    """Token texts as printed bytes: U+2581 is a space, <0xNN> byte tokens are
    that byte; control and unused tokens print nothing."""
    out = []
    for t, ty in zip(tokens, types):
        if ty == 6 and len(t) == 6 and t.startswith("<0x"):
            out.append(bytes([int(t[3:5], 16)]))
        elif ty in (2, 3, 5):
            out.append(b"")
        else:
            out.append(t.replace("\u2581", " ").encode())
    return out


@pytest.mark.model
def test_gemma_vocabulary_filter_matches_the_oracle(gemma_path):
    from llamapy import GGUFFile

    with GGUFFile(gemma_path) as f:
        md = f.metadata
        texts = spm_token_texts(list(md["tokenizer.ggml.tokens"]), list(md["tokenizer.ggml.token_type"]))
        eos = int(md["tokenizer.ggml.eos_token_id"])
    vocab = _engine.GrammarVocab(texts, [eos])
    g = _engine.Grammar(JSON_GBNF)
    for prefix in [b"", b'{"na', b'{"name": ', b'{"name": "Jo', b'{"a": [1, 2', "{\"é".encode()[:-1]]:
        m = _engine.GrammarMatcher(g, vocab)
        assert m.accept_bytes(prefix)
        got = m.allowed_tokens().tolist()
        want = oracle_allowed(g, texts, eos, prefix)
        assert got == want, prefix
