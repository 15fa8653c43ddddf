"""Build the preflight report from a GRPOConfig, a tokenizer and datasets (or from a live trainer's RunContext).

Renders a probe conversation (the first conversational training prompt, else :data:`PROBE_CONVERSATION`) through
every path that matters — training rollouts, the trainer's eval dataset, an external eval's tokenizer/kwargs, the
SFT stage's tokenizer — and hands plain values to :mod:`rl_guards.core.preflight`.

::

    report = build_preflight_report(args, tokenizer, train_dataset, eval_dataset, length_probe="probe.json")
    print(report.render())
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rl_guards.chat.template_check import has_chat_template, is_conversational_prompt
from rl_guards.config import PreflightConfig
from rl_guards.core.preflight import (
    LengthProbeNumbers,
    PreflightFinding,
    PreflightReport,
    TemplateFingerprint,
    TrainingChoices,
    build_report,
    check_eval_prompts,
    check_template_paths,
    text_sha,
    visible_whitespace,
)

logger = logging.getLogger("rl_guards")

# Rendered through every path when the training prompts are not conversational.
PROBE_CONVERSATION: list[dict[str, str]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is 2 + 3? Answer with the number."},
]
ROWS_SCANNED = 64  # dataset rows looked at to pick examples (one per task first)


def render_prompt_text(
    tokenizer: Any,
    prompt: Any,
    *,
    chat_template: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """The text TRL's rollout path produces for one prompt: templated if conversational, else the string itself."""
    if not is_conversational_prompt(prompt):
        return str(prompt)
    return tokenizer.apply_chat_template(
        prompt,
        tokenize=False,
        add_generation_prompt=add_generation_prompt,
        chat_template=chat_template,
        **dict(chat_template_kwargs or {}),
    )


def probe_conversation(
    tokenizer: Any, *, chat_template: str | None = None, chat_template_kwargs: Mapping[str, Any] | None = None
) -> list[dict[str, str]]:
    """:data:`PROBE_CONVERSATION`, without its system turn where the template refuses one (Gemma 2's raises
    "System role not supported")."""
    try:
        render_prompt_text(tokenizer, PROBE_CONVERSATION, chat_template=chat_template,
                           chat_template_kwargs=chat_template_kwargs)  # fmt: skip
        return PROBE_CONVERSATION
    except Exception:  # a template error is the template's rule, not ours: probe with the user turn alone
        return [m for m in PROBE_CONVERSATION if m["role"] != "system"]


def _template_text(tokenizer: Any, chat_template: str | None) -> str:
    template = chat_template if chat_template is not None else getattr(tokenizer, "chat_template", None)
    if isinstance(template, Mapping):  # several named templates
        return json.dumps(dict(template), sort_keys=True)
    return template or ""


def template_fingerprint(
    tokenizer: Any,
    conversation: Sequence[Mapping[str, Any]] = PROBE_CONVERSATION,
    *,
    label: str = "train",
    chat_template: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> TemplateFingerprint:
    """Render ``conversation`` with and without the generation prompt and fingerprint the result."""
    kwargs = dict(chat_template_kwargs or {})
    messages = [dict(m) for m in conversation]
    with_prompt = render_prompt_text(tokenizer, messages, chat_template=chat_template, chat_template_kwargs=kwargs)
    without = render_prompt_text(
        tokenizer, messages, chat_template=chat_template, chat_template_kwargs=kwargs, add_generation_prompt=False
    )
    if with_prompt.startswith(without):
        suffix = with_prompt[len(without) :]
    else:  # templates that rewrite earlier turns: show from the first differing character
        common = len(_common_prefix(with_prompt, without))
        suffix = with_prompt[common:]
    ids = tokenizer.apply_chat_template(
        messages,
        tokenize=True,
        add_generation_prompt=True,
        return_dict=True,
        chat_template=chat_template,
        **kwargs,
    )["input_ids"]
    return TemplateFingerprint(
        label=label,
        tokenizer_name=str(getattr(tokenizer, "name_or_path", "") or "(in memory)"),
        tokenizer_class=type(tokenizer).__name__,
        template_sha=text_sha(_template_text(tokenizer, chat_template)),
        chat_template_kwargs=kwargs,
        rendered=with_prompt,
        generation_suffix=suffix,
        ids_sha=text_sha([int(i) for i in ids]),
    )


def _common_prefix(a: str, b: str) -> str:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return a[:n]


def load_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object, loading it from a local directory when given a path."""
    if isinstance(tokenizer, str | Path):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(tokenizer))
    return getattr(tokenizer, "tokenizer", tokenizer)  # processors wrap a tokenizer


def load_length_probe(probe: Any) -> LengthProbeNumbers | None:
    """Length-probe numbers from a JSON file path, a JSON string, a dict, or a probe result object."""
    if probe is None:
        return None
    if isinstance(probe, Path) or (isinstance(probe, str) and not probe.lstrip().startswith("{")):
        probe = json.loads(Path(probe).read_text(encoding="utf-8"))
    return LengthProbeNumbers.from_any(probe)


def sample_rows(dataset: Any, n: int, *, task_column: str = "task") -> list[dict[str, Any]]:
    """Up to ``n`` rows from the first :data:`ROWS_SCANNED`, one per distinct task first."""
    if dataset is None or n <= 0:
        return []
    rows = [dict(row) for row in itertools.islice(iter(dataset), ROWS_SCANNED)]
    picked: list[int] = []
    seen: set[Any] = set()
    for i, row in enumerate(rows):
        task = row.get(task_column)
        if task not in seen:
            seen.add(task)
            picked.append(i)
    picked += [i for i in range(len(rows)) if i not in picked]
    return [rows[i] for i in sorted(picked[:n])]


def _eval_datasets(eval_dataset: Any) -> dict[str, Any]:
    if eval_dataset is None:
        return {}
    if isinstance(eval_dataset, Mapping):
        return {f"eval/{name}": ds for name, ds in eval_dataset.items()}
    return {"eval": eval_dataset}


def build_preflight_report(
    args: Any,
    tokenizer: Any,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    sft_tokenizer: Any = None,
    length_probe: Any = None,
    *,
    config: PreflightConfig | None = None,
    chat_template: str | None = None,
    eval_tokenizer: Any = None,
    eval_chat_template_kwargs: Mapping[str, Any] | None = None,
    render_prompts: Callable[[list[Any]], list[list[int]]] | None = None,
    decode: Callable[[list[int]], str] | None = None,
    world_size: int = 1,
    has_rollout_func: bool = False,
    task_column: str = "task",
) -> PreflightReport:
    """The preflight report for a GRPO run, without a trainer.

    ``args`` is the GRPOConfig; ``sft_tokenizer`` / ``eval_tokenizer`` are tokenizers or local directories;
    ``length_probe`` a dict, JSON string, JSON file or probe result (p90, p99, share_at_cap, cap). Values left
    None fall back to ``config`` (a :class:`~rl_guards.config.PreflightConfig`). ``render_prompts`` and
    ``decode`` render examples through a live trainer's own path (``trainer._tokenize_prompts``).
    """
    config = config or PreflightConfig()
    tokenizer = load_tokenizer(tokenizer)
    choices = TrainingChoices.from_args(args, world_size=world_size)
    kwargs = dict(choices.chat_template_kwargs)
    sft_tokenizer = sft_tokenizer if sft_tokenizer is not None else config.sft_tokenizer
    eval_tokenizer = eval_tokenizer if eval_tokenizer is not None else config.eval_tokenizer
    if eval_chat_template_kwargs is None:
        eval_chat_template_kwargs = config.eval_chat_template_kwargs
    length_probe = length_probe if length_probe is not None else config.length_probe

    def render(prompts: list[Any]) -> list[str]:
        if render_prompts is not None and decode is not None:
            return [decode(ids) for ids in render_prompts(prompts)]
        return [
            render_prompt_text(tokenizer, p, chat_template=chat_template, chat_template_kwargs=kwargs) for p in prompts
        ]

    train_rows = sample_rows(train_dataset, max(config.examples, 1), task_column=task_column)
    train_prompts = [row["prompt"] for row in train_rows if "prompt" in row]
    if not has_chat_template(tokenizer, chat_template):  # plain text: no template path to fingerprint or compare
        return _report_without_template(
            choices, config, train_prompts, _eval_datasets(eval_dataset), render,
            task_column=task_column, length_probe=length_probe, has_rollout_func=has_rollout_func,
        )  # fmt: skip
    probe = next((p for p in train_prompts if is_conversational_prompt(p)), None) or probe_conversation(
        tokenizer, chat_template=chat_template, chat_template_kwargs=kwargs
    )
    train_fp = template_fingerprint(
        tokenizer, probe, label="train", chat_template=chat_template, chat_template_kwargs=kwargs
    )
    fingerprints = [train_fp]
    others: list[TemplateFingerprint] = []
    if chat_template is not None and _template_text(tokenizer, chat_template) != _template_text(tokenizer, None):
        others.append(template_fingerprint(tokenizer, probe, label="tokenizer_template", chat_template_kwargs=kwargs))
    if eval_tokenizer is not None or eval_chat_template_kwargs is not None:
        external = load_tokenizer(eval_tokenizer) if eval_tokenizer is not None else tokenizer
        others.append(
            template_fingerprint(
                external,
                probe,
                label="eval_external",
                chat_template=chat_template if eval_tokenizer is None else None,
                chat_template_kwargs=kwargs if eval_chat_template_kwargs is None else eval_chat_template_kwargs,
            )
        )
    if sft_tokenizer is not None:
        others.append(
            template_fingerprint(load_tokenizer(sft_tokenizer), probe, label="sft", chat_template_kwargs=kwargs)
        )
    fingerprints += others

    findings: list[PreflightFinding] = list(check_template_paths(train_fp, others, blocking_labels=("eval",)))
    train_rendered = render(train_prompts) if train_prompts else []
    train_templated = all(is_conversational_prompt(p) for p in train_prompts) if train_prompts else True
    if train_prompts and not train_templated:
        findings.append(_untemplated_train_finding(train_rendered, train_fp))
    eval_sets = _eval_datasets(eval_dataset)
    examples: list[tuple[str, str]] = [("train", text) for text in train_rendered[: config.examples]]
    if not eval_sets:
        findings += check_eval_prompts(
            train_rendered, [], train_templated=train_templated, eval_templated=True, generation_suffix=""
        )
    for label, dataset in eval_sets.items():
        eval_prompts = _eval_prompts(dataset, task_column)
        eval_rendered = render(eval_prompts) if eval_prompts else []
        for finding in check_eval_prompts(
            train_rendered,
            eval_rendered,
            train_templated=train_templated,
            eval_templated=all(is_conversational_prompt(p) for p in eval_prompts),
            generation_suffix=train_fp.generation_suffix,
        ):
            findings.append(_relabel(finding, label))
        if eval_rendered and config.examples:
            examples.append((label, eval_rendered[0]))

    return _report(choices, config, findings, examples, length_probe, has_rollout_func, fingerprints)


def _report_without_template(
    choices: TrainingChoices,
    config: PreflightConfig,
    train_prompts: list[Any],
    eval_sets: dict[str, Any],
    render: Callable[[list[Any]], list[str]],
    *,
    task_column: str,
    length_probe: Any,
    has_rollout_func: bool,
) -> PreflightReport:
    """The report of a run whose tokenizer has no chat template: plain-text prompts are a supported shape (the
    template checks do not apply; the rest does), conversational ones cannot be rendered (blocking)."""
    findings: list[PreflightFinding] = []
    examples: list[tuple[str, str]] = []
    train_rendered: list[str] = []
    if any(is_conversational_prompt(p) for p in train_prompts):
        findings.append(_no_template_finding("train"))
    else:
        findings.append(
            PreflightFinding(
                "info",
                "template",
                "plain_text_prompts",
                "prompts are plain text and the tokenizer has no chat template: TRL passes them to the model "
                "untemplated, exactly as written. The template checks (template paths across train, eval and SFT, "
                "the generation prompt, its think prefill) do not apply; still checked: eval prompts against the "
                "train prompts, the optimisation choices (learning rate and schedule, loss type, reward scaling, "
                "KL), group size, truncation masking and the length cap.",
                "nothing to do for a base model on raw text; for a chat model, give the tokenizer its chat template "
                "and store the prompts as conversational messages",
            )
        )
        train_rendered = render(train_prompts) if train_prompts else []
        examples += [("train", text) for text in train_rendered[: config.examples]]
    if not eval_sets:
        findings += check_eval_prompts(
            train_rendered, [], train_templated=False, eval_templated=False, generation_suffix=""
        )
    for label, dataset in eval_sets.items():
        eval_prompts = _eval_prompts(dataset, task_column)
        if any(is_conversational_prompt(p) for p in eval_prompts):
            findings.append(_no_template_finding(label))
            continue
        eval_rendered = render(eval_prompts) if eval_prompts else []
        if train_rendered or not train_prompts:
            findings += [
                _relabel(f, label)
                for f in check_eval_prompts(
                    train_rendered, eval_rendered, train_templated=False, eval_templated=False, generation_suffix=""
                )
            ]
        if eval_rendered and config.examples:
            examples.append((label, eval_rendered[0]))
    return _report(choices, config, findings, examples, length_probe, has_rollout_func)


def _report(
    choices: TrainingChoices,
    config: PreflightConfig,
    findings: list[PreflightFinding],
    examples: list[tuple[str, str]],
    length_probe: Any,
    has_rollout_func: bool,
    templates: Sequence[TemplateFingerprint] = (),
) -> PreflightReport:
    """The report of both paths (with a chat template and without): the choices' findings after the template's."""
    return build_report(
        choices,
        template_findings=findings,
        templates=templates,
        examples=examples,
        length_probe=load_length_probe(length_probe),
        blocking_cap_ratio=config.blocking_cap_ratio,
        has_rollout_func=has_rollout_func,
    )


def _eval_prompts(dataset: Any, task_column: str) -> list[Any]:
    """The prompts of up to 8 sampled rows of an eval dataset."""
    return [row["prompt"] for row in sample_rows(dataset, 8, task_column=task_column) if "prompt" in row]


def _no_template_finding(label: str) -> PreflightFinding:
    """Conversational prompts with no chat template: TRL cannot render them (blocking)."""
    when = "training fails at its first generation" if label == "train" else "evaluation fails at its first batch"
    return PreflightFinding(
        "blocking",
        "template",
        "no_chat_template",
        f"{label} prompts are conversational messages but the tokenizer has no chat template: TRL cannot render "
        f"them, and {when}.",
        "give the tokenizer a chat template (tokenizer.chat_template = the model's template) before building the "
        "trainer, or store the prompts as plain strings",
    )


def _relabel(finding: PreflightFinding, label: str) -> PreflightFinding:
    if label == "eval":
        return finding
    return PreflightFinding(
        finding.severity,
        finding.topic,
        finding.code,
        f"{label}: {finding.message}",
        finding.fix,
        finding.detail,
    )


def _prefill_after_suffix(text: str, suffix: str) -> str | None:
    """What follows the last generation prompt in ``text`` when it is only a think-block prefill (an open tag and
    whitespace, e.g. ``<think>\\n``), else None."""
    from rl_guards.core.think_markup import MARKUPS

    at = text.rfind(suffix)
    if not suffix or at < 0:
        return None
    tail = text[at + len(suffix) :]
    rest = tail
    for markup in MARKUPS.values():
        rest = rest.replace(markup.open_tag, "")
    return tail if tail and not rest.strip() else None


def _untemplated_train_finding(train_rendered: list[str], train_fp: TemplateFingerprint) -> PreflightFinding:
    suffix = train_fp.generation_suffix
    prefills = [_prefill_after_suffix(text, suffix) for text in train_rendered]
    if suffix and train_rendered and all(p is not None for p in prefills):
        return PreflightFinding(
            "info",
            "template",
            "train_untemplated",
            "train prompts are pre-rendered strings (TRL does not template strings): they end with the tokenizer's "
            f"generation prompt ({visible_whitespace(suffix, newline_marks=True)}) followed by a think prefill "
            f"({visible_whitespace(str(prefills[0]), newline_marks=True)}), and the model sees exactly that.",
            "make sure eval renders its prompts with the same code; the template guard checks the prefill is not "
            "doubled",
        )
    # Chat markup in a string: the generation prompt's first special-looking token (<|im_start|>, <start_of_turn>).
    found = re.search(r"<\|?[A-Za-z_]{1,30}\|?>|\[[A-Z_]{2,30}\]", suffix)
    marker = found.group(0) if found else (suffix.strip().splitlines()[0] if suffix.strip() else "")
    if (
        marker
        and any(marker in text for text in train_rendered)
        and not all(t.endswith(suffix) for t in train_rendered)
    ):
        return PreflightFinding(
            "warning",
            "template",
            "train_untemplated",
            "train prompts are pre-rendered strings with chat markup, but they do not end with the tokenizer's "
            f"generation prompt ({visible_whitespace(suffix, newline_marks=True)}): the model is asked to continue "
            "something other than a fresh assistant turn.",
            "render string prompts with apply_chat_template(..., add_generation_prompt=True), or store them as "
            "conversational messages so TRL applies the chat template",
        )
    if suffix and all(text.endswith(suffix) for text in train_rendered):
        return PreflightFinding(
            "info",
            "template",
            "train_untemplated",
            "train prompts are pre-rendered strings (TRL does not template strings); they end with the tokenizer's "
            f"generation prompt ({visible_whitespace(suffix, newline_marks=True)}).",
            "make sure eval renders its prompts with the same code",
        )
    # Raw-text prompts are a first-class TRL dataset type (the usual R1-Zero setup on a base model): no evidence of
    # a problem in this run, so a note, not a warning.
    return PreflightFinding(
        "info",
        "template",
        "train_untemplated",
        "train prompts are plain strings that do not end with the tokenizer's generation prompt "
        f"({visible_whitespace(suffix, newline_marks=True) or '-'}): TRL passes strings untemplated, so the model "
        "sees raw text with no chat markup.",
        "if the model is a chat model, store prompts as conversational messages ([{'role': 'user', 'content': "
        "...}]) so TRL applies the chat template; for a base model on raw text, nothing to do",
    )


def build_report_from_context(
    ctx: Any, config: PreflightConfig, *, length_probe: Any = None, task_column: str = "task"
) -> PreflightReport:
    """The report for a live trainer, from the guard's :class:`~rl_guards.guards.base.RunContext`."""
    return build_preflight_report(
        ctx.args,
        ctx.tokenizer,
        ctx.train_dataset,
        ctx.eval_dataset,
        length_probe=length_probe,
        config=config,
        chat_template=ctx.chat_template,
        render_prompts=ctx.render_prompts,
        decode=ctx.decode,
        world_size=int(ctx.world_size or 1),
        has_rollout_func=getattr(ctx, "rollout_func", None) is not None,
        task_column=task_column,
    )


__all__ = [
    "PROBE_CONVERSATION",
    "build_preflight_report",
    "build_report_from_context",
    "is_conversational_prompt",
    "load_length_probe",
    "load_tokenizer",
    "render_prompt_text",
    "sample_rows",
    "template_fingerprint",
]
