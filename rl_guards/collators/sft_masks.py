"""SFT labels, checked on the batches a collator returns: prompts masked, assistant turns trained.

TRL's ``SFTTrainer`` builds ``labels`` while preparing the dataset (``completion_only_loss`` applies the
``completion_mask`` of prompt-completion rows, ``assistant_only_loss`` the ``assistant_masks`` that
``{% generation %}`` markers produce); its ``DataCollatorForLanguageModeling`` only pads them. So a wrapped
collator sees the final labels::

    trainer = SFTTrainer(model=..., args=SFTConfig(...), train_dataset=ds, processing_class=tok)
    trainer.data_collator = MaskCheckingCollator(trainer.data_collator, tok)
    trainer.train()

Assistant turns are located with the tokenizer's own chat template: the assistant header and end-of-turn
markers are derived by rendering probe conversations (:func:`assistant_markers`), never hard-coded.

Rules (``kind``): ``prompt_trained`` (a system/user/tool token has a label), ``assistant_untrained`` (an assistant
token, or its end-of-turn token, has ``-100``), ``nothing_trained`` (a whole batch without labels),
``label_mismatch`` (a trained label differs from the input id at its position: labels shifted by hand).
The assistant header and the whitespace after an end-of-turn token may go either way.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rl_guards.collators.trainer_metrics import CollatorMetrics
from rl_guards.config import MaskingConfig
from rl_guards.core import masks as M
from rl_guards.errors import ConfigError, MaskingError
from rl_guards.guards.base import GuardSession

logger = logging.getLogger("rl_guards")

LABEL_MISMATCH = M.LABEL_MISMATCH
CHECKED_KEY = "rl_guards/masking/checked_batches"  # a running count
EXPECTS = ("auto", "assistant_only", "completion_only")
PROBE_USER = "Probe question seven"  # user turn of the probe conversations rendered to derive markers
PROBE_ASSISTANT = "Probe answer nine"  # assistant turn of those probes

FIXES: dict[str, tuple[str, str]] = {
    M.PROMPT_TRAINED: (
        "train on prompt tokens (system / user / tool turns carry labels)",
        "for a `messages` dataset set assistant_only_loss=True in SFTConfig and use a template with "
        "{% generation %} markers (trl.chat_template_utils.get_training_chat_template(tokenizer) returns one for "
        "known templates); for a prompt-completion dataset leave completion_only_loss at its default (None) or "
        "set it to True.",
    ),
    M.ASSISTANT_UNTRAINED: (
        "leave assistant tokens untrained (label -100 inside an assistant turn)",
        "every assistant token up to and including its end-of-turn token must carry a label, or the model never "
        "learns to stop: put the end-of-turn token inside {% generation %}...{% endgeneration %} (TRL's "
        "*_training.jinja templates do; trl.chat_template_utils.get_training_chat_template).",
    ),
    M.NOTHING_TRAINED: (
        "have no label at all",
        "the batch's loss is empty. With assistant_only_loss the template's {% generation %} markers may be "
        "missing (assistant_masks all 0); with a short max_length truncation may cut every completion.",
    ),
    LABEL_MISMATCH: (
        "have trained labels that differ from input_ids at the same position",
        "causal LM models shift labels themselves; keep labels aligned with input_ids (-100 where masked).",
    ),
}


def render_chat(
    tokenizer: Any, messages: list[dict[str, str]], gen: bool, chat_template: str | None, kwargs: Mapping[str, Any]
) -> str:
    """``messages`` rendered as text with the tokenizer's (or the given) chat template."""
    return str(
        tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=gen, chat_template=chat_template, **kwargs
        )
    )


def _encode(tokenizer: Any, text: str) -> list[int]:
    return [int(t) for t in tokenizer(text, add_special_tokens=False)["input_ids"]]


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> list[int]:
    out: list[int] = []
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        out.append(x)
    return out


def assistant_markers(
    tokenizer: Any, chat_template: str | None = None, chat_template_kwargs: Mapping[str, Any] | None = None
) -> M.AssistantMarkers:
    """Assistant header, end-of-turn and trailer ids, from rendering probe conversations with the template.

    Rendered: ``[user]`` with and without the generation prompt, ``[user, assistant]`` and
    ``[user, assistant, user]``. The header is what the generation prompt and the rendered assistant turns share
    after the user's end of turn (``<|im_start|>assistant↵``); the end marker what every assistant turn is
    followed by, up to whitespace (``<|im_end|>``; the whitespace is the trailer). Compared as token ids, then
    checked to occur in the tokenized probes. Raises ValueError when the template cannot say.
    """
    kwargs = dict(chat_template_kwargs or {})
    user = [{"role": "user", "content": PROBE_USER}]
    turn = [*user, {"role": "assistant", "content": PROBE_ASSISTANT}]
    follow = [*turn, {"role": "user", "content": PROBE_USER + " again"}]
    try:
        alone = render_chat(tokenizer, user, False, chat_template, kwargs)
        prompted = render_chat(tokenizer, user, True, chat_template, kwargs)
        full = render_chat(tokenizer, turn, False, chat_template, kwargs)
        followed = render_chat(tokenizer, follow, False, chat_template, kwargs)
    except Exception as exc:
        raise ValueError(f"the chat template could not render a probe conversation: {exc}") from exc
    texts = (alone, prompted, full, followed)
    if not all(PROBE_USER in t for t in texts) or PROBE_ASSISTANT not in full or PROBE_ASSISTANT not in followed:
        raise ValueError("the chat template drops message contents from a probe conversation")

    def after(text: str, probe: str) -> str:
        return text[text.index(probe) + len(probe) :]

    def blank(token: int) -> bool:
        return tokenizer.decode([token]).strip() == ""

    alone_rest = _encode(tokenizer, after(alone, PROBE_USER))
    prompted_rest = _encode(tokenizer, after(prompted, PROBE_USER))
    user_end = _common_prefix(alone_rest, prompted_rest)
    gen_header = prompted_rest[len(user_end) :]
    header = gen_header
    for text in (full, followed):  # the last turn may differ from earlier ones (think blocks)
        turn_head = after(text, PROBE_USER)
        turn_head_ids = _encode(tokenizer, turn_head[: turn_head.index(PROBE_ASSISTANT)])
        if turn_head_ids[: len(user_end)] != user_end:
            raise ValueError("the user turn ends differently before an assistant turn")
        header = _common_prefix(header, turn_head_ids[len(user_end) :])
    last_end = _encode(tokenizer, after(full, PROBE_ASSISTANT))
    mid = after(followed, PROBE_ASSISTANT)
    mid_end = _encode(tokenizer, mid[: mid.index(PROBE_USER)])
    end = _common_prefix(last_end, mid_end)
    closing = [t for t in last_end[len(end) :] if not blank(t)] if last_end[: len(end)] == end else []
    trailer: list[int] = []
    while end and blank(end[-1]):
        trailer.insert(0, end.pop())
    if not end:  # the template writes no end-of-turn marker: the model stops with eos
        eos = getattr(tokenizer, "eos_token_id", None)
        if eos is None:
            raise ValueError("the template writes nothing after an assistant turn and the tokenizer has no eos")
        end = [int(eos)]
    if not header or all(blank(t) for t in header):
        raise ValueError(f"no assistant header found (generation prompt {tokenizer.decode(gen_header)!r})")
    for text in (full, followed):
        ids = _encode(tokenizer, text)
        # A whitespace token at the header's end may merge with the content in context ("\n" + "\n" -> "\n\n").
        while len(header) > 1 and blank(header[-1]) and M.find_subsequence(ids, header) < 0:
            header.pop()
        h = M.find_subsequence(ids, header)
        if h < 0 or M.find_subsequence(ids, end, h + len(header)) < 0:
            raise ValueError(
                f"assistant markers {tokenizer.decode(header)!r} / {tokenizer.decode(end)!r} are not whole tokens "
                "in the tokenized probe"
            )
    return M.AssistantMarkers(tuple(header), tuple(end), tuple(trailer), tuple(closing))


def _sequences(batch: Mapping[str, Any]) -> list[tuple[int, int, int]]:
    """``(row, start, stop)`` of each sequence's real tokens: one per row (left or right padding, from
    ``attention_mask``), or one per packed sequence (padding-free batches, from ``position_ids``)."""
    ids = batch["input_ids"]
    n_rows, width = int(ids.shape[0]), int(ids.shape[1])
    if batch.get("attention_mask") is not None:
        out = []
        for r, row in enumerate(batch["attention_mask"].tolist()):
            real = [j for j, m in enumerate(row) if m]
            if real:
                out.append((r, real[0], real[-1] + 1))
        return out
    if batch.get("position_ids") is not None:
        out = []
        for r, row in enumerate(batch["position_ids"].tolist()):
            starts = [j for j, p in enumerate(row) if p == 0] or [0]
            # Trailing padding has position 0 too; a "sequence" of one token at the end is that padding.
            bounds = [*starts, width]
            out += [(r, a, b) for a, b in itertools.pairwise(bounds) if b - a > 1]
        return out
    return [(r, 0, width) for r in range(n_rows)]


class MaskCheckingCollator:
    """Wraps a collator and checks the labels of one batch in ``check_every`` (``MaskingError`` in raise mode).

    ``expect``: ``"assistant_only"`` (conversations: only assistant turns train), ``"completion_only"``
    (prompt-completion rows: only the completion trains), or ``"auto"`` (conversations: nothing outside assistant
    turns trains and the last turn does; other rows: a masked prompt, then the completion). ``mode``: ``raise``,
    ``warn`` (warn once per rule, count), ``log`` (count only). Findings and counts are in ``self.session``; the
    metrics (``rl_guards/masking/checked_batches``, ``.../violating_rows``, ``.../violations``) go to the log of the
    trainer that calls it (:mod:`rl_guards.collators.trainer_metrics`).
    """

    def __init__(
        self,
        collator: Callable[[list[Any]], Mapping[str, Any]],
        tokenizer: Any,
        *,
        mode: str = "raise",
        expect: str = "auto",
        check_every: int = 1,
        chat_template: str | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        max_rows_shown: int = 2,
    ) -> None:
        if expect not in EXPECTS:
            raise ConfigError(f"expect must be one of {list(EXPECTS)}, got {expect!r}")
        self.config = MaskingConfig(mode=mode, check_every=check_every, max_rows_shown=max_rows_shown)  # type: ignore[arg-type]
        self.config.validate("MaskCheckingCollator")
        self.collator = collator
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.expect = expect
        self.session = GuardSession()
        self.metrics = CollatorMetrics()  # per-batch metrics -> the calling trainer's log (trainer_metrics)
        self.calls = 0
        self.checked = 0
        self.markers: M.AssistantMarkers | None = None
        try:
            self.markers = assistant_markers(self.tokenizer, chat_template, chat_template_kwargs)
        except (ValueError, TypeError) as exc:
            if expect == "assistant_only":
                raise ConfigError(
                    f"MaskCheckingCollator(expect='assistant_only') cannot locate assistant turns: {exc}. "
                    "Pass the chat template the trainer renders with (chat_template=...), or expect='completion_only'."
                ) from exc
            logger.debug("rl_guards: no assistant markers (%s); checking prompt/completion labels only", exc)

    def __getattr__(self, name: str) -> Any:
        # Attributes of the wrapped collator (pad_token_id, padding_free, ...) stay reachable.
        if name == "collator":
            raise AttributeError(name)
        return getattr(self.collator, name)

    def __call__(self, examples: list[Any]) -> Mapping[str, Any]:
        batch = self.collator(examples)
        self.calls += 1
        if (self.calls - 1) % self.config.check_every == 0:
            report, positions = self.check(batch)
            try:
                self._enforce(report, positions, batch)
            finally:  # into the calling trainer's log; nothing piles up in the session
                self.metrics.deliver(self.session.pop_metrics(), cumulative=(CHECKED_KEY,))
        return batch

    # ----- the check ---------------------------------------------------------------------------------------
    def check(self, batch: Mapping[str, Any]) -> tuple[M.MaskReport, dict[tuple[int, int, int], dict[str, list[int]]]]:
        """Check one collated batch; returns the report and, per sequence ``(row, start, stop)``, bad positions."""
        if "labels" not in batch or "input_ids" not in batch:
            raise MaskingError(
                f"[rl_guards/masking] the collator returned no labels/input_ids (keys: {sorted(batch)})",
                guard="masking",
            )
        self.checked += 1
        ids_rows = batch["input_ids"].tolist()
        label_rows = batch["labels"].tolist()
        seqs = _sequences(batch)
        positions: dict[tuple[int, int, int], dict[str, list[int]]] = {}
        trained_total = 0
        for seq in seqs:
            r, a, b = seq
            ids, labels = ids_rows[r][a:b], label_rows[r][a:b]
            trained_total += sum(1 for x in labels if x != M.IGNORE_INDEX)
            spans = M.find_assistant_spans(ids, self.markers) if self.markers is not None else []
            expect = self.expect
            if expect == "assistant_only" and not spans:
                expect = "auto"  # a row cut before its first assistant turn: only its prompt can be checked
            # Packed sequences lose their first label to the collator (position_ids == 0), a prompt token anyway.
            found = M.check_label_row(labels, spans, len(ids), expect=expect)
            mismatch = [j for j, (t, x) in enumerate(zip(ids, labels, strict=True)) if x != M.IGNORE_INDEX and x != t]
            if mismatch:
                found[LABEL_MISMATCH] = mismatch
            if found:
                positions[seq] = found
        report = M.MaskReport(num_rows=len(seqs))
        for kinds in positions.values():
            for kind in kinds:
                report.counts[kind] = report.counts.get(kind, 0) + 1
        for seq, kinds in positions.items():
            for kind in kinds:
                report.rows.setdefault(kind, []).append(seq[0])
        if trained_total == 0 and seqs:
            report.counts[M.NOTHING_TRAINED] = len(seqs)
            report.rows[M.NOTHING_TRAINED] = sorted({s[0] for s in seqs})
            for seq in seqs:
                positions.setdefault(seq, {})[M.NOTHING_TRAINED] = []
        report.violating_rows = len(positions)
        return report, positions

    def _enforce(
        self,
        report: M.MaskReport,
        positions: dict[tuple[int, int, int], dict[str, list[int]]],
        batch: Mapping[str, Any],
    ) -> None:
        self.session.add_metric(CHECKED_KEY, float(self.checked))
        self.session.add_metric("rl_guards/masking/violating_rows", float(report.violating_rows))
        if report.ok:
            return
        reporter = self.session.reporter("masking", self.config, None)
        kinds = sorted(report.counts, key=M.SFT_KINDS.index)
        for kind in kinds:
            reporter.violation(kind, self._message(kind, report, positions, batch), MaskingError)

    # ----- the message -------------------------------------------------------------------------------------
    def _message(
        self,
        kind: str,
        report: M.MaskReport,
        positions: dict[tuple[int, int, int], dict[str, list[int]]],
        batch: Mapping[str, Any],
    ) -> str:
        what, fix = FIXES[kind]
        lines = [f"{kind}: {report.counts[kind]} of {report.num_rows} sequences {what} (expect={self.expect})."]
        others = [k for k in report.counts if k != kind]
        if others:
            lines[0] += " Also: " + ", ".join(f"{k} ({report.counts[k]})" for k in others) + "."
        shown = [seq for seq, kinds in positions.items() if kind in kinds][: self.config.max_rows_shown]
        if shown:
            lines.append(M.LEGEND)
        packed = len({seq[0] for seq in positions}) < len(positions) or any(seq[1] for seq in shown)
        for r, a, b in shown:
            ids = batch["input_ids"][r].tolist()[a:b]
            labels = batch["labels"][r].tolist()[a:b]
            bad = set(positions[(r, a, b)][kind])
            pieces = self._pieces(ids)
            trained = [x != M.IGNORE_INDEX for x in labels]
            where = f"row {r} [{a}:{b}]" if packed else f"row {r}"
            lines.append(f"{where}: " + M.render_spans(pieces, trained, [j in bad for j in range(len(ids))]))
        lines.append(f"Fix: {fix}")
        return "\n".join(lines)

    def _pieces(self, ids: Sequence[int]) -> list[str]:
        tok = self.tokenizer
        if tok is None:
            return [f"[{t}]" for t in ids]
        return M.token_pieces(lambda x: tok.decode(x, skip_special_tokens=False), list(ids))


__all__ = ["LABEL_MISMATCH", "MaskCheckingCollator", "assistant_markers"]
