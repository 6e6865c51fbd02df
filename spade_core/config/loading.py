"""Resolving a config: a preset from ``data/configs/`` (``PRESET_DIR``), a YAML file or text on top (aliases
refused), then dotted ``key=value`` overrides; a validation error becomes one ``ConfigError`` line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from spade_core.config.base import ConfigError
from spade_core.config.spade import SpadeConfig
from spade_core.resources import data_dir

PRESET_DIR = data_dir("configs")


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases: a config never needs ``*name``, and nested aliases expand a few
    bytes into gigabytes (the "billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"alias *{event.anchor} at line {event.start_mark.line + 1}: aliases are not allowed in a config"
            )
        return super().compose_node(parent, index)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader, with aliases refused


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    return _parse_yaml(text, f"config file {path}")


def _parse_yaml(text: str, label: str) -> dict[str, Any]:
    """The mapping in YAML ``text``; errors start with ``label`` (e.g. ``config file x.yaml``).

    >>> _parse_yaml("a: &x [1]\\nb: *x", "c.yaml")
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: c.yaml is not valid YAML: alias *x at line 2: aliases are not allowed in a config
    """
    try:
        data = _yaml_load(text) or {}
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of more than 4300 digits
        raise ConfigError(f"{label} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label} must hold a mapping, got {type(data).__name__}")
    return data


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {item!r} has an empty key")
    # YAML scalars: 8 -> int, true -> bool, [a, b] -> list, null -> None, anything else -> str.
    try:
        value = _yaml_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError):  # ValueError: an integer of more than 4300 digits
        value = raw
    return parts, value


def _apply_override(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node: Any = data
    model: type[BaseModel] | None = SpadeConfig
    for depth, part in enumerate(parts):
        fields = model.model_fields if model else {}
        if model is not None and part not in fields:
            where = ".".join(parts[:depth]) or "top level"
            raise ConfigError(
                f"unknown config key {'.'.join(parts[: depth + 1])!r}; allowed at {where}: {', '.join(sorted(fields))}"
            )
        if depth == len(parts) - 1:
            node[part] = value
            return
        annotation = fields[part].annotation if model else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if model is None:
            raise ConfigError(f"config key {'.'.join(parts[: depth + 1])!r} is a value, not a section")
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key {'.'.join(parts[: depth + 1])!r} must be a mapping")


def _format_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    if not err["loc"] or isinstance(err.get("input"), dict):  # a check across keys: its message names them
        return str(err["msg"]).removeprefix("Value error, ")
    key = ".".join(str(p) for p in err["loc"])
    value = _shown(err.get("input"))
    if err["type"] == "extra_forbidden":
        return f"unknown config key {key!r}"
    if err["type"] == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"config key {key!r} has bad value {value}; allowed: {allowed}"
    return f"config key {key!r} has bad value {value}: {err['msg']}"


def _shown(value: Any, limit: int = 80) -> str:
    """A value's repr for a one-line message, cut to ``limit`` characters.

    >>> _shown("x" * 200)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (202 characters)"
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def load_config(
    preset: str | None = "tiny",
    config_file: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> SpadeConfig:
    """Resolve a config: preset YAML, then a config file on top, then ``key=value`` overrides.

    Raises:
        ConfigError: one line naming the bad preset, file, key or value.
    """
    data: dict[str, Any] = {}
    if preset:
        path = PRESET_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise ConfigError(f"unknown preset {preset!r}; available: {', '.join(available_presets())}")
        data = _read_yaml(path)
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {str(config_file)!r} does not exist")
        data = _deep_merge(data, _read_yaml(path))
    return _resolve(data, overrides)


# Keys a stored run config may still hold that no longer mean anything; reading a stored config drops them
# (a config file a user writes with one is refused like any unknown key). ``scoring.invalid_reward``: an
# invalid design gets no designer_rewards row and no designer sample, whatever the value.
RETIRED_KEYS: tuple[tuple[str, str], ...] = (("scoring", "invalid_reward"),)


def load_config_text(
    text: str, overrides: list[str] | tuple[str, ...] = (), *, label: str = "config text"
) -> SpadeConfig:
    """Resolve a config from YAML text (a run's stored ``config.yaml``), then ``key=value`` overrides.

    The text is the whole config (no preset underneath), as ``load_config(None, file, overrides)`` reads a
    file with that text.

    Args:
        text: The YAML text.
        overrides: ``key.path=value`` items applied on top.
        label: What the text is, for error messages (e.g. ``"config file s3://b/runs/demo/config.yaml"``).

    Raises:
        ConfigError: one line naming the bad YAML, key or value.

    >>> cfg = load_config_text("{seed: 3, rollout: {max_turns: 4}}", ["seed=5"])
    >>> cfg.seed, cfg.rollout.max_turns
    (5, 4)
    >>> load_config_text("- a list", label="config file runs/r/config.yaml")
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: config file runs/r/config.yaml must hold a mapping, got list
    """
    data = _parse_yaml(text, label)
    for section, key in RETIRED_KEYS:  # a run stored before the key was retired still loads
        if isinstance(data.get(section), dict):
            data[section].pop(key, None)
    return _resolve(data, overrides)


def _resolve(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> SpadeConfig:
    for item in overrides:
        parts, value = _parse_override(item)
        _apply_override(data, parts, value)
    try:
        return SpadeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
