"""Think-markup scanner throughput vs TRL's ``think_format_reward`` on the same text (one core; prints, no asserts).

Run: ``.venv/bin/python benchmarks/bench_scanner.py [megabytes] [chars_per_completion]``

The corpus mixes well-formed thinking completions, plain answers, code with many ``<``, malformed markup
(unclosed, stray, nested, near-miss tags), CJK / emoji / lone surrogates. MB/s counts UTF-8 bytes of the text.
A second table times adversarial single texts of growing size, to show the scanner stays linear.
"""

from __future__ import annotations

import random
import sys
from collections import Counter

from _timing import best_seconds
from trl.rewards import think_format_reward

from rl_guards.core.think_markup import THINK, scan, strip_thinking

WORDS = "the of and to in is that for it as was with be by on not he this are or his from at which".split()
WORDS += ["思考", "答案", "🤔", "ünïcödé", "x=3", "a<b", "if (i < n)", "</div>", "<br>", "think", "thinking"]


def prose(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    size = 0
    while size < chars:
        w = rng.choice(WORDS)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def code(rng: random.Random, chars: int) -> str:
    lines = []
    size = 0
    while size < chars:
        line = f"    if (a[{rng.randrange(99)}] < b && c <= d) {{ x = y << 2; }} // <tag> {rng.random():.3f}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def completion(rng: random.Random, chars: int) -> str:
    kind = rng.random()
    body = prose(rng, chars)
    half = len(body) // 2
    if kind < 0.45:
        return f"<think>\n{body[:half]}\n</think>\n\n{body[half:]}"
    if kind < 0.60:
        return body
    if kind < 0.70:
        return f"<think>\n{code(rng, half)}\n</think>\n\n```c\n{code(rng, half)}\n```"
    if kind < 0.78:
        return f"<think>\n{body}"  # unclosed (truncated)
    if kind < 0.84:
        return f"{body[:half]}</think>{body[half:]}"  # stray close
    if kind < 0.90:
        return f"<think><think>{body[:half]}</think>{body[half:]}<THINK>"  # nested + near miss
    if kind < 0.95:
        return f"<think>{body[:half]}</think>{body[half:]}<think>more</think>end </thi"
    return f"<think>\ud800{body[:half]}</think>\udfff{body[half:]}"  # lone surrogates


def utf8_bytes(texts: list[str]) -> int:
    return sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)


def main() -> None:
    megabytes = float(sys.argv[1]) if len(sys.argv) > 1 else 50.0
    chars = int(sys.argv[2]) if len(sys.argv) > 2 else 4000
    rng = random.Random(0)
    texts: list[str] = []
    total = 0
    while total < megabytes * 1e6:
        text = completion(rng, rng.randint(chars // 4, chars))
        texts.append(text)
        total += len(text)
    size_mb = utf8_bytes(texts) / 1e6
    conversational = [[{"role": "assistant", "content": t}] for t in texts]
    print(f"corpus: {len(texts)} completions, {size_mb:.1f} MB UTF-8, {sum(map(len, texts)) / 1e6:.1f} M chars")

    rows = [
        ("rl_guards scan()", lambda: [scan(t, THINK) for t in texts]),
        ("rl_guards scan(prompt_opened=True)", lambda: [scan(t, THINK, prompt_opened=True) for t in texts]),
        ("rl_guards strip_thinking()", lambda: [strip_thinking(t) for t in texts]),
        ("trl think_format_reward", lambda: think_format_reward(conversational)),
    ]
    print(f"{'function':40s} {'seconds':>8s} {'MB/s':>8s} {'completions/s':>14s}")
    for name, fn in rows:
        seconds = best_seconds(fn, 2)
        print(f"{name:40s} {seconds:8.2f} {size_mb / seconds:8.1f} {len(texts) / seconds:14.0f}")

    kinds = Counter(scan(t).kind for t in texts)
    trl_ok = sum(think_format_reward(conversational))
    print(f"verdicts: {dict(sorted(kinds.items()))}; trl think_format_reward=1.0 on {trl_ok:.0f} rows")

    print("\nadversarial single texts (seconds; linear time means 10x size -> ~10x time)")
    print(f"{'text':28s} {'chars':>10s} {'scan':>8s} {'trl':>8s}")
    patterns = {
        "'<' * n": lambda n: "<" * n,
        "'< ' * n + 'think'": lambda n: "< " * (n // 2) + "think",
        "'<think' * n": lambda n: "<think" * (n // 6),
        "'<think>' * n": lambda n: "<think>" * (n // 7),
        "'<think>' + 'x' * n": lambda n: "<think>" + "x" * n,
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
