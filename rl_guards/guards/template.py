"""Double think opens, prefills the template already makes, and ignored thinking flags, checked before step 0."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from rl_guards.config import TemplateConfig
from rl_guards.core.templates import (
    NO_CHAT_TEMPLATE,
    THINKING_FLAG_IGNORED,
    RenderedPrompt,
    TemplateFinding,
    TemplateReport,
)
from rl_guards.core.think_markup import THINK, ThinkMarkup
from rl_guards.errors import TemplateError
from rl_guards.guards.base import Guard, Reporter

logger = logging.getLogger("rl_guards")


class DoubleThinkGuard(Guard):
    """Renders the first ``template.num_prompts`` dataset prompts through the trainer's own ``_tokenize_prompts``
    and a probe conversation with thinking on and off, then checks the think blocks of the generation prompts.

    Violations (:class:`~rl_guards.errors.TemplateError`), messages show the rendered text with whitespace visible:

    ================================  ============================================================================
    kind                              meaning
    ================================  ============================================================================
    ``double_open``                   the prompt ends with two unclosed ``<think>`` (``<think>\\n<think>\\n``)
    ``prefill_duplicates_template``   an unclosed ``<think>`` in an earlier, finished turn: an assistant prefill
                                      message TRL closed as its own turn (it never passes continue_final_message)
    ``thinking_flag_ignored``         ``enable_thinking=False`` still leaves the block open, the trainer's
                                      template drops the thinking switch the model's own template has, or the
                                      dataset's per-row thinking column is not honoured (one global mode)
    ``render_failed``                 dataset prompts do not render
    ``renderer_mismatch``             (a run whose renderer builds prompts: tinker-cookbook) the renderer's
                                      generation prompt treats the think block unlike the tokenizer's template
    ``renderer_parse``                the renderer's ``parse_response`` leaves think tags in the answer text, or
                                      drops or doubles the reasoning, on a well-formed response in its mode
    ================================  ============================================================================

    Info only: ``flag_no_effect`` (template has no switch), ``row_prefill`` (rows open a block the template does not).
    A note (said once, not a finding): ``no_chat_template``, plain-text prompts with no template to check (the
    dataset prompts are still scanned for the think blocks they open).

    ===================================  ===============================================================
    key                                  value
    ===================================  ===============================================================
    ``rl_guards/template/findings``      blocking findings at train start
    ===================================  ===============================================================

    :meth:`prompt_opened` tells other guards and the stray-think penalty whether generation starts inside a block.
    """

    name: ClassVar[str] = "template"
    config_field: ClassVar[str] = "template"

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.config: TemplateConfig
        self.report: TemplateReport | None = None

    def _markup(self) -> ThinkMarkup | None:
        """The configured think tags if they differ from the default; else guessed from the template."""
        tags = getattr(self.guards_config, "think_tags", None)
        if tags is None or (tags.open_tag, tags.close_tag) == (THINK.open_tag, THINK.close_tag):
            return None
        return ThinkMarkup(open_tag=tags.open_tag, close_tag=tags.close_tag, name="configured")

    def _dataset_prompts(self) -> list[Any]:
        if self.ctx.rendered_prompts is not None:  # already rendered by the run: their ids stand for themselves
            return list(self.ctx.rendered_prompts[: self.config.num_prompts])
        ds = self.ctx.train_dataset
        if ds is None:
            return []
        names = getattr(ds, "column_names", None)
        if names is not None and "prompt" not in names:
            return []
        n = min(self.config.num_prompts, len(ds)) if hasattr(ds, "__len__") else self.config.num_prompts
        prompts = []
        for i, row in enumerate(ds):
            if i >= n:
                break
            prompts.append(row["prompt"])
        return prompts

    def _render_rows(self, prompts: list[Any]) -> list[RenderedPrompt]:
        from rl_guards.chat.template_check import render_generation_prompts, render_histories

        ctx = self.ctx
        if ctx.rendered_prompts is not None and ctx.decode is not None:
            return [RenderedPrompt(ctx.decode(ids), None, f"rendered prompt {i}") for i, ids in enumerate(prompts)]
        if ctx.render_prompts is not None and ctx.decode is not None:
            texts = [ctx.decode(ids) for ids in ctx.render_prompts(prompts)]
        else:
            texts = render_generation_prompts(ctx.tokenizer, prompts, ctx.chat_template_kwargs, ctx.chat_template)
        histories = render_histories(ctx.tokenizer, prompts, ctx.chat_template_kwargs, ctx.chat_template)
        return [RenderedPrompt(t, h, f"dataset row {i}") for i, (t, h) in enumerate(zip(texts, histories, strict=True))]

    def _thinking_column(self) -> tuple[str, list[bool]]:
        """The dataset's per-row thinking column (name from ``think_tags.thinking_column``) and its set values."""
        tags = getattr(self.guards_config, "think_tags", None)
        column = getattr(tags, "thinking_column", "enable_thinking")
        ds = self.ctx.train_dataset
        if ds is None or column not in (getattr(ds, "column_names", None) or []):
            return column, []
        return column, [bool(v) for v in ds[column] if v is not None]

    def _per_row(self) -> bool:
        return self.ctx.per_row_thinking_column is not None

    def _check(self) -> TemplateReport:
        """Render and analyse; no reporting."""
        from rl_guards.chat.template_check import check_template

        prompts = self._dataset_prompts()
        rows = self._render_rows(prompts) if prompts else []
        _, flags = self._thinking_column()
        mismatch = []
        if self.ctx.renderer is not None:  # prompts render through the run's renderer: check it against the template
            from rl_guards.chat.renderer_check import compare_renderer, parse_round_trip
            from rl_guards.core.think_markup import THINK

            markup = self._markup() or THINK
            probe, mismatch = compare_renderer(self.ctx.renderer, self.ctx.tokenizer, markup)
            mismatch += parse_round_trip(self.ctx.renderer, self.ctx.tokenizer, probe, markup)
            rows = ([probe] if probe is not None else []) + rows
        report = check_template(
            self.ctx.tokenizer,
            chat_template_kwargs=self.ctx.chat_template_kwargs,
            chat_template=self.ctx.chat_template,
            markup=self._markup(),
            rendered_rows=rows,
            mixed=self._per_row() and len(set(flags)) > 1,
        )
        report.findings += mismatch
        return report

    def _column_ignored(self, report: TemplateReport) -> str | None:
        """A message when the dataset asks for a mode per row that the trainer's one global mode contradicts."""
        column, flags = self._thinking_column()
        if not flags or self._per_row() or not report.has_switch:
            return None
        requested = report.requested_thinking
        run_mode = (
            requested
            if requested is not None
            else report.renders.get("run probe") == report.renders.get("thinking probe")
        )
        wrong = sum(f != run_mode for f in flags)
        if not wrong:
            return None
        return (
            f"{wrong}/{len(flags)} rows have {column}={not run_mode}, but GRPOTrainer renders every prompt with one "
            f"global chat_template_kwargs (enable_thinking={run_mode}): those rows are rendered in the wrong mode "
            "and their rewards judge the wrong thing. Fix: set think_tags.per_row_thinking: true in the guards config "
            "(or call rl_guards.trl.thinking_mix.honour_thinking_column(trainer) before trainer.train()), or drop "
            "the column"
        )

    def on_train_begin(self, report: Reporter) -> None:
        if self.ctx.tokenizer is None:
            report.note("no_tokenizer", "no tokenizer in the run context: template not checked")
            return
        self.report = self._check()
        ignored = self._column_ignored(self.report)
        if ignored is not None:
            self.report.findings.append(TemplateFinding(THINKING_FLAG_IGNORED, "blocking", ignored, "dataset column"))
        errors = self.report.errors
        report.metric("findings", float(len(errors)))
        for f in self.report.findings:
            if f.kind == NO_CHAT_TEMPLATE:  # a supported shape, not a problem of this run: said once
                report.note(f.kind, f.message)
            elif f.severity != "blocking":
                report.info(f.kind, f"{f.where}: {f.message}")
        for i, f in enumerate(errors):
            others = [e.kind for e in errors[i + 1 :]]
            also = f"\n(also blocking: {', '.join(others)})" if others and self.config.mode == "raise" else ""
            report.violation(f.kind, f"{f.where}: {f.message}{also}", TemplateError)

    def prompt_opened(self, thinking: bool) -> bool:
        """Does the generation prompt leave a think block open in that mode (False when unknown)."""
        if self.report is None and self.ctx.tokenizer is not None:
            try:
                self.report = self._check()
            except Exception as exc:  # unknown is not an error
                logger.warning("rl_guards/template: could not render the template: %s", exc)
                return False
        return self.report.prompt_opened(thinking) if self.report is not None else False
