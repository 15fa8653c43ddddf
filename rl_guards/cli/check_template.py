"""``rl-guards check-template``: render a chat template as GRPOTrainer does and check its think blocks.

::

    rl-guards check-template qwen3_5_think --prefill '<think>\\n'       # a TRL template name
    rl-guards check-template ./my-model --prompt "Solve 3x=9" --enable_thinking false
    rl-guards check-template deepseek_r1_distill --string_prefill '<think>\\n'

Prints the rendered generation prompt with thinking on, off and as the run asks (``repr``: whitespace visible),
then the verdict. A template that needs a special token the tokenizer lacks (``bos_token`` in llama3 with a Qwen
tokenizer) is rendered with an empty one, and the output says so. Exit codes: 0 checked and fine, 1 a blocking
finding, 2 could not check (the template does not load, or a render failed: nothing was checked there).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rl_guards.cli.help import plain
from rl_guards.core.templates import visible_tail

SHOWN_CHARS = 240  # characters of each render printed


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "check-template",
        help="render a chat template as GRPOTrainer does and check its think blocks",
        description=plain(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", help="tokenizer directory, .jinja file, or a TRL template name (e.g. qwen3)")
    parser.add_argument("--prompt", default=None, help="user message of the checked prompt")
    parser.add_argument(
        "--prefill", default=None, help="assistant prefill message after the prompt, e.g. '<think>\\n' (escapes ok)"
    )
    parser.add_argument(
        "--string-prefill",
        default=None,
        help="text appended to the rendered prompt, as in a dataset of pre-rendered string prompts",
    )
    parser.add_argument("--enable-thinking", choices=["true", "false"], default=None, help="the run's enable_thinking")
    parser.add_argument(
        "--kwargs", default=None, help='more chat_template_kwargs as JSON, e.g. \'{"bos_token": "<s>"}\''
    )
    parser.add_argument("--markup", choices=["think", "gemma4", "gptoss"], default=None, help="default: guessed")
    parser.set_defaults(func=run)


def _unescape(text: str | None) -> str | None:
    if text is None:
        return None
    return text.replace("\\n", "\n").replace("\\t", "\t").replace("\\r", "\r")


def load_tokenizer(source: str) -> Any:
    """What renders the template: a TRL template name, a .jinja file (with Qwen3's special tokens) or a tokenizer
    directory whose chat template is in its files, rendered by jinja2 as transformers renders it (no model, no
    torch: :mod:`rl_guards.chat.jinja_render`); a directory whose template only its tokenizer class knows is loaded
    with transformers' ``AutoTokenizer``."""
    from rl_guards.chat.jinja_render import renderer_for

    renderer = renderer_for(source)
    if renderer is not None:
        return renderer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(Path(source)))


def run(args: argparse.Namespace) -> int:
    from rl_guards.chat.template_check import (
        PROBE_TEXT,
        check_template,
        probe_conversation,
        render_generation_prompts,
    )
    from rl_guards.core.templates import NO_CHAT_TEMPLATE, RENDER_FAILED
    from rl_guards.core.think_markup import MARKUPS

    try:
        tokenizer = load_tokenizer(args.source)
    except Exception as exc:
        print(f"cannot load {args.source!r}: {exc}")
        return 2
    try:
        kwargs: dict[str, Any] = json.loads(args.kwargs) if args.kwargs else {}
    except ValueError as exc:
        print(f"--kwargs is not JSON: {exc}")
        return 2
    if args.enable_thinking is not None:
        kwargs["enable_thinking"] = args.enable_thinking == "true"
    for name in ("bos_token", "eos_token"):  # templates that print them: render what can be rendered
        if name not in kwargs and getattr(tokenizer, name, None) is None and name in (tokenizer.chat_template or ""):
            kwargs[name] = ""
            print(f"note: the tokenizer has no {name}; rendering with {name}='' (pass --kwargs to choose one)")
    markup = MARKUPS[args.markup] if args.markup else None

    report = check_template(tokenizer, chat_template_kwargs=kwargs, markup=markup)
    print(f"template: {args.source}")
    for label, text in report.renders.items():
        print(f"{label}: {visible_tail(text, width=SHOWN_CHARS)}")

    prefill, string_prefill = _unescape(args.prefill), _unescape(args.string_prefill)
    if args.prompt is not None or prefill is not None or string_prefill is not None:
        try:
            shape = probe_conversation(tokenizer, None, kwargs)[0]["content"]
        except ValueError:
            shape = PROBE_TEXT
        text = args.prompt if args.prompt is not None else PROBE_TEXT
        content: Any = text if isinstance(shape, str) else [{"type": "text", "text": text}]
        prompt: Any = [{"role": "user", "content": content}]
        if prefill is not None:
            prompt.append(
                {
                    "role": "assistant",
                    "content": prefill if isinstance(shape, str) else [{"type": "text", "text": prefill}],
                }
            )
        if string_prefill is not None:
            prompt = render_generation_prompts(tokenizer, [prompt], kwargs)[0] + string_prefill
        report = check_template(tokenizer, prompts=[prompt], chat_template_kwargs=kwargs, markup=markup)
        print(f"your prompt: {visible_tail(report.renders.get('dataset row 0', ''), width=SHOWN_CHARS)}")
    print(report.format())
    if NO_CHAT_TEMPLATE in report.kinds():
        print("could not check: the tokenizer has no chat template; exit code 2")
        return 2
    failed = [f for f in report.findings if f.kind == RENDER_FAILED]
    if failed:
        print(f"could not check: {len(failed)} render(s) failed (see above); exit code 2")
        return 2
    return 1 if report.blocking else 0
