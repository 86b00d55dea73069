"""A model directory's tokenizer and chat template, without transformers: `tokenizer.json` through the `tokenizers`
package, the chat template from `chat_template.jinja` or `tokenizer_config.json` rendered with jinja2 in a sandbox
the way Hugging Face's `apply_chat_template` renders it (the same globals, filters and whitespace settings), and
the special tokens (bos / eos / pad) from `tokenizer_config.json`, `generation_config.json` and `config.json`."""
from __future__ import annotations

import json
import os
from datetime import datetime
from typing import Any, Sequence


class TokenizerError(ValueError):
    pass


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise TokenizerError(f"cannot read '{path}': {e}") from None


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


class ChatTokenizer:
    def __init__(self, model_dir: str):
        from tokenizers import Tokenizer

        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.isfile(path):
            raise TokenizerError(f"'{model_dir}' has no tokenizer.json")
        try:
            self.tokenizer = Tokenizer.from_file(path)
        except Exception as e:   # the Rust side raises its own Exception type
            raise TokenizerError(f"cannot load '{path}': {e}") from None
        config = _read_json(os.path.join(model_dir, "tokenizer_config.json"))
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        self.pad_token = _token_text(config.get("pad_token"))
        self.add_bos = bool(config.get("add_bos_token", False))
        self.chat_template = self._template(model_dir, config)
        self.eos_token_ids = self._eos_ids(model_dir)

    def _template(self, model_dir: str, config: dict) -> str | None:
        jinja = os.path.join(model_dir, "chat_template.jinja")
        if os.path.isfile(jinja):
            with open(jinja, encoding="utf-8") as f:
                return f.read()
        template = config.get("chat_template")
        if isinstance(template, list):   # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        return template

    def _eos_ids(self, model_dir: str) -> set[int]:
        ids: set[int] = set()
        for name in ("generation_config.json", "config.json"):
            value = _read_json(os.path.join(model_dir, name)).get("eos_token_id")
            if value is not None:
                ids.update(value if isinstance(value, list) else [value])
        if self.eos_token is not None and (i := self.tokenizer.token_to_id(self.eos_token)) is not None:
            ids.add(i)
        return ids

    # -- text <-> ids -------------------------------------------------------------------------------------------
    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        if add_special_tokens and self.add_bos and self.bos_token is not None:
            bos = self.tokenizer.token_to_id(self.bos_token)
            if bos is not None and (not ids or ids[0] != bos):
                ids = [bos] + ids
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    # -- chat ---------------------------------------------------------------------------------------------------
    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            tokenize: bool = False, **extra: Any) -> str | list[int]:
        """The prompt text (or its ids, without adding special tokens again: the template writes them)."""
        if not self.chat_template:
            raise TokenizerError("the model directory has no chat template (chat_template.jinja or "
                                 "tokenizer_config.json's chat_template)")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or "role" not in m:
                raise TokenizerError(f"message {i} must be a dict with a 'role'")
        text = self._compiled().render(messages=messages, add_generation_prompt=add_generation_prompt,
                                       bos_token=self.bos_token or "", eos_token=self.eos_token or "",
                                       pad_token=self.pad_token or "", **extra)
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _compiled(self):
        if getattr(self, "_template_cache", None) is None:
            from jinja2.exceptions import TemplateError
            from jinja2.sandbox import ImmutableSandboxedEnvironment

            def raise_exception(message: str) -> None:
                raise TemplateError(message)

            def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None, separators=None,
                       sort_keys: bool = False) -> str:
                return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                                  sort_keys=sort_keys)

            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                extensions=["jinja2.ext.loopcontrols"])
            env.filters["tojson"] = tojson
            env.globals["raise_exception"] = raise_exception
            env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
            try:
                self._template_cache = env.from_string(self.chat_template)
            except TemplateError as e:
                raise TokenizerError(f"the chat template does not parse: {e}") from None
        return self._template_cache
