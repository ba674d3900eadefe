"""Text in and out of a Hugging Face model directory: the tokenizer
(`tokenizer.json` through the `tokenizers` library), the chat template
(Jinja, rendered the way transformers renders it), the ids that end a
generation, incremental detokenization for streaming and stop strings."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any, Sequence

__all__ = ["StopStrings", "TextCodec", "TextError", "TextStream"]


class TextError(ValueError):
    """A model directory whose tokenizer files are missing or unusable, or
    a chat that its template cannot render."""


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as err:
        raise TextError(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(data, dict):
        raise TextError(f"{path}: expected a JSON object")
    return data


def _token_text(value) -> str | None:
    """A special token of tokenizer_config.json: a string or an AddedToken
    dict ({"content": ...})."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


class TextCodec:
    """The text side of one model directory.

    `encode(text)` gives the prompt ids (the tokenizer's special tokens
    added, such as BOS); `chat(messages)` renders the chat template with a
    generation prompt and encodes it (no special tokens added again, as
    transformers' `apply_chat_template` does); `stream()` decodes ids as
    they come; `eos_ids` are the ids that end a generation
    (generation_config.json, else config.json, else the tokenizer's
    `eos_token`)."""

    def __init__(self, model_dir: str | Path, *, tokenizer=None):
        """Reads `model_dir`'s tokenizer files; `tokenizer` (a
        `tokenizers.Tokenizer`) stands in for its tokenizer.json."""
        from tokenizers import Tokenizer

        self.path = Path(model_dir)
        file = self.path / "tokenizer.json"
        if tokenizer is not None:
            self.tokenizer = tokenizer
        elif not file.is_file():
            raise TextError(f"{self.path}: no tokenizer.json (text in and out needs the model's Hugging Face "
                            "tokenizer; token ids work without it)")
        else:
            try:
                self.tokenizer = Tokenizer.from_file(str(file))
            except Exception as err:  # noqa: BLE001 - the library raises its own exception types
                raise TextError(f"{file}: not a tokenizer the `tokenizers` library reads ({err})") from None
        config = _read_json(self.path / "tokenizer_config.json")
        self.bos_token = _token_text(config.get("bos_token"))
        self.eos_token = _token_text(config.get("eos_token"))
        template = config.get("chat_template")
        jinja = self.path / "chat_template.jinja"
        if jinja.is_file():
            template = jinja.read_text()
        elif isinstance(template, list):
            # Named templates: the default one.
            named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
            template = named.get("default")
        self.chat_template = template if isinstance(template, str) else None
        self.eos_ids = self._eos_ids(config)
        self._compiled = None

    def _eos_ids(self, tokenizer_config: dict) -> list[int]:
        for source in ("generation_config.json", "config.json"):
            value = _read_json(self.path / source).get("eos_token_id")
            ids = value if isinstance(value, list) else [value]
            ids = [int(i) for i in ids if isinstance(i, int) and not isinstance(i, bool)]
            if ids:
                return ids
        if self.eos_token is not None:
            token = self.tokenizer.token_to_id(self.eos_token)
            if token is not None:
                return [token]
        return []

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, special: bool = True) -> list[int]:
        if not isinstance(text, str):
            raise TextError(f"a prompt must be a string, got {type(text).__name__}")
        return self.tokenizer.encode(text, add_special_tokens=special).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)

    def render_chat(self, messages: Sequence[dict[str, Any]], *, add_generation_prompt: bool = True) -> str:
        """The chat template applied to `messages` ([{"role", "content"}])."""
        if self.chat_template is None:
            raise TextError(f"{self.path}: the tokenizer has no chat template (tokenizer_config.json "
                            "'chat_template' or chat_template.jinja); use a plain completion")
        if self._compiled is None:
            self._compiled = self._compile(self.chat_template)
        try:
            return self._compiled.render(messages=list(messages), add_generation_prompt=add_generation_prompt,
                                         bos_token=self.bos_token or "", eos_token=self.eos_token or "")
        except TextError:
            raise
        except Exception as err:  # noqa: BLE001 - a template's own errors
            raise TextError(f"the chat template failed on these messages: {err}") from None

    def chat(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        return self.encode(self.render_chat(messages), special=False)

    @staticmethod
    def _compile(source: str):
        """The template in a sandbox, with what chat templates expect of
        transformers' renderer: trimmed blocks, `raise_exception`,
        `strftime_now` and a `tojson` that keeps non-ASCII text."""
        from jinja2.exceptions import TemplateError
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise TextError(f"the chat template refused the messages: {message}")

        def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                              sort_keys=sort_keys)

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                            extensions=["jinja2.ext.loopcontrols"])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        try:
            return env.from_string(source)
        except TemplateError as err:
            raise TextError(f"the chat template does not parse: {err}") from None

    def stream(self, prompt: Sequence[int] = ()) -> "TextStream":
        return TextStream(self, prompt)


class TextStream:
    """Incremental detokenization of one generation: `push(ids)` returns the
    text they complete (a character split over tokens waits for the rest),
    decoded after the prompt's last ids so that a leading space comes out
    as the whole decode would give it."""

    def __init__(self, codec: TextCodec, prompt: Sequence[int] = ()):
        from tokenizers.decoders import DecodeStream

        self._tokenizer = codec.tokenizer
        self._stream = DecodeStream(ids=list(prompt)[-4:], skip_special_tokens=True)

    def push(self, ids: Sequence[int]) -> str:
        out = []
        for token in ids:
            try:
                piece = self._stream.step(self._tokenizer, int(token))
            except Exception:  # noqa: BLE001 - an id the tokenizer does not know: no text
                piece = None
            if piece:
                out.append(piece)
        return "".join(out)


class StopStrings:
    """Stop strings over streamed text: `feed(text)` returns (text safe to
    hand out, whether a stop string was found); text that may be the start
    of a stop string is held back until it is not. The stop string itself
    is not handed out."""

    def __init__(self, stops: Sequence[str]):
        self.stops = [s for s in stops if s]
        self._held = ""

    def feed(self, text: str) -> tuple[str, bool]:
        if not self.stops:
            return text, False
        buf = self._held + text
        cut = min((i for i in (buf.find(s) for s in self.stops) if i >= 0), default=-1)
        if cut >= 0:
            self._held = ""
            return buf[:cut], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:k]):
                    keep = max(keep, k)
                    break
        self._held = buf[len(buf) - keep:] if keep else ""
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self._held = self._held, ""
        return out

