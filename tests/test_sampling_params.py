"""SamplingParams: one request's sampling options, checked once (llamapy/_sampling.py);
generate(sampling=...) is the same as the separate keywords."""
import math

import numpy as np
import pytest

from llamapy._sampling import SamplingParams


def test_defaults_are_llama_cpp_pythons():
    p = SamplingParams()
    assert (p.temperature, p.top_k, p.top_p, p.min_p, p.mirostat_eta) == (0.8, 40, 0.95, 0.05, 0.1)


@pytest.mark.parametrize("kw,words", [
    ({"temperature": math.nan}, "temperature"),
    ({"mirostat_eta": "fast"}, "mirostat_eta"),
    ({"top_p": math.inf}, "top_p"),
    ({"top_k": 4.5}, "top_k"),
    ({"top_k": True}, "top_k"),
    ({"mirostat_mode": 3}, "mirostat_mode"),
    ({"logit_bias": {"x": 1}}, "logit_bias"),
    ({"logit_bias": {5: math.nan}}, "logit_bias"),
])
def test_bad_values_name_the_option(kw, words):
    with pytest.raises(ValueError, match=words):
        SamplingParams(**kw)


def test_values_are_normalised():
    p = SamplingParams(temperature=1, top_k=np.int64(7), logit_bias={"15": 2, 3: -1.5})
    assert isinstance(p.temperature, float) and p.top_k == 7 and type(p.top_k) is int
    assert p.logit_bias == {15: 2.0, 3: -1.5}
    assert SamplingParams(logit_bias={}).logit_bias is None


def test_of_reads_request_fields():
    class Req:
        temperature = 0.0
        top_k = 1
        max_tokens = 5  # not a sampling option
    p = SamplingParams.of(Req())
    assert (p.temperature, p.top_k, p.top_p) == (0.0, 1, 0.95)


def test_completion_checks_before_work(tiny):
    from llamapy import Llama

    with Llama(model_path=str(tiny("llama")[0]), verbose=False) as llm:
        with pytest.raises(ValueError, match="mirostat_mode"):
            llm.create_completion([1, 2, 3], mirostat_mode=7, stream=True)  # raised at the call, not when iterated
        assert llm.n_tokens == 0


def test_generate_with_sampling_equals_keywords(tiny):
    from llamapy import Llama

    def run(**kw):
        with Llama(model_path=str(tiny("llama")[0]), seed=5, verbose=False) as llm:
            out = []
            for t in llm.generate([1, 5, 9], **kw):
                out.append(t)
                if len(out) == 8:
                    break
            return out

    a = run(temp=0.9, top_k=20, top_p=0.8, repeat_penalty=1.1, logit_bias={7: 3.0})
    b = run(sampling=SamplingParams(temperature=0.9, top_k=20, top_p=0.8, repeat_penalty=1.1, logit_bias={7: 3.0}))
    assert a == b


def test_top_k_must_fit_the_engines_int():
    with pytest.raises(ValueError, match="top_k is 1099511627776"):
        SamplingParams(top_k=2 ** 40)


def test_server_bodies_take_the_sampling_defaults():
    # The request bodies derive their sampling fields from SamplingParams (one declaration).
    import dataclasses

    pytest.importorskip("fastapi")
    from llamapy.server.openai_routes import ChatBody, CompletionBody

    for body in (ChatBody, CompletionBody):
        shared = [f for f in dataclasses.fields(SamplingParams) if f.name in body.model_fields]
        assert len(shared) >= 10
        for f in shared:
            assert body.model_fields[f.name].default == f.default, f.name
