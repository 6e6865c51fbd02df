"""The config a command or flow run uses, and a run id bound to it (docs/DESIGN.md §4).

Every command and flow resolves its config here: :func:`resolve_config` (a preset, a YAML file on top,
``key=value`` overrides, a store root), :func:`stored_config` (a run's own config) and
:func:`flow_config` (a flow's plain parameters). The first generation of a run writes
``runs/{run_id}/config.yaml``; a later one with a config that would change what is written (anything but the
store location and the execution-only settings, ``spade_core.store.markers.EXECUTION_ONLY``: the task runner,
retries, devices and engine layout) is refused with a message naming the keys.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spade_core.config import ConfigError, SpadeConfig, StoreConfig, available_presets, load_config, load_config_text
from spade_core.envs import rlve
from spade_core.envs.export import read_export
from spade_core.llm.context import check_token_budgets
from spade_core.llm.run_template import check_run_template
from spade_core.store.artifacts import Store
from spade_core.store.markers import artifact_hash, bound_settings
from spade_core.store.reader import RunReader
from spade_core.train.launch import check_accelerate_config

DEFAULT_PRESET = "tiny"


def store_root(store: str | None) -> str:
    """The store root a command was given (None: the default).

    >>> store_root(None), store_root("s3://b/p")
    ('./spade-store', 's3://b/p')
    >>> store_root("  ")
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: --store '  ' is empty: give a directory or s3://bucket/prefix (none: ./spade-store)
    """
    if store is None:
        return StoreConfig().root
    if not store.strip():
        raise ConfigError(
            f"--store {store!r} is empty: give a directory or s3://bucket/prefix (none: {StoreConfig().root})"
        )
    return store


def _items(overrides: list[str] | tuple[str, ...] | None, store: str | None) -> list[str]:
    """The overrides, with the store root as one more."""
    return [*(overrides or []), *([f"store.root={store_root(store)}"] if store is not None else [])]


def resolve_config(
    preset: str = DEFAULT_PRESET,
    config: str | None = None,
    overrides: list[str] | None = None,
    store: str | None = None,
) -> SpadeConfig:
    """A preset, with the YAML file ``config`` and then ``overrides`` on top, and ``store`` as its store root."""
    return load_config(preset, config, _items(overrides, store))


def stored_config(run_id: str, store: str | None = None, overrides: list[str] | None = None) -> SpadeConfig:
    """The run's stored config with ``overrides`` on top.

    Raises:
        FileNotFoundError: the store has no such run; names the store and the file looked for.
    """
    probe = Store(store_root(store))
    cfg = load_run_config(probe, run_id, _items(overrides, store))
    if cfg is None:
        if RunReader(probe).has_markers(run_id):
            raise FileNotFoundError(
                f"run {run_id!r} has stage markers in the store {probe.base} but its config "
                f"runs/{run_id}/config.yaml is gone; put it back, or continue with the settings it was started "
                f"with: spade run --run-id {run_id} --preset ... --set ... (they are bound again; the markers "
                "decide what is reused)"
            )
        raise FileNotFoundError(f"run {run_id!r} is not in the store {probe.base} (no runs/{run_id}/config.yaml)")
    return cfg


def flow_config(
    run_id: str, config: str | None = None, overrides: list[str] | None = None, store: str | None = None
) -> SpadeConfig:
    """The config of a flow run from its plain parameters: ``config`` a preset name or a YAML file; without
    it a run that exists continues with its stored config and a new run starts from :data:`DEFAULT_PRESET`.
    A bad value is a one-line :class:`ConfigError`."""
    items = _items(overrides, store)
    if config is None:
        stored = load_run_config(Store(store_root(store)), run_id, items)
        return stored if stored is not None else load_config(DEFAULT_PRESET, None, items)
    if config in available_presets():
        return load_config(config, None, items)
    if not Path(config).is_file():
        presets = ", ".join(available_presets())
        raise ConfigError(f"config {config!r} is neither a preset ({presets}) nor a YAML file")
    return load_config(None, config, items)


class RunConfigMismatch(ValueError):
    """A run id reused with a config that would change its artifacts; the message names the keys."""


def load_run_config(store: Store, run_id: str, overrides: list[str] | tuple[str, ...] = ()) -> SpadeConfig | None:
    """The run's stored config (with ``overrides`` on top), or None for a run the store has not seen."""
    path = store.config_path(run_id)
    try:
        data = store.read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        where = f"byte 0x{data[exc.start]:02x} at offset {exc.start}"
        raise ConfigError(f"config file {path} is not UTF-8 text ({where})") from None
    return load_config_text(text, overrides, label=f"config file {path}")


def bind_run_config(store: Store, run_id: str, cfg: SpadeConfig) -> SpadeConfig:
    """Store ``cfg`` as the run's config, or check it against the stored one.

    Raises:
        RunConfigMismatch: the run was started with settings that would change its artifacts; names the keys.
        ConfigError: a token budget exceeds the model's context window, the model's chat template cannot be
            rendered turn by turn (:func:`~spade_core.llm.run_template.check_run_template`), or
            ``designer.fixed_pool`` names an RLVE environment that does not exist or cannot run in the jail,
            or an export directory that holds no export,
            or ``training.accelerate_config`` cannot launch here
            (:func:`~spade_core.train.launch.check_accelerate_config`) (nothing is written).
    """
    check_token_budgets(cfg)
    check_run_template(cfg)
    check_accelerate_config(cfg)
    if cfg.designer.fixed_pool and cfg.designer.fixed_pool.startswith("rlve:"):
        rlve.resolve(cfg.designer.fixed_pool)
    if cfg.designer.fixed_pool and cfg.designer.fixed_pool.startswith("export:"):
        read_export(cfg.designer.fixed_pool.removeprefix("export:"), endpoint_url=cfg.store.endpoint_url)
    stored = load_run_config(store, run_id)
    if stored is None:
        store.write_text(store.config_path(run_id), cfg.to_yaml())
        return cfg
    if artifact_hash(stored) != artifact_hash(cfg):
        changed = _changed_keys(bound_settings(stored), bound_settings(cfg))
        shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed[:4]) + (" ..." if len(changed) > 4 else "")
        raise RunConfigMismatch(
            f"run {run_id!r} was started with a different config ({shown}); use a new run id, "
            f"or `spade resume {run_id}` to continue with its stored config"
        )
    return cfg


def _changed_keys(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _changed_keys(va, vb, f"{prefix}{key}.")
        elif va != vb:
            out.append((f"{prefix}{key}", va, vb))
    return out
