"""Messages for people: an English template and its parameters, so a page can show them in another language.

A :class:`Msg` *is* its English text (a ``str`` built with ``template.format(**params)``),
so the CLI, the control socket, logs and every ``str(exc)`` keep the exact words
they always had. It also keeps ``template`` and ``params``: the web UI looks the
template up in a catalog keyed by the English text (``homeagent.webui.messages_zh``)
and renders the message in the language the browser asked for. A parameter may be
a Msg itself (a translated frame around a translated reason) or free text that
cannot be translated (a library's exception, a provider's error body), which is
then shown inside a translated frame.

Templates are string literals at the call site, ``Msg("no plugin named {name!r}", name=name)``:
a test reads them from the source and checks that each has a Chinese entry with
the same placeholders.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = ["Joined", "Msg", "localize", "message_of"]


class Msg(str):
    """English text that remembers how it was made (``template`` + ``params``), for translation."""

    template: str
    params: dict[str, Any]

    def __new__(cls, template: str, /, **params: Any) -> Msg:
        self = super().__new__(cls, template.format(**params))
        self.template = template
        self.params = params
        return self

    def __reduce__(self) -> tuple[Callable[..., Msg], tuple[Any, ...]]:
        return _rebuild, (self.template, self.params)


def _rebuild(template: str, params: dict[str, Any]) -> Msg:
    return Msg(template, **params)


class Joined(str):
    """Several messages joined by ``sep`` (a list of problems); each part is translated on its own."""

    parts: tuple[str, ...]
    sep: str

    def __new__(cls, sep: str, parts: Iterable[str]) -> Joined:
        items = tuple(parts)
        self = super().__new__(cls, sep.join(items))
        self.parts = items
        self.sep = sep
        return self

    def __reduce__(self) -> tuple[Callable[..., Joined], tuple[Any, ...]]:
        return Joined, (self.sep, self.parts)


def message_of(exc: BaseException) -> str:
    """What an exception says to a person: its :class:`Msg` when it was raised with one, else ``str(exc)``.

    ``str(exc)`` is always the English text; this keeps the template so a web
    answer can be translated.
    """
    if len(exc.args) == 1 and isinstance(exc.args[0], Msg | Joined):
        return exc.args[0]
    return str(exc)


def localize(value: Any, catalog: Mapping[str, str] | None) -> Any:
    """``value`` with every Msg in it (also inside dicts and lists) rendered from ``catalog``.

    ``None`` is English: each Msg is already its English text. A template the
    catalog does not have stays English as a whole (never half translated).
    """
    if catalog is None:
        return value
    if isinstance(value, Msg):
        target = catalog.get(value.template)
        if target is None:
            return str(value)
        return target.format(**{k: localize(v, catalog) for k, v in value.params.items()})
    if isinstance(value, Joined):
        return value.sep.join(localize(part, catalog) for part in value.parts)
    if isinstance(value, dict):
        return {k: localize(v, catalog) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [localize(v, catalog) for v in value]
    return value
