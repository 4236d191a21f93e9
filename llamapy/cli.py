"""Command-line interface: ``python -m llamapy <command>``.

Commands are small modules imported on demand, so ``inspect`` does not pay for
loading the generation code. Each returns a process exit status.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Optional, Sequence

from ._params import random_seed


def _cmd_inspect(args: argparse.Namespace) -> int:
    from .inspect_cmd import run_inspect, run_plan

    if args.plan:
        return run_plan(args.file, n_ctx=args.ctx_size, n_parallel=args.parallel, type_k=args.cache_type_k,
                        type_v=args.cache_type_v, n_gpu_layers=args.n_gpu_layers, mmproj=args.mmproj,
                        n_batch=args.batch_size, n_ubatch=args.ubatch_size, flash_attn=args.flash_attn,
                        n_threads=args.threads or None)
    return run_inspect(args.file, show_tensors=not args.no_tensors)


def _model_path(args: argparse.Namespace) -> str:
    if args.model:
        return args.model
    from .default_model import default_model_path

    return default_model_path()


def _load(args: argparse.Namespace, **extra):
    from .llama import Llama

    kw = dict(n_ctx=args.ctx_size, n_threads=args.threads or None, n_batch=args.batch_size, verbose=False)
    kw.update(extra)
    return Llama(model_path=_model_path(args), **kw)


def _read_prompt(arg: str) -> str:
    """The prompt argument, or standard input for "-" (without the one
    trailing newline that ``echo`` and editors add)."""
    if arg != "-":
        return arg
    text = sys.stdin.read()
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def _cmd_run(args: argparse.Namespace) -> int:
    prompt = _read_prompt(args.prompt)
    llm = _load(args, seed=args.seed if args.seed is not None else random_seed())
    try:
        stream = llm.create_completion(prompt, max_tokens=args.n_predict, temperature=args.temp,
                                       top_k=args.top_k, top_p=args.top_p, min_p=args.min_p,
                                       repeat_penalty=args.repeat_penalty, seed=args.seed, stream=True,
                                       stop=args.stop or None)
        out = sys.stdout
        if args.echo:
            out.write(prompt)
        for chunk in stream:
            out.write(chunk["choices"][0]["text"])
            out.flush()
        out.write("\n")
        out.flush()
    finally:
        llm.close()
    return 0


def _cmd_chat(args: argparse.Namespace) -> int:
    from .chat.cli import run_chat

    return run_chat(args)


def _cmd_batch(args: argparse.Namespace) -> int:
    try:
        from .ray.jobs import run_batch
    except ImportError as e:  # Ray is an extra; its message says which
        print(f"error: {e}", file=sys.stderr)
        return 2
    return run_batch(args)


def _cmd_caption(args: argparse.Namespace) -> int:
    from .caption import run_caption

    return run_caption(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(_model_path(args), n_prompt=args.n_prompt, n_gen=args.n_gen, threads=args.threads,
                     repetitions=args.repetitions, batch_size=args.batch_size, as_json=args.json,
                     depth=args.depth, flash_attn=args.flash_attn, ubatch_size=args.ubatch_size,
                     n_ctx=args.ctx_size, verbose=args.verbose)


def _list_arg(name: str, minimum: int = 0):
    """An argparse type for llama-bench's comma lists and ranges of integers."""
    def parse(text: str):
        from .bench import parse_int_list

        try:
            return parse_int_list(text, name, minimum)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    parse.__name__ = name  # argparse names the type in its messages
    return parse


def _flash_arg(text: str):
    from .bench import parse_flash_list

    try:
        return parse_flash_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _cmd_convert(args: argparse.Namespace) -> int:
    from .convert import convert

    out = convert(args.hf_dir, args.out, args.outtype, log=print if args.verbose else (lambda s: None),
                  tokenizer_pre=args.tokenizer_pre, mmproj=args.mmproj)
    print(f"wrote {out}")
    return 0


def _cmd_quantize(args: argparse.Namespace) -> int:
    from .quantize_gguf import quantize_model

    tensor_types = []
    for spec in args.tensor_type or []:
        pattern, sep, type_name = spec.rpartition("=")
        if not sep or not pattern:
            raise ValueError(f"bad --tensor-type {spec!r}: expected REGEX=TYPE")
        tensor_types.append((pattern, type_name))
    result = quantize_model(args.input, args.output, args.type, n_threads=args.threads, imatrix=args.imatrix,
                            include_weights=args.include_weights or (), exclude_weights=args.exclude_weights or (),
                            output_tensor_type=args.output_tensor_type,
                            token_embedding_type=args.token_embedding_type,
                            leave_output_tensor=args.leave_output_tensor, pure=args.pure,
                            allow_requantize=args.allow_requantize, tensor_types=tensor_types,
                            kv_overrides=args.override_kv or (), keep_split=args.keep_split,
                            progress=not args.no_progress)
    print(f"wrote {', '.join(result.paths)} ({result.file_type}): {result.bytes_in / 2**20:.2f} MiB -> "
          f"{result.bytes_out / 2**20:.2f} MiB")
    return 0


def _cmd_perplexity(args: argparse.Namespace) -> int:
    from .perplexity import run_cli

    return run_cli(args, _model_path(args))


def _cmd_imatrix(args: argparse.Namespace) -> int:
    from .imatrix import run_cli

    return run_cli(args, _model_path(args))


def _cmd_info(args: argparse.Namespace) -> int:
    from .system import system_info

    print(json.dumps(system_info(), indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m llamapy", description="Run GGUF language models in-process.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    sp = sub.add_parser("inspect", help="print a GGUF file's architecture, quantization mix and tensors")
    sp.add_argument("file", help="path to a .gguf file")
    sp.add_argument("--no-tensors", action="store_true", help="omit the tensor table")
    sp.add_argument("--plan", action="store_true",
                    help="print the predicted memory (weights, KV cache, compute buffers) for the options below")
    plan = sp.add_argument_group("memory plan (with --plan; llama-server's flag names)")
    plan.add_argument("-c", "--ctx-size", type=int, default=0, help="context size (default 0: the model's)")
    plan.add_argument("-np", "--parallel", type=int, default=1, help="parallel sequences (slots)")
    plan.add_argument("-ctk", "--cache-type-k", default="f16", help="K cache type")
    plan.add_argument("-ctv", "--cache-type-v", default="f16", help="V cache type")
    plan.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers on the GPU (CPU-only build: none move)")
    plan.add_argument("-b", "--batch-size", type=int, default=None, help="logical batch (default 512)")
    plan.add_argument("-ub", "--ubatch-size", type=int, default=None, help="physical batch (default 512)")
    plan.add_argument("-fa", "--flash-attn", default="auto", choices=("on", "off", "auto"),
                      help="flash attention (default: %(default)s)")
    plan.add_argument("-t", "--threads", type=int, default=0, help="threads (default: physical cores)")
    plan.add_argument("-mm", "--mmproj", default=None, help="multimodal projector GGUF to count too")
    sp.set_defaults(func=_cmd_inspect)

    def model_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-m", "--model", help="GGUF file (default: Gemma 3 270M from the demo extra)")
        sp.add_argument("-c", "--ctx-size", type=int, default=2048,
                        help="context size in tokens; 0: the model's trained length (default: %(default)s)")
        sp.add_argument("-t", "--threads", type=int, default=0, help="threads (default: physical cores)")
        sp.add_argument("-b", "--batch-size", type=int, default=512,
                        help="prompt tokens evaluated per batch (default: %(default)s)")

    def sampling_opts(sp: argparse.ArgumentParser, temp: float) -> None:
        sp.add_argument("--temp", type=float, default=temp, help="temperature; 0: greedy (default: %(default)s)")
        sp.add_argument("--top-k", type=int, default=40, help="top-k; 0: off (default: %(default)s)")
        sp.add_argument("--top-p", type=float, default=0.95, help="top-p; 1: off (default: %(default)s)")
        sp.add_argument("--min-p", type=float, default=0.05, help="min-p; 0: off (default: %(default)s)")
        sp.add_argument("--repeat-penalty", type=float, default=1.0,
                        help="repetition penalty; 1: off (default: %(default)s)")
        sp.add_argument("--seed", type=int, default=None, help="sampling seed (default: a new one per start)")

    sp = sub.add_parser("run", help="complete a prompt, streaming the text")
    sp.add_argument("prompt", help='the prompt text, or "-" to read it from standard input')
    model_opts(sp)
    sp.add_argument("-n", "--n-predict", type=int, default=128,
                    help="tokens to generate; <= 0: until the context is full (default: %(default)s)")
    sampling_opts(sp, temp=0.8)
    sp.add_argument("--stop", action="append", help="stop string (repeatable; default: none)")
    sp.add_argument("--no-echo", dest="echo", action="store_false", help="do not print the prompt first")
    sp.set_defaults(func=_cmd_run)

    sp = sub.add_parser("chat", help="chat with a model in the terminal (history, streaming)")
    model_opts(sp)
    sp.add_argument("--chat-format", help="named chat format (default: the model's template, else a guess)")
    sp.add_argument("-s", "--system", help="system prompt (default: none)")
    sp.add_argument("-n", "--n-predict", type=int, default=512,
                    help="most tokens per answer; <= 0: no limit (default: %(default)s)")
    sampling_opts(sp, temp=0.7)
    sp.add_argument("--mmproj", help="projector GGUF of a vision-language model: enables /image PATH")
    sp.set_defaults(func=_cmd_chat)

    sp = sub.add_parser("caption", help="caption images with a vision-language model (resumable job)")
    sp.add_argument("images", nargs="+", help="image files or folders")
    sp.add_argument("-m", "--model", required=True, help="the language model's GGUF")
    sp.add_argument("--mmproj", required=True, help="the projector GGUF (mmproj)")
    sp.add_argument("-p", "--prompt", default="Describe this image.", help="the instruction (default: %(default)r)")
    sp.add_argument("--jsonl", help="write results here, one JSON object per line; resumed if it exists")
    sp.add_argument("-n", "--n-predict", type=int, default=128, help="most tokens per caption")
    sp.add_argument("-t", "--threads", type=int, default=0, help="threads (default: physical cores)")
    sp.add_argument("-c", "--ctx-size", type=int, default=4096, help="context size (default: %(default)s)")
    sp.add_argument("--temp", type=float, default=0.0, help="temperature (default 0: greedy)")
    sp.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    sp.add_argument("--chat-format", help="multimodal chat format (llava-1-5, llava-1-6, mtmd, ...)")
    sp.set_defaults(func=_cmd_caption)

    sp = sub.add_parser("batch", help="a resumable batch job on Ray Data over Parquet / JSONL files (pip install "
                                      "'llamapy-engine[ray]'); see llamapy/ray/jobs.py")
    sp.add_argument("task", choices=("embed", "complete", "caption", "rerank"),
                    help="embed: text -> embedding; complete: prompt or chat messages -> text; caption: image -> "
                         "caption; rerank: query, document -> score")
    sp.add_argument("-m", "--model", required=True, help="GGUF model file (on every node, at this path)")
    sp.add_argument("--input", required=True, help="a .parquet / .jsonl file, or a folder of them")
    sp.add_argument("--output", required=True, help="output folder (one subfolder per input file, with a _SUCCESS "
                                                    "marker once done; a rerun skips those)")
    sp.add_argument("--column", help="input column (default: text, prompt, image or query, by task)")
    sp.add_argument("--document-column", default="document", help="rerank: the documents' column")
    sp.add_argument("--format", choices=("parquet", "jsonl"), help="output format (default: the input's)")
    sp.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, else a local Ray)")
    sp.add_argument("--actors", type=int, default=1, help="actors, one model and context each (default 1)")
    sp.add_argument("--cpus-per-actor", type=float, default=1.0, help="CPUs per actor = its threads (default 1)")
    sp.add_argument("--batch-size", type=int, help="rows per batch handed to an actor (default: 256 for embed, "
                    "32 for the others)")
    sp.add_argument("-c", "--ctx-size", type=int, default=2048, help="context size (default %(default)s)")
    sp.add_argument("-n", "--n-predict", type=int, default=128, help="complete / caption: most tokens per row")
    sp.add_argument("--temp", type=float, default=0.0, help="temperature (default 0: greedy)")
    sp.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    sp.add_argument("--mmproj", help="caption: the projector GGUF")
    sp.add_argument("-p", "--prompt", default="Describe this image.", help="caption: the instruction")
    sp.add_argument("--normalize", action="store_true", help="embed: L2-normalise the vectors")
    sp.set_defaults(func=_cmd_batch)

    sp = sub.add_parser("bench", help="prompt processing (pp) and generation (tg) speed, like llama-bench",
                        description="Prompt processing (pp) and generation (tg) speed, like llama-bench. "
                                    "-p, -n, -d, -t and -fa take comma lists (and ranges such as 0-16384+4096); "
                                    "every combination is measured.")
    sp.add_argument("-m", "--model", help="GGUF file (default: Gemma 3 270M from the demo extra)")
    sp.add_argument("-p", "--n-prompt", type=_list_arg("n-prompt"), default=[512], metavar="N[,N...]",
                    help="prompt tokens of the pp tests (default 512; 0: no pp test)")
    sp.add_argument("-n", "--n-gen", type=_list_arg("n-gen"), default=[128], metavar="N[,N...]",
                    help="generated tokens of the tg tests (default 128; 0: no tg test)")
    sp.add_argument("-d", "--depth", type=_list_arg("depth"), default=[0], metavar="N[,N...]",
                    help="tokens already in the cache before each test (default 0)")
    sp.add_argument("-fa", "--flash-attn", type=_flash_arg, default=["auto"], metavar="0|1|auto[,...]",
                    help="flash attention setting(s), passed as Llama(flash_attn=False/True/'auto'); default auto, "
                         "as Llama's and llama-bench's (the table shows what auto resolved to)")
    sp.add_argument("-t", "--threads", type=_list_arg("threads"), default=[0], metavar="N[,N...]",
                    help="threads (default 0: physical cores)")
    sp.add_argument("-c", "--ctx-size", type=int, default=0,
                    help="context size (default 0: depth + the largest -p + the largest -n, per test)")
    sp.add_argument("-b", "--batch-size", type=int, default=512, help="n_batch (default 512)")
    sp.add_argument("-ub", "--ubatch-size", type=int, default=None, help="n_ubatch (default: the batch size)")
    sp.add_argument("-r", "--repetitions", type=int, default=3, help="runs per test (default: %(default)s)")
    sp.add_argument("-v", "--verbose", action="store_true", help="report progress on standard error")
    sp.add_argument("--json", action="store_true", help="print the results as JSON")
    sp.set_defaults(func=_cmd_bench)

    sp = sub.add_parser("convert", help="convert a Hugging Face model folder (llama/mistral/mixtral, smollm3, phi3, "
                        "granite(moe/hybrid), olmo2/3, qwen2, qwen3, qwen3moe, qwen3.5(moe), gemma2/3/4, gpt-oss, "
                        "deepseek2/3, glm4moe, lfm2, bert) to GGUF; --mmproj: the image projector of Gemma 3, Qwen2(.5)-VL, SmolVLM")
    sp.add_argument("hf_dir", help="folder with config.json, model.safetensors / pytorch_model.bin, tokenizer files")
    sp.add_argument("out", help="output .gguf path")
    sp.add_argument("--outtype", choices=["f32", "f16", "bf16", "q8_0"], default="f16",
                    help="type of the weight matrices (bert: f32, f16, q8_0)")
    sp.add_argument("--tokenizer-pre", default=None, metavar="NAME",
                    help="a BPE tokenizer's pre-tokenizer name (llama-bpe, qwen2, ...) when its hash is unknown")
    sp.add_argument("--mmproj", action="store_true",
                    help="write the image encoder + projector (mmproj) of a vision-language model instead")
    sp.add_argument("-v", "--verbose", action="store_true", help="list the tensors written")
    sp.set_defaults(func=_cmd_convert)

    sp = sub.add_parser("quantize",
                        help="quantize a GGUF model to a file type (Q4_K_M, Q8_0, ...), like llama-quantize",
                        description="Quantize a GGUF model with llama-quantize's per-tensor choices; the output is "
                                    "byte-identical to llama.cpp's. It is written to OUT.tmp-XXXX and renamed at "
                                    "the end.")
    sp.add_argument("input", help="the model to quantize (F32 / F16 / BF16, or quantized with --allow-requantize)")
    sp.add_argument("output", help="output .gguf path")
    sp.add_argument("type", help="file type: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K_S, Q3_K_M, Q3_K_L, Q4_K_S, "
                                 "Q4_K_M, Q5_K_S, Q5_K_M, Q6_K, IQ4_NL, IQ4_XS, IQ3_S, IQ3_M, MXFP4_MOE, TQ1_0, TQ2_0, "
                                 "F16, BF16, F32; with --imatrix also Q2_K_S, IQ3_XXS, IQ3_XS, IQ2_XXS, IQ2_XS, IQ2_S, "
                                 "IQ2_M, IQ1_S, IQ1_M (or llama.cpp's file type id)")
    sp.add_argument("-t", "--threads", type=int, default=0, help="threads (default 0: every CPU)")
    sp.add_argument("--imatrix", help="importance matrix file (llama-imatrix's GGUF or legacy .dat format)")
    sp.add_argument("--include-weights", action="append", metavar="NAME",
                    help="use the importance matrix only for tensors whose name contains NAME (repeatable)")
    sp.add_argument("--exclude-weights", action="append", metavar="NAME",
                    help="do not use the importance matrix for tensors whose name contains NAME (repeatable)")
    sp.add_argument("--leave-output-tensor", action="store_true", help="leave output.weight unquantized")
    sp.add_argument("--output-tensor-type", help="type of output.weight (e.g. Q8_0)")
    sp.add_argument("--token-embedding-type", help="type of token_embd.weight (e.g. Q8_0)")
    sp.add_argument("--tensor-type", action="append", metavar="REGEX=TYPE",
                    help="type of the tensors whose name matches REGEX (repeatable; the first match wins)")
    sp.add_argument("--pure", action="store_true", help="the file type's default type for every weight (no mix)")
    sp.add_argument("--allow-requantize", action="store_true", help="allow quantizing already quantized tensors")
    sp.add_argument("--override-kv", action="append", metavar="KEY=TYPE:VALUE",
                    help="set a metadata key (TYPE int, float, bool or str; repeatable)")
    sp.add_argument("--keep-split", action="store_true",
                    help="one output per part of a split input: OUT-00001-of-0000N.gguf, ...")
    sp.add_argument("--no-progress", action="store_true", help="no progress line on stderr")
    sp.set_defaults(func=_cmd_quantize)

    sp = sub.add_parser("perplexity", help="perplexity over a text and KL divergence from a base model, "
                                           "as llama-perplexity")
    sp.add_argument("-m", "--model", help="GGUF file (default: Gemma 3 270M from the demo extra)")
    sp.add_argument("-f", "--file", help="the text (UTF-8); not needed with --kl-divergence")
    sp.add_argument("-c", "--ctx-size", type=int, default=None,
                    help="tokens per chunk (default 512; with --kl-divergence: the base file's)")
    sp.add_argument("--chunks", type=int, default=-1, help="at most this many chunks (default -1: all)")
    sp.add_argument("-b", "--batch-size", type=int, default=2048,
                    help="tokens per batch; a multiple of -c puts that many chunks side by side "
                         "(default: %(default)s)")
    sp.add_argument("-t", "--threads", type=int, default=0, help="threads (default: physical cores)")
    sp.add_argument("-ngl", "--n-gpu-layers", type=int, default=0, help="layers on the GPU (-1: all)")
    sp.add_argument("--kl-divergence-base", "--save-all-logits", metavar="FILE",
                    help="save the model's log-probabilities here (llama-perplexity's file); with "
                         "--kl-divergence, read them from here instead")
    sp.add_argument("--kl-divergence", action="store_true",
                    help="KL divergence of this model from the base file's model")
    sp.set_defaults(func=_cmd_perplexity)

    sp = sub.add_parser("imatrix", help="importance matrix over a text for quantization, as llama-imatrix "
                                        "(its GGUF file)")
    sp.add_argument("-m", "--model", help="GGUF file (default: Gemma 3 270M from the demo extra)")
    sp.add_argument("-f", "--file", required=True, help="the text (UTF-8)")
    sp.add_argument("-o", "--output", default="imatrix.gguf", help="output file (default: %(default)s)")
    sp.add_argument("-c", "--ctx-size", type=int, default=512, help="tokens per chunk (default: %(default)s)")
    sp.add_argument("--chunks", type=int, default=-1, help="at most this many chunks (default -1: all)")
    sp.add_argument("-b", "--batch-size", type=int, default=2048,
                    help="tokens per batch; a multiple of -c puts that many chunks side by side "
                         "(default: %(default)s)")
    sp.add_argument("-t", "--threads", type=int, default=0, help="threads (default: physical cores)")
    sp.set_defaults(func=_cmd_imatrix)

    sp = sub.add_parser("info", help="print the build and CPU information (system_info) as JSON")
    sp.set_defaults(func=_cmd_info)
    # "serve" has its own parser (llama-server's flags): main() hands it the rest of the line.
    sub.add_parser("serve", help="OpenAI- and Ollama-compatible HTTP server (pip install '.[server]'); "
                                 "see: llamapy serve --help", add_help=False)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:
        from .server.cli import main as serve_main

        return serve_main(argv[1:], prog="llamapy serve")
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        status = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe is reported here, not by the interpreter at exit
        return status
    except BrokenPipeError:  # before OSError, which it is
        return _reader_gone()
    except KeyboardInterrupt:
        return 130
    except (ValueError, OSError, NotImplementedError, MemoryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _reader_gone() -> int:
    """The output's reader went away (``... | head``): stop quietly, as Unix
    tools do. Standard output is pointed at /dev/null first, so that the
    interpreter's last flush of the buffered text does not report it again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return 128 + 13  # what a shell reports for a writer ended by SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
