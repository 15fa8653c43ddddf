"""Think-markup scanner throughput vs TRL's ``think_format_reward`` on the same text (one core; prints, no asserts).

Run: ``.venv/bin/python benchmarks/bench_scanner.py [megabytes] [max_chars]``

First line: ``scanner GB/s: X (TRL think_format_reward: Y)``: :func:`rl_guards.core.think_markup.scan` and TRL's
regex reward over the same corpus, each the best of 5 runs on one core (``_timing.best_seconds``). Then tables:
every entry point, subsets by string width and content, and adversarial single texts (linearity).

**GB/s counts UTF-8 bytes** of the text (``encode("utf-8", "surrogatepass")``) per second of wall time. The
character rate (``Gchar/s``) is printed next to it: the corpus has ~1.05 UTF-8 bytes a character, so the two
differ by ~5 %. CPython stores a string with 1, 2 or 4 bytes a character (ASCII/Latin-1, BMP such as CJK, with an
emoji): the scan reads that memory, so the width table shows each kind separately.

Corpus (seeded): completions of 1,000 to ``max_chars`` (default 8,000) characters.

* Script: 60 % English, 15 % with Latin-1 accents (1 byte a char in memory, not ASCII), 15 % mixed with CJK
  (2 bytes a char), 10 % with one to three emoji (4 bytes a char). Prose is reasoning-like ("think", "thinking",
  "Let me think", numbers) with an inequality such as ``x < 3`` about every 300 words (a ``<`` that is not a tag
  every ~1,500 characters).
* Markup: 45 % one well-formed block + prose answer, 15 % plain answers, 15 % well-formed block + a C-like code
  answer (a ``<`` every ~18 characters: ``a[i] < b``, ``<<``, ``<tag>``), 8 % unclosed blocks (truncated), 6 %
  stray close, 6 % nested open + a near miss (``<THINK>``), 4 % two blocks + a tag cut by the end (``</thi``),
  1 % lone surrogates in a well-formed block.

The ``dense '<'`` row is the previous version of this corpus: ``a<b``, ``if (i < n)``, ``</div>``, ``<br>`` as
frequent words, a ``<`` every ~40 characters of prose. Every ``<`` that is not a tag costs a step (in C, or one
Python step for the first few), so such text scans slower; it is reported, not part of the headline corpus.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from typing import Any

from _timing import best_seconds
from trl.rewards import think_format_reward

from rl_guards.core.think_markup import THINK, scan, strip_thinking

ENGLISH = (
    "the of and to in is that for it as was with be by on not this are or from at which we so then if "
    "answer step first second next sum total value number because therefore check again wait let me "
    "think thinking I think hmm okay so 12 3.5 x=3 2+2=4 n^2 (a+b)"
).split()
LATIN1 = ["café", "naïve", "über", "señor", "façade", "déjà", "voilà", "Müller", "½", "±"]
CJK = ["思考", "答案", "首先", "所以", "我们", "计算", "检查", "因此", "结果", "。"]
EMOJI = ["🤔", "✅", "🙂", "🚀"]
INEQUALITIES = ["x < 3", "0 < k", "a <= b", "n < 10^5", "|x| < 1"]
DENSE_WORDS = ["a<b", "if (i < n)", "</div>", "<br>", "think", "thinking"]


def prose(rng: random.Random, chars: int, script: str, dense: bool) -> str:
    """Reasoning-like words in one script; an inequality about every 300 words."""
    extra = {"latin1": LATIN1, "cjk": CJK, "emoji": []}.get(script, [])
    out: list[str] = []
    size = 0
    while size < chars:
        r = rng.random()
        if dense and r < 0.12:
            w = rng.choice(DENSE_WORDS)
        elif r < 1 / 300:
            w = rng.choice(INEQUALITIES)
        elif extra and r < 0.25:
            w = rng.choice(extra)
        else:
            w = rng.choice(ENGLISH)
        out.append(w)
        size += len(w) + 1
    if script == "emoji":  # a few emoji make the whole string 4 bytes a character
        for _ in range(rng.randint(1, 3)):
            out.insert(rng.randrange(len(out) + 1), rng.choice(EMOJI))
    return " ".join(out)


def code(rng: random.Random, chars: int) -> str:
    lines = []
    size = 0
    while size < chars:
        line = f"    if (a[{rng.randrange(99)}] < b && c <= d) {{ x = y << 2; }} // <tag> {rng.random():.3f}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def completion(rng: random.Random, chars: int, dense: bool = False) -> str:
    r = rng.random()
    script = "ascii" if r < 0.60 else "latin1" if r < 0.75 else "cjk" if r < 0.90 else "emoji"
    body = prose(rng, chars, script, dense)
    half = len(body) // 2
    kind = rng.random()
    if kind < 0.45:
        return f"<think>\n{body[:half]}\n</think>\n\n{body[half:]}"
    if kind < 0.60:
        return body
    if kind < 0.75:
        return f"<think>\n{body[:half]}\n</think>\n\n```c\n{code(rng, half)}\n```"
    if kind < 0.83:
        return f"<think>\n{body}"  # unclosed (truncated)
    if kind < 0.89:
        return f"{body[:half]}</think>{body[half:]}"  # stray close
    if kind < 0.95:
        return f"<think><think>{body[:half]}</think>{body[half:]}<THINK>"  # nested + near miss
    if kind < 0.99:
        return f"<think>{body[:half]}</think>{body[half:]}<think>more</think>end </thi"
    return f"<think>\ud800{body[:half]}</think>\udfff{body[half:]}"  # lone surrogates


def make_corpus(megabytes: float, max_chars: int, seed: int = 0, dense: bool = False) -> list[str]:
    rng = random.Random(seed)
    texts: list[str] = []
    total = 0
    while total < megabytes * 1e6:
        text = completion(rng, rng.randint(1000, max_chars), dense)
        texts.append(text)
        total += len(text)
    return texts


def utf8_bytes(texts: list[str]) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


def width(text: str) -> int:
    """CPython's bytes per character for this string (1, 2 or 4)."""
    top = max(text, default="\0")
    return 1 if top <= "\xff" else 2 if top <= "\uffff" else 4


def only_tags_lt(text: str) -> bool:
    """Every ``<`` in the text starts an exact ``<think>``/``</think>``."""
    return text.count("<") == text.count("<think>") + text.count("</think>")


def rates(texts: list[str], fn: Callable[[], Any], repeats: int = 3) -> tuple[float, float]:
    """(GB/s of UTF-8, G characters/s) of ``fn`` over ``texts``, best of ``repeats``."""
    seconds = best_seconds(fn, repeats)
    return utf8_bytes(texts) / seconds / 1e9, sum(map(len, texts)) / seconds / 1e9


def scan_all(texts: list[str], **kwargs: Any) -> Callable[[], Any]:
    """Scan every text, keeping the verdicts; ``scan(t, THINK)`` as a caller writes it when there are no options.

    (``scan(t, THINK, **{})`` would time Python's keyword-unpacking call, ~0.1 us a call, as scanner work.)
    """
    if not kwargs:
        return lambda: [scan(t, THINK) for t in texts]
    return lambda: [scan(t, THINK, **kwargs) for t in texts]


def trl_all(texts: list[str]) -> Callable[[], Any]:
    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    return lambda: think_format_reward(conversational)


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 50.0
    max_chars = int(sys.argv[2]) if len(sys.argv) > 2 else 8000
    texts = make_corpus(megabytes, max_chars)
    size = utf8_bytes(texts)
    chars = sum(map(len, texts))
    print(
        f"corpus: {len(texts)} completions of 1000-{max_chars} chars, {size / 1e6:.1f} MB UTF-8, "
        f"{chars / 1e6:.1f} M chars ({size / chars:.2f} bytes/char)"
    )
    scan_gbs, scan_gcs = rates(texts, scan_all(texts), 5)
    trl_gbs, trl_gcs = rates(texts, trl_all(texts), 5)
    print(f"scanner GB/s: {scan_gbs:.2f} (TRL think_format_reward: {trl_gbs:.2f})")
    ratio = scan_gbs / trl_gbs
    print(f"  in characters: scanner {scan_gcs:.2f} G chars/s, TRL {trl_gcs:.2f} G chars/s; ratio {ratio:.1f}x")

    print(f"\n{'function':44s} {'GB/s':>6s} {'Gchar/s':>8s} {'completions/s':>14s}")
    rows = [
        ("rl_guards scan()", scan_all(texts)),
        ("rl_guards scan(prompt_opened=True)", scan_all(texts, prompt_opened=True)),
        ("rl_guards strip_thinking()", lambda: [strip_thinking(t) for t in texts]),
        ("trl think_format_reward", trl_all(texts)),
    ]
    for name, fn in rows:
        seconds = best_seconds(fn, 3)
        print(f"{name:44s} {size / seconds / 1e9:6.2f} {chars / seconds / 1e9:8.2f} {len(texts) / seconds:14.0f}")

    print("\nsubsets (share: of the corpus' UTF-8 bytes)")
    print(f"{'subset':30s} {'share':>6s} {'scan GB/s':>10s} {'Gchar/s':>8s} {'TRL GB/s':>9s}")
    subsets = {f"stored {w} byte(s)/char": [t for t in texts if width(t) == w] for w in (1, 2, 4)}
    subsets["only '<' are tags"] = [t for t in texts if only_tags_lt(t)]
    subsets["prose with other '<'"] = [t for t in texts if "```c" not in t and not only_tags_lt(t)]
    subsets["code answers"] = [t for t in texts if "```c" in t]
    subsets["1000-2000 chars"] = [t for t in texts if len(t) <= 2000]
    subsets["6000+ chars"] = [t for t in texts if len(t) >= 6000]
    subsets["dense '<' (old corpus words)"] = make_corpus(megabytes / 4, max_chars, seed=1, dense=True)
    for name, subset in subsets.items():
        if not subset:
            continue
        gbs, gcs = rates(subset, scan_all(subset))
        trl, _ = rates(subset, trl_all(subset))
        share = f"{utf8_bytes(subset) / size:6.0%}" if not name.startswith("dense") else "     -"
        print(f"{name:30s} {share} {gbs:10.2f} {gcs:8.2f} {trl:9.2f}")

    kinds: dict[str, int] = {}
    for t in texts:
        kind = scan(t).kind
        kinds[kind] = kinds.get(kind, 0) + 1
    trl_ok = sum(think_format_reward([[{"content": t}] for t in texts]))
    print(f"\nverdicts: {dict(sorted(kinds.items()))}; trl think_format_reward=1.0 on {trl_ok:.0f} rows")

    print("\nadversarial single texts (seconds; linear time means 10x size -> ~10x time)")
    print(f"{'text':28s} {'chars':>10s} {'scan':>8s} {'trl':>8s}")
    patterns = {
        "'<' * n": lambda n: "<" * n,
        "'< ' * n + 'think'": lambda n: "< " * (n // 2) + "think",
        "'<think' * n": lambda n: "<think" * (n // 6),
        "'<THINK' * n": lambda n: "<THINK" * (n // 6),
        "'<think>' * n": lambda n: "<think>" * (n // 7),
        "'</think>' * n": lambda n: "</think>" * (n // 8),
        "'<think>' + 'x' * n": lambda n: "<think>" + "x" * n,
        "'<think>' + ' ' * n": lambda n: "<think>" + " " * n,
    }
    for name, make in patterns.items():
        for n in (1_000_000, 10_000_000):
            text = make(n)
            conv = [[{"content": text}]]
            s = best_seconds(lambda text=text: scan(text), 1)
            r = best_seconds(lambda conv=conv: think_format_reward(conv), 1)
            print(f"{name:28s} {len(text):10d} {s:8.3f} {r:8.3f}")


if __name__ == "__main__":
    main()
