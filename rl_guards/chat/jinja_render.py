"""A chat template rendered with jinja2 alone, as ``transformers`` renders it, for the commands that only need the
text (``rl-guards check-template``): no torch, no transformers, so they start in well under a second.

:class:`TemplateRenderer` has the part of a tokenizer's surface the template checks use (``chat_template``,
``apply_chat_template``, ``decode``, ``__call__``, the special tokens). Its "ids" are the rendered text's characters
(code points), so decoding gives back exactly the rendered text: the checks read text, never token ids. The jinja2
environment is transformers' own (``transformers.utils.chat_template_utils._cached_compile_jinja_template``:
immutable sandbox, ``trim_blocks`` and ``lstrip_blocks``, loop controls, the ``{% generation %}`` tag, ``tojson``
without HTML escaping, ``raise_exception``, ``strftime_now``, a ``dict`` and a ``namespace`` that refuse private
names), and the template sees what transformers passes it (messages with ``None`` values dropped and reasoning
aliased, ``tools``, ``documents``, ``add_generation_prompt``, the special tokens, the caller's keyword arguments).
A test renders every template TRL ships both ways and compares the texts.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # transformers' names for a message's reasoning


@functools.cache
def _environment() -> Any:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}`` (assistant-token masks in transformers): its body as is."""

        tags = {"generation"}  # noqa: RUF012 (jinja2's own class attribute)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    class TemplateDict:
        def __call__(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict(*args, **kwargs)

        def fromkeys(self, *args: Any, **kwargs: Any) -> dict[Any, Any]:
            return dict.fromkeys(*args, **kwargs)

    class TemplateNamespace(jinja2.utils.Namespace):
        def __init__(*args: Any, **kwargs: Any) -> None:
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name: str, value: Any) -> None:
            TemplateNamespace._check_name(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check_name(name: Any) -> None:
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"a chat template cannot set {name!r} on a namespace")

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    extensions = [Generation, jinja2.ext.loopcontrols]
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=extensions)
    env.filters["tojson"] = tojson
    env.globals.update(
        raise_exception=raise_exception,
        strftime_now=lambda fmt: datetime.now().strftime(fmt),
        dict=TemplateDict(),
        namespace=TemplateNamespace,
    )
    return env


@functools.lru_cache(maxsize=32)
def _compiled(template: str) -> Any:
    return _environment().from_string(template)


def _messages(conversation: Sequence[Any]) -> list[dict[str, Any]]:
    """transformers' message clean-up: ``None`` values dropped, reasoning under its usual names."""
    out = []
    for message in conversation:
        if not isinstance(message, Mapping):
            raise TypeError(f"chat messages should be dicts, got {message!r}")
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


class TemplateRenderer:
    """A chat template and its special tokens, with the tokenizer methods the template checks call."""

    SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")

    def __init__(self, chat_template: str | None, **special_tokens: str | None) -> None:
        self.chat_template = chat_template
        for name in self.SPECIAL:
            setattr(self, name, special_tokens.get(name))
        self.eos_token_id = None
        self.pad_token_id = None

    @property
    def special_tokens_map(self) -> dict[str, str]:
        return {name: value for name in self.SPECIAL if (value := getattr(self, name)) is not None}

    def render(
        self,
        conversation: Sequence[Any],
        *,
        chat_template: str | None = None,
        tools: list[Any] | None = None,
        documents: list[Any] | None = None,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str:
        """One conversation rendered as ``apply_chat_template(tokenize=False)`` renders it."""
        template = chat_template or self.chat_template
        if not template:
            raise ValueError("no chat template: the tokenizer has none and none was passed")
        context = {**self.special_tokens_map, **kwargs}
        return str(
            _compiled(template).render(
                messages=_messages(conversation),
                tools=tools,
                documents=documents,
                add_generation_prompt=add_generation_prompt,
                **context,
            )
        )

    def apply_chat_template(
        self,
        conversation: Any,
        tools: list[Any] | None = None,
        documents: list[Any] | None = None,
        chat_template: str | None = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        return_dict: bool = True,
        **kwargs: Any,
    ) -> Any:
        batched = bool(conversation) and isinstance(conversation[0], list | tuple)
        chats = conversation if batched else [conversation]
        texts = [
            self.render(chat, chat_template=chat_template, tools=tools, documents=documents,
                        add_generation_prompt=add_generation_prompt, **kwargs)
            for chat in chats
        ]  # fmt: skip
        if not tokenize:
            return texts if batched else texts[0]
        ids = [self.encode(t) for t in texts]
        ids_out: Any = ids if batched else ids[0]
        return {"input_ids": ids_out} if return_dict else ids_out

    @staticmethod
    def encode(text: str) -> list[int]:
        """The text's code points: decoding gives the text back exactly."""
        return [ord(c) for c in text]

    def __call__(self, text: Any = None, **kwargs: Any) -> dict[str, Any]:
        if isinstance(text, str):
            return {"input_ids": self.encode(text)}
        return {"input_ids": [self.encode(t) for t in text]}

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False, **kwargs: Any) -> str:
        return "".join(chr(int(i)) for i in ids)


def renderer_for(source: str) -> TemplateRenderer | None:
    """A renderer for a TRL template name, a ``.jinja`` file (Qwen3's special tokens, as the tiny fixture has them),
    or a tokenizer folder whose template and special tokens are in its files (``chat_template.jinja`` /
    ``chat_template.json`` / ``tokenizer_config.json``); None when the folder's template is not in them."""
    path = Path(source)
    qwen = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    if path.is_dir():
        return _from_folder(path)
    if path.is_file():
        return TemplateRenderer(path.read_text(encoding="utf-8"), **qwen)
    return TemplateRenderer(trl_template_text(source), **qwen)


def trl_template_text(name: str) -> str:
    """TRL's shipped ``trl/chat_templates/<name>.jinja`` (read from TRL's folder without importing TRL)."""
    import importlib.util

    spec = importlib.util.find_spec("trl")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        candidate = Path(folder) / "chat_templates" / f"{name}.jinja"
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    shipped = sorted(p.stem for f in folders for p in (Path(f) / "chat_templates").glob("*.jinja"))
    raise ValueError(f"TRL ships no chat template named {name!r}; available: {', '.join(shipped)}")


def _token_text(value: Any) -> str | None:
    if isinstance(value, Mapping):  # {"content": "<s>", ...} in older tokenizer_config.json files
        value = value.get("content")
    return value if isinstance(value, str) else None


def _from_folder(folder: Path) -> TemplateRenderer | None:
    config: dict[str, Any] = {}
    if (folder / "tokenizer_config.json").is_file():
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    template: Any = None
    if (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    elif (folder / "chat_template.json").is_file():
        template = json.loads((folder / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
    else:
        template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t.get("template") for t in template if t.get("name") == "default"), None)
    if not isinstance(template, str):
        return None
    special = {name: _token_text(config.get(name)) for name in TemplateRenderer.SPECIAL}
    return TemplateRenderer(template, **special)


__all__ = ["TemplateRenderer", "renderer_for", "trl_template_text"]
