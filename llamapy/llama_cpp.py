"""The low-level names of llama-cpp-python's ``llama_cpp.llama_cpp`` that make
sense for llamapy: llama.h's enum constants (``LLAMA_VOCAB_TYPE_*``,
``LLAMA_FTYPE_*``, ``LLAMA_POOLING_TYPE_*``, ``GGML_TYPE_*``, ...) with
llama.cpp's values, the library's capability queries, and the default
model/context parameter records, so code written against llama-cpp-python's
top-level ``llama_cpp`` namespace imports and branches the same way.

Out of scope: the raw ctypes C API (``llama_model_load_from_file``,
``llama_decode`` on ctypes pointers, ``llama_batch_init``, samplers, the ctypes
structures, pointer types and callbacks, ``llama_log_set``). llamapy's engine
is not llama.cpp, so there are no llama.cpp objects to pass them; ``Llama`` is
the API, and ``llamapy._internals`` has llama-cpp-python's intermediate
wrappers (``LlamaModel``, ``LlamaContext``, ``LlamaBatch``, ``LlamaSampler``)
made from the parameter records below. The parameter records below are plain Python objects with
llama.cpp's fields and defaults, not ctypes structures.
"""
from __future__ import annotations

import time
from typing import Any, Dict

from ._params import gpu_unavailable
from .system import system_info

__all__ = [  # the constants are added below
    "GGML_DEFAULT_N_THREADS", "llama_backend_free", "llama_backend_init", "llama_context_default_params",
    "llama_context_params", "llama_max_devices", "llama_model_default_params", "llama_model_params",
    "llama_numa_init", "llama_print_system_info", "llama_supports_gpu_offload", "llama_supports_mlock",
    "llama_supports_mmap", "llama_supports_rpc", "llama_time_us",
]


def _define(prefix: str, values: Dict[str, int]) -> None:
    """Module constants ``prefix + name`` (the enums of llama.h / ggml.h)."""
    for name, value in values.items():
        globals()[prefix + name] = value
        __all__.append(prefix + name)


def _sequence(names: str, start: int = 0) -> Dict[str, int]:
    return {n: i for i, n in enumerate(names.split(), start)}


# --- ggml.h -------------------------------------------------------------------------------------------------------
# enum ggml_type: the on-disk tensor types (gaps are types ggml has retired).
_define("GGML_TYPE_", {**_sequence("F32 F16 Q4_0 Q4_1"), **_sequence("Q5_0 Q5_1 Q8_0 Q8_1 Q2_K Q3_K Q4_K Q5_K Q6_K "
                       "Q8_K IQ2_XXS IQ2_XS IQ3_XXS IQ1_S IQ4_NL IQ3_S IQ2_S IQ4_XS I8 I16 I32 I64 F64 IQ1_M", 6),
                       **_sequence("MXFP4 NVFP4 Q1_0 Q2_0 COUNT", 39)})
_define("GGML_NUMA_STRATEGY_", _sequence("DISABLED DISTRIBUTE ISOLATE NUMACTL MIRROR COUNT"))
_define("GGML_ROPE_TYPE_", {"NEOX": 2, "MROPE": 8, "VISION": 24, "IMROPE": 40})
GGML_DEFAULT_N_THREADS = 4

# --- llama.h ------------------------------------------------------------------------------------------------------
LLAMA_DEFAULT_SEED = 0xFFFFFFFF  # "pick a random seed"
LLAMA_TOKEN_NULL = -1
LLAMA_FILE_MAGIC_GGLA = 0x67676C61  # 'ggla'
LLAMA_FILE_MAGIC_GGSN = 0x6767736E  # 'ggsn'
LLAMA_FILE_MAGIC_GGSQ = 0x67677371  # 'ggsq'
LLAMA_SESSION_MAGIC = LLAMA_FILE_MAGIC_GGSN
LLAMA_SESSION_VERSION = 10
LLAMA_STATE_SEQ_MAGIC = LLAMA_FILE_MAGIC_GGSQ
LLAMA_STATE_SEQ_VERSION = 3
LLAMA_MAX_DEVICES = 16  # llama.cpp's fixed bound (the size of tensor_split), not a device count
__all__ += ["LLAMA_DEFAULT_SEED", "LLAMA_TOKEN_NULL", "LLAMA_FILE_MAGIC_GGLA", "LLAMA_FILE_MAGIC_GGSN",
            "LLAMA_FILE_MAGIC_GGSQ", "LLAMA_SESSION_MAGIC", "LLAMA_SESSION_VERSION", "LLAMA_STATE_SEQ_MAGIC",
            "LLAMA_STATE_SEQ_VERSION", "LLAMA_MAX_DEVICES"]

_define("LLAMA_VOCAB_TYPE_", _sequence("NONE SPM BPE WPM UGM RWKV PLAMO2 TEST"))
_define("LLAMA_VOCAB_PRE_TYPE_", _sequence(
    "DEFAULT LLAMA3 DEEPSEEK_LLM DEEPSEEK_CODER FALCON MPT STARCODER GPT2 REFACT COMMAND_R STABLELM2 QWEN2 OLMO DBRX "
    "SMAUG PORO CHATGLM3 CHATGLM4 VIKING JAIS TEKKEN SMOLLM CODESHELL BLOOM GPT3_FINNISH EXAONE CHAMELEON MINERVA "
    "DEEPSEEK3_LLM GPT4O SUPERBPE TRILLION BAILINGMOE LLAMA4 PIXTRAL SEED_CODER"))
_define("LLAMA_ROPE_TYPE_", {"NONE": -1, "NORM": 0, "NEOX": 2, "MROPE": 8, "VISION": 24, "IMROPE": 40})
_define("LLAMA_TOKEN_TYPE_", _sequence("UNDEFINED NORMAL UNKNOWN CONTROL USER_DEFINED UNUSED BYTE"))
# enum llama_token_attr: bit flags
_define("LLAMA_TOKEN_ATTR_", {"UNDEFINED": 0, **{n: 1 << i for i, n in enumerate(
    "UNKNOWN UNUSED NORMAL CONTROL USER_DEFINED BYTE NORMALIZED LSTRIP RSTRIP SINGLE_WORD".split())}})
# enum llama_ftype: a model file's main weight type (gaps are retired types)
_define("LLAMA_FTYPE_", {**_sequence("ALL_F32 MOSTLY_F16 MOSTLY_Q4_0 MOSTLY_Q4_1"),
                         **_sequence("MOSTLY_Q8_0 MOSTLY_Q5_0 MOSTLY_Q5_1 MOSTLY_Q2_K MOSTLY_Q3_K_S MOSTLY_Q3_K_M "
                                     "MOSTLY_Q3_K_L MOSTLY_Q4_K_S MOSTLY_Q4_K_M MOSTLY_Q5_K_S MOSTLY_Q5_K_M "
                                     "MOSTLY_Q6_K MOSTLY_IQ2_XXS MOSTLY_IQ2_XS MOSTLY_Q2_K_S MOSTLY_IQ3_XS "
                                     "MOSTLY_IQ3_XXS MOSTLY_IQ1_S MOSTLY_IQ4_NL MOSTLY_IQ3_S MOSTLY_IQ3_M MOSTLY_IQ2_S "
                                     "MOSTLY_IQ2_M MOSTLY_IQ4_XS MOSTLY_IQ1_M MOSTLY_BF16", 7),
                         **_sequence("MOSTLY_TQ1_0 MOSTLY_TQ2_0 MOSTLY_MXFP4_MOE MOSTLY_NVFP4 MOSTLY_Q1_0 MOSTLY_Q2_0",
                                     36),
                         "GUESSED": 1024})
_define("LLAMA_ROPE_SCALING_TYPE_", {"UNSPECIFIED": -1, **_sequence("NONE LINEAR YARN LONGROPE"), "MAX_VALUE": 3})
_define("LLAMA_POOLING_TYPE_", {"UNSPECIFIED": -1, **_sequence("NONE MEAN CLS LAST RANK")})
_define("LLAMA_ATTENTION_TYPE_", {"UNSPECIFIED": -1, **_sequence("CAUSAL NON_CAUSAL")})
_define("LLAMA_FLASH_ATTN_TYPE_", {"AUTO": -1, **_sequence("DISABLED ENABLED")})
_define("LLAMA_SPLIT_MODE_", _sequence("NONE LAYER ROW TENSOR"))
_define("LLAMA_KV_OVERRIDE_TYPE_", _sequence("INT FLOAT BOOL STR"))
_define("LLAMA_LOAD_MODE_", {"AUTO": -1, **_sequence("NONE MMAP MLOCK MMAP_MLOCK DIRECT_IO")})
_define("LLAMA_LAZY_MODE_", _sequence("OFF AUTO ON"))
_define("LLAMA_CONTEXT_TYPE_", _sequence("DEFAULT MTP"))
_define("LLAMA_PROCESS_TYPE_", _sequence("ENCODE DECODE"))
_define("LLAMA_STATE_SEQ_FLAGS_", {"NONE": 0, "PARTIAL_ONLY": 1, "SWA_ONLY": 1, "ON_DEVICE": 2})
_define("LLAMA_MODEL_META_KEY_SAMPLING_", _sequence(
    "SEQUENCE TOP_K TOP_P MIN_P XTC_PROBABILITY XTC_THRESHOLD TEMP PENALTY_LAST_N PENALTY_REPEAT MIROSTAT "
    "MIROSTAT_TAU MIROSTAT_ETA"))


# --- parameter records --------------------------------------------------------------------------------------------
class _Record:
    """Fields with llama.cpp's defaults; assignable like a ctypes structure's."""

    _defaults: Dict[str, Any] = {}

    def __init__(self, **fields: Any) -> None:
        for name, value in {**self._defaults, **fields}.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={getattr(self, k)!r}' for k in self._defaults)})"


class llama_model_params(_Record):  # noqa: N801 - llama.h's name
    """llama.h's ``llama_model_params`` (pointer fields are None)."""

    _defaults = dict(devices=None, tensor_buft_overrides=None, n_gpu_layers=-1, split_mode=LLAMA_SPLIT_MODE_LAYER,
                     load_mode=LLAMA_LOAD_MODE_AUTO, lazy_mode=LLAMA_LAZY_MODE_AUTO, main_gpu=0, tensor_split=None,
                     progress_callback=None, progress_callback_user_data=None, kv_overrides=None, vocab_only=False,
                     check_tensors=False, use_extra_bufts=True, no_host=False, no_alloc=False, load_mtp=False)


class llama_context_params(_Record):  # noqa: N801 - llama.h's name
    """llama.h's ``llama_context_params`` (pointer and callback fields are None)."""

    _defaults = dict(n_ctx=512, n_batch=2048, n_ubatch=512, n_seq_max=1, n_rs_seq=0, n_outputs_max=0,
                     n_outputs_max_per_seq=1, n_threads=GGML_DEFAULT_N_THREADS,
                     n_threads_batch=GGML_DEFAULT_N_THREADS, ctx_type=LLAMA_CONTEXT_TYPE_DEFAULT,
                     rope_scaling_type=LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED,
                     pooling_type=LLAMA_POOLING_TYPE_UNSPECIFIED, attention_type=LLAMA_ATTENTION_TYPE_UNSPECIFIED,
                     flash_attn_type=LLAMA_FLASH_ATTN_TYPE_AUTO, rope_freq_base=0.0, rope_freq_scale=0.0,
                     yarn_ext_factor=-1.0, yarn_attn_factor=-1.0, yarn_beta_fast=-1.0, yarn_beta_slow=-1.0,
                     yarn_orig_ctx=0, defrag_thold=-1.0, cb_eval=None, cb_eval_user_data=None,
                     type_k=GGML_TYPE_F16, type_v=GGML_TYPE_F16,  # noqa: F821 - defined by _define above
                     abort_callback=None, abort_callback_data=None, embeddings=False, offload_kqv=True, no_perf=True,
                     op_offload=True, swa_full=True, kv_unified=False, samplers=None, n_samplers=0, ctx_other=None)


def llama_model_default_params() -> llama_model_params:
    return llama_model_params()


def llama_context_default_params() -> llama_context_params:
    return llama_context_params()


# --- the library --------------------------------------------------------------------------------------------------
def llama_backend_init() -> None:
    """Nothing to do: llamapy's engine needs no global initialization."""


def llama_backend_free() -> None:
    """Nothing to do (see llama_backend_init)."""


def llama_numa_init(numa: int) -> None:
    """Accepted for compatibility: llamapy does not place threads or memory by NUMA node."""
    if numa not in range(GGML_NUMA_STRATEGY_COUNT):  # noqa: F821 - defined by _define above
        raise ValueError(f"unknown NUMA strategy {numa!r}")


def llama_supports_mmap() -> bool:
    return True  # use_mmap=True maps the file (the default reads it into memory where it fits)


def llama_supports_mlock() -> bool:
    return False  # use_mlock is accepted but pages are not locked


def llama_supports_gpu_offload() -> bool:
    # a build with a GPU backend and a device it can open
    return gpu_unavailable() is None


def llama_supports_rpc() -> bool:
    return False


def llama_max_devices() -> int:
    return LLAMA_MAX_DEVICES


def llama_time_us() -> int:
    """A monotonic clock in microseconds (llama.cpp's ggml_time_us)."""
    return time.monotonic_ns() // 1000


def llama_print_system_info() -> bytes:
    """llama.cpp's one-line summary, ``CPU : AVX2 = 1 | ... |``, of the SIMD
    levels this build uses here (details: ``llamapy.system_info()``)."""
    info = system_info()
    isas = [isa for isa in info.get("cpu_isas") or [] if str(isa).lower() != "scalar"]
    return ("CPU : " + "".join(f"{str(isa).upper()} = 1 | " for isa in isas)).encode()
