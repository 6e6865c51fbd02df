"""Faults, round 2: attacks on a finished generation's store that used to be reused, crash a command or pass
unseen. Each test is named after the attack and checks both ways: the damage is found (by ``spade verify``,
``spade status`` and the next run), and the undamaged store stays quiet. The generation is
tests/test_verify.py's model-free one, on a real store with real markers (local, and S3 on moto's server).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import pytest
from test_verify import _generation, _rerun
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.status import generation_stages, next_generation
from spade_core.store.artifacts import Store, StoreError
from spade_core.store.markers import StageRecord, list_markers, marker_path, read_marker

runner = CliRunner()


def _verify(root: str, *args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["verify", "r", "--store", root, *args])
    return result.exit_code, result.output


def _zero_middle(store: Store, path: str, n: int = 64) -> None:
    """Overwrite ``n`` bytes in the middle of a file with zeros: same size, other bytes."""
    data = bytearray(store.read_bytes(path))
    middle = len(data) // 2
    data[middle : middle + n] = bytes(n)
    store.write_bytes(path, bytes(data))


def _edit_marker(ctx: GenerationContext, record: StageRecord, **update: object) -> None:
    """Rewrite a marker in place with some fields changed (what a hand edit or a forged marker does)."""
    path = marker_path(ctx.store, "r", 1, record.stage, record.shard)
    ctx.store.write_text(path, record.model_copy(update=update).model_dump_json(indent=1))


# -- 1. reuse verifies content --------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["local", "s3"])
def test_same_size_corruption_in_the_middle_of_a_file_is_found_and_the_stage_runs_again(
    where: str, tmp_path: Path, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    if where == "s3":
        endpoint = request.getfixturevalue("s3_endpoint")
        root = request.getfixturevalue("s3_bucket")
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        request.addfinalizer(lambda: os.environ.pop("AWS_ENDPOINT_URL", None))
        ctx, records = _generation(root, endpoint)
    else:
        root = str(tmp_path)
        ctx, records = _generation(root)
    # Untouched: every check is quiet and every stage is reused.
    assert _verify(root)[0] == 0 and next_generation(ctx.store, ctx.cfg, "r") == 2
    assert _rerun(ctx, records) == ["reused"] * len(records)
    target = records[1].files["documents"][0]
    _zero_middle(ctx.store, target)
    code, out = _verify(root)
    assert code == 1 and f"damaged: gen 1 {records[1].name}: {target} has changed since" in out, out
    assert _verify(root, "--quick")[0] == 0  # sizes alone cannot see it: that is what --quick is for
    assert generation_stages(ctx.store, ctx.cfg, "r", 1)[records[1].stage] == "damaged"
    with caplog.at_level(logging.WARNING, logger="spade_core.pipeline.stage"):
        statuses = _rerun(ctx, records)
    assert statuses == ["reused", "ran"] + ["reused"] * (len(records) - 2)
    assert f"gen 1 {records[1].name}: {target} has changed since its stage wrote it (digest)" in caplog.text
    assert _verify(root)[0] == 0


def test_a_deleted_marker_that_a_later_marker_names_is_reported_missing(tmp_path: Path) -> None:
    ctx, records = _generation(str(tmp_path))
    middle = records[len(records) // 2]
    assert "missing" not in _verify(str(tmp_path))[1]
    ctx.store.remove_file(marker_path(ctx.store, "r", 1, middle.stage))
    code, out = _verify(str(tmp_path))
    after = records[len(records) // 2 + 1]
    assert code == 1, out
    assert f"missing: gen 1 {middle.name}: " in out and "names it as its input" in out and after.name in out
    assert "0 damaged markers, 1 missing markers" in out and "next: spade resume r" in out
    # The run redoes the stage; its files come back byte for byte, so the stages after it are reused.
    m = len(records) // 2
    assert _rerun(ctx, records) == ["reused"] * m + ["ran"] + ["reused"] * (len(records) - m - 1)
    assert _verify(str(tmp_path))[0] == 0


def _outside_copy(tmp_path: Path, path: str) -> str:
    """A byte-for-byte copy of a store file outside the store (right size, right digest)."""
    outside = tmp_path.parent / f"{tmp_path.name}-outside" / Path(path).name
    outside.parent.mkdir(exist_ok=True)
    shutil.copyfile(path, outside)
    return str(outside)


@pytest.mark.parametrize("forgery", ["absolute path elsewhere", "dot-dot", "symbolic link"])
def test_a_marker_naming_a_file_outside_the_store_is_damaged(forgery: str, tmp_path: Path) -> None:
    root = tmp_path / "store"
    ctx, records = _generation(str(root))
    record = records[0]
    original = record.files["documents"][0]
    outside = _outside_copy(tmp_path, original)
    assert _verify(str(root))[0] == 0 and len(ctx.read("documents", ["documents"])) == 5
    if forgery == "symbolic link":  # the listed path is the store's own, but the file is a link out of it
        os.remove(original)
        os.symlink(outside, original)
        forged = original
    else:
        climb = f"{root}/tables/documents/../../../{Path(outside).parent.name}/{Path(outside).name}"
        forged = outside if forgery == "absolute path elsewhere" else climb
        files = {"documents": [forged, *record.files["documents"][1:]]}
        sizes = {forged if p == original else p: s for p, s in record.sizes.items()}
        digests = {forged if p == original else p: d for p, d in record.file_digests.items()}
        _edit_marker(ctx, record, files=files, sizes=sizes, file_digests=digests)
    code, out = _verify(str(root))
    assert code == 1 and f"damaged: gen 1 documents: {forged} " in out, out
    assert "outside the store" in out or "symbolic link" in out
    assert generation_stages(ctx.store, ctx.cfg, "r", 1)["documents"] == "damaged"
    with pytest.raises(StoreError, match=r"outside the store|symbolic link"):
        ctx.read("documents", ["documents"])
    if forgery == "symbolic link":
        os.remove(original)  # the stage writes its file again (a rename does not follow the link)
    assert _rerun(ctx, records)[0] == "ran"
    assert _verify(str(root))[0] == 0 and not os.path.islink(original)


# -- 2. a damaged marker is data, not a crash -----------------------------------------------------------


def _cut_marker(ctx: GenerationContext, record: StageRecord) -> str:
    path = marker_path(ctx.store, "r", 1, record.stage, record.shard)
    data = ctx.store.read_bytes(path)
    ctx.store.write_bytes(path, data[: len(data) // 2])
    return path


def test_a_marker_cut_to_half_its_size_is_listed_as_damaged_by_every_command(tmp_path: Path) -> None:
    root = str(tmp_path)
    ctx, records = _generation(root)
    middle = records[len(records) // 2]
    path = _cut_marker(ctx, middle)
    for args in ([], ["--deep"], ["--quick"]):
        code, out = _verify(root, *args)
        assert code == 1 and f"damaged: gen 1 {middle.name}: {path} is not a valid stage marker" in out, out
        assert "Traceback" not in out
    status = runner.invoke(app, ["status", "r", "--store", root])
    assert status.exit_code == 0 and f"{middle.name}:damaged" in status.stdout, status.output
    assert "gen 1 incomplete" in status.stdout and "spade resume r" in status.stdout
    assert read_marker(ctx.store, "r", 1, middle.stage) is None  # counts as not done, one logged line
    # --repair removes it and the markers after it; the run redoes exactly those.
    code, out = _verify(root, "--repair")
    assert code == 0 and f"removed {len(records) - len(records) // 2} markers" in out, out
    assert set(list_markers(ctx.store, "r")[1]) == {r.name for r in records[: len(records) // 2]}
    assert _rerun(ctx, records) == ["reused"] * (len(records) // 2) + ["ran"] * (len(records) - len(records) // 2)
    assert _verify(root)[0] == 0


def test_a_damaged_marker_is_run_again_without_repair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    ctx, records = _generation(str(tmp_path))
    path = _cut_marker(ctx, records[0])
    with caplog.at_level(logging.WARNING, logger="spade_core.store.markers"):
        statuses = _rerun(ctx, records)
    assert statuses == ["ran"] + ["reused"] * (len(records) - 1)
    assert f"{path} is not a valid stage marker" in caplog.text
    assert _verify(str(tmp_path))[0] == 0


@pytest.mark.parametrize("content", [b"", b"\xff\xfe not utf-8", b"[]", b'{"stage": 1}'])
def test_a_marker_that_is_not_a_marker_is_one_damaged_line(content: bytes, tmp_path: Path) -> None:
    ctx, records = _generation(str(tmp_path))
    path = marker_path(ctx.store, "r", 1, records[-1].stage)
    ctx.store.write_bytes(path, content)
    code, out = _verify(str(tmp_path))
    assert code == 1 and out.count("damaged: ") == 1 and f"{path} is not a valid stage marker" in out, out
    assert generation_stages(ctx.store, ctx.cfg, "r", 1)[records[-1].stage] == "damaged"


def test_a_marker_copied_onto_another_stage_is_damaged(tmp_path: Path) -> None:
    ctx, records = _generation(str(tmp_path))
    first, last = records[0], records[-1]
    ctx.store.write_bytes(
        marker_path(ctx.store, "r", 1, last.stage), ctx.store.read_bytes(marker_path(ctx.store, "r", 1, first.stage))
    )
    code, out = _verify(str(tmp_path))
    assert code == 1 and f"is the marker of run 'r' gen 1 {first.name}, not of its place" in out, out
    assert json.loads(ctx.store.read_bytes(marker_path(ctx.store, "r", 1, first.stage)))["stage"] == first.stage


# -- 5. config values are bounded when the config loads -------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "key", "says"),
    [
        ("seed=99999999999999999999999999", "seed", "less than or equal to 4294967295"),
        ("seed=-1", "seed", "greater than or equal to 0"),
        ("training.learning_rate=.inf", "training.learning_rate", "finite number"),
        ("training.learning_rate=.nan", "training.learning_rate", "finite number"),
        ("model.max_new_tokens=1.0e+26", "model.max_new_tokens", "integer"),
        ("model.max_new_tokens=2000000", "model.max_new_tokens", "less than or equal to 1048576"),
        ("training.warmup_steps=10000000000", "training.warmup_steps", "within ±1,000,000,000"),
        ("scoring.regret_scale=1e300", "scoring.regret_scale", "within ±1,000,000,000"),
    ],
)
def test_an_out_of_range_setting_is_one_line_at_load_and_nothing_is_written(
    setting: str, key: str, says: str, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["run", "--run-id", "bad", "--store", str(tmp_path), "--set", setting])
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert "\n" not in line and f"config key {key!r} has bad value" in line and says in line, line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "tables").exists()


def test_settings_at_the_edge_of_their_range_load(tmp_path: Path) -> None:
    for setting in ("seed=4294967295", "training.learning_rate=1", "model.max_new_tokens=1048576"):
        result = runner.invoke(app, ["config", "show", "--set", setting])
        assert result.exit_code == 0, (setting, result.output)


def test_a_turn_longer_than_the_context_is_refused() -> None:
    result = runner.invoke(app, ["config", "show", "--set", "rollout.max_tokens_per_turn=5000"])
    assert result.exit_code == 2 and "must be <= rollout.max_context_tokens" in result.stderr


def test_a_token_budget_beyond_the_models_context_window_is_one_line_and_nothing_is_written(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["run", "--run-id", "long", "--store", str(tmp_path), "--set", "designer.max_new_tokens=9000"]
    )
    assert result.exit_code == 2, result.output
    line = result.stderr.strip()
    assert (
        "\n" not in line and "designer.max_new_tokens=9000 exceeds the context window of model 'embedded' (8192" in line
    )
    assert not (tmp_path / "runs").exists()


def test_token_budgets_are_checked_against_a_local_models_own_window(tmp_path: Path) -> None:
    from spade_core.config import ConfigError, load_config
    from spade_core.pipeline.run_config import bind_run_config

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"max_position_embeddings": 1024}))
    store = Store(str(tmp_path / "store"))
    fits = load_config("tiny", overrides=[f"model.name_or_path={model}", "rollout.max_context_tokens=1024"])
    bind_run_config(store, "fits", fits)  # at the edge: bound
    assert store.exists(f"{store.run_dir('fits')}/config.yaml")
    over = load_config("tiny", overrides=[f"model.name_or_path={model}", "rollout.max_context_tokens=1025"])
    with pytest.raises(ConfigError, match=r"rollout.max_context_tokens=1025 exceeds .* \(1024 tokens"):
        bind_run_config(store, "over", over)
    assert not store.exists(f"{store.run_dir('over')}/config.yaml")
    # a budget of a feature that is off is not checked; on, it is
    off = load_config("tiny", overrides=[f"model.name_or_path={model}", "validation.llm_validator_max_new_tokens=4096"])
    bind_run_config(store, "off", off)
    on = off.model_copy(update={"validation": off.validation.model_copy(update={"llm_validator": True})})
    with pytest.raises(ConfigError, match=r"validation.llm_validator_max_new_tokens=4096"):
        bind_run_config(store, "on", on)


def _bomb(levels: int = 8) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def test_a_yaml_alias_bomb_is_refused_in_one_short_line(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb())
    result = runner.invoke(app, ["config", "show", "--config", str(bomb)])
    assert result.exit_code == 2 and len(result.stderr) < 200, result.stderr[:300]
    assert f"config file {bomb} is not valid YAML: alias *a0 at line 2" in result.stderr
    # The same file without aliases is still only YAML that holds unknown keys: one line, no alias word.
    plain = tmp_path / "plain.yaml"
    plain.write_text("seed: 3\n")
    assert runner.invoke(app, ["config", "show", "--config", str(plain)]).exit_code == 0


def test_a_long_bad_value_is_cut_in_its_one_line(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["config", "show", "--set", "model.name_or_path=" + "x" * 100_000, "--set", "seed=" + "9" * 5000]
    )
    assert result.exit_code == 2 and len(result.stderr) < 300 and "(5002 characters)" in result.stderr
    assert "config key 'seed' has bad value '99999" in result.stderr
    result = runner.invoke(app, ["config", "show", "--set", "seed=" + "x" * 100_000])
    assert result.exit_code == 2 and len(result.stderr) < 300 and "(100002 characters)" in result.stderr


# -- 6. one line where a traceback was ------------------------------------------------------------------


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("seed: 3  # café\n".encode("latin-1"))
    result = runner.invoke(app, ["config", "show", "--config", str(latin)])
    assert result.exit_code == 2 and f"config file {latin} is not UTF-8 text (byte 0xe9" in result.stderr
    latin.write_text("seed: 3  # café\n")
    assert runner.invoke(app, ["config", "show", "--config", str(latin)]).exit_code == 0


@pytest.mark.parametrize("content", [b"seed: [unclosed\n", b"seed: 3 \xe9\n"])
def test_a_damaged_stored_config_names_its_file(content: bytes, tmp_path: Path) -> None:
    ctx, _ = _generation(str(tmp_path))
    path = f"{ctx.store.run_dir('r')}/config.yaml"
    assert runner.invoke(app, ["status", "r", "--store", str(tmp_path)]).exit_code == 0
    ctx.store.write_bytes(path, content)
    result = runner.invoke(app, ["status", "r", "--store", str(tmp_path)])
    assert result.exit_code == 2 and f"config file {path} is not" in result.stderr, result.output


def test_a_run_whose_config_is_deleted_says_what_is_missing_and_how_to_go_on(tmp_path: Path) -> None:
    ctx, _ = _generation(str(tmp_path))
    os.remove(f"{ctx.store.run_dir('r')}/config.yaml")
    result = runner.invoke(app, ["status", "r", "--store", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert "has stage markers" in result.stderr and "runs/r/config.yaml is gone" in result.stderr
    assert "spade run --run-id r" in result.stderr and "not in the store" not in result.stderr
    unknown = runner.invoke(app, ["status", "nope", "--store", str(tmp_path)])
    assert unknown.exit_code == 2 and "run 'nope' is not in the store" in unknown.stderr


def test_sql_cells_holding_rich_markup_are_printed_as_text(tmp_path: Path) -> None:
    statement = "select '[/INST] hi' as reply, '[bold red]x[/bold red]' as \"[b]head\", 'plain' as p"
    result = runner.invoke(app, ["sql", "--store", str(tmp_path / "store"), statement])
    assert result.exit_code == 0, result.output
    assert "[/INST] hi" in result.stdout and "[bold red]x[/bold red]" in result.stdout and "[b]head" in result.stdout


def test_a_300_character_run_id_is_one_line_and_makes_no_directory(tmp_path: Path) -> None:
    for command in (["run", "--run-id", "r" * 300], ["status", "r" * 300], ["verify", "r" * 300]):
        result = runner.invoke(app, [*command, "--store", str(tmp_path / "store")])
        assert result.exit_code == 2 and "(300 characters) is longer than 128 characters" in result.stderr, command
    assert not (tmp_path / "store").exists()
    assert runner.invoke(app, ["status", "r" * 128, "--store", str(tmp_path / "store")]).exit_code == 2  # not there


def test_a_store_under_a_regular_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    for command in (["run", "--run-id", "r"], ["sql", "select 1"], ["verify", "r"]):
        result = runner.invoke(app, [*command, "--store", str(tmp_path / "afile" / "store")])
        assert result.exit_code == 2, (command, result.output)
        assert f"lies under '{tmp_path / 'afile'}', which is a file, not a directory" in result.stderr


def test_an_s3_endpoint_that_keeps_answering_503_during_spade_sql_names_the_endpoint_and_the_object(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    from flaky_s3 import FaultPlan, flaky_s3
    from samples import frame, write_stage

    from spade_core.faults import fault_line

    bucket = "round2-503"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    write_stage(
        Store(f"s3://{bucket}/store", endpoint_url=s3_endpoint), "r", 1, "rollout", {"episodes": frame("episodes")}
    )
    calm = FaultPlan(drop=0, lost=0, truncate=0, slowdown=0, unavailable=0, delay=0)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # the proxy's 503s outlast any retry: no need to wait for them
    args = ["sql", "--store", f"s3://{bucket}/store", "select count(*) from episodes"]
    for _ in range(2):  # the second query reads no file for its digest: those of the first are kept
        with flaky_s3(s3_endpoint, plan=calm) as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
            result = runner.invoke(app, args)
        assert result.exit_code == 0 and "2" in result.stdout, result.output
    needed = proxy.stats()["requests"]
    for served in (3, needed // 2):  # the proxy answers 503 after this many requests: early, and midway
        with flaky_s3(s3_endpoint, plan=calm, max_requests=served) as proxy:
            monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
            result = runner.invoke(app, args)
        line = result.stderr.strip() if isinstance(result.exception, SystemExit) else fault_line(result.exception)
        assert result.exit_code == 1 and line is not None, (served, result.output)
        assert proxy.url in line and f"s3://{bucket}/store/" in line and "ProxyExhausted" in line, line
        assert "check the disk" not in line and "\n" not in line and "^^^" not in line


# -- 4. model output is bounded before it is parsed (designer.mode: parameters) -------------------------

PARENT = '''"""Find the word.

Measured: 0.4."""

import random

_WORDS = ["falcon", "copper", "meadow"]
_SIZE = 3
'''


def _parameter_failure(parent: str | None, reply: str, max_items: int = 1000) -> tuple[str, str]:
    from spade_core.designer.parameters import ParameterError, make_variant

    with pytest.raises(ParameterError) as caught:
        make_variant(parent, reply, max_items)
    return caught.value.error_type, str(caught.value)


def test_a_reply_with_a_3580_digit_hex_integer_is_an_error_row_not_a_crash() -> None:
    from spade_core.designer.replies import design_row

    reply = "```python\n_SIZE = 0x" + "f" * 3580 + "\n```"
    assert _parameter_failure(PARENT, reply) == ("parameters_too_large", "an integer of 14320 bits (at most 1024)")
    row = design_row(
        design_id="d", doc_id=None, group_id="g", skill="optimization", messages=[], completion=reply,
        model_ref="m", parent_env_id="p", parent_code=PARENT, parameters=True,
    )  # fmt: skip
    assert row["code"] is None and row["env_id"] is None
    fine = design_row(
        design_id="d", doc_id=None, group_id="g", skill="optimization", messages=[], completion="_SIZE = 0xff",
        model_ref="m", parent_env_id="p", parent_code=PARENT, parameters=True,
    )  # fmt: skip
    assert "_SIZE = 255" in fine["code"]


def test_a_reply_with_a_huge_list_is_refused_before_it_is_built() -> None:
    import time

    started = time.perf_counter()
    big = "_WORDS = [" + ", ".join(["'w'"] * 20_000) + "]"
    assert _parameter_failure(PARENT, big)[0] == "parameters_too_large"  # 20,000 items > 1,000
    huge = "_WORDS = [" + "0, " * 1_000_000 + "]"  # 3 MB: refused by its length, never parsed
    error_type, message = _parameter_failure(PARENT, huge)
    assert error_type == "parameters_too_large" and "characters (at most 65536)" in message
    nested = "_WORDS = " + "[" * 20 + "'w'" + "]" * 20
    assert _parameter_failure(PARENT, nested) == ("parameters_too_large", "containers nested more than 8 deep")
    assert time.perf_counter() - started < 5
    # The bound comes from the config: 3 items allowed, 4 refused.
    assert _parameter_failure(PARENT, "_WORDS = ['a', 'b', 'c', 'd']", max_items=3)[0] == "parameters_too_large"
    from spade_core.designer.parameters import make_variant

    assert "_WORDS = ['a', 'b', 'c']" in make_variant(PARENT, "_WORDS = ['a', 'b', 'c']", 3)


def test_48_kb_of_statement_like_lines_parse_in_linear_time() -> None:
    import time

    from spade_core.designer.parameters import parse_parameters

    def seconds(n: int) -> float:
        started = time.perf_counter()
        assert parse_parameters("A:\n" * n, {"_SIZE": 3}) == {}
        return time.perf_counter() - started

    small, large = seconds(16_000), seconds(64_000)  # 48 kB and 192 kB of "A:" lines (quadratic: 7.6 s for 48 kB)
    assert small < 0.5 and large < 2.0 and large < 12 * max(small, 0.01), (small, large)


@pytest.mark.parametrize("breaker", ["\x0c", "\u2028", "\x1c", "\x85"])
def test_a_parent_comment_with_an_exotic_line_break_gets_the_edit_in_place(breaker: str) -> None:
    from spade_core.designer.parameters import make_variant, parameters_of

    parent = PARENT.replace("import random\n", f"import random\n# a note{breaker}that goes on\n")
    variant = make_variant(parent, "_WORDS = ['river', 'delta']")
    assert parameters_of(variant) == {"_WORDS": ["river", "delta"], "_SIZE": 3}
    assert f"# a note{breaker}that goes on\n" in variant  # the comment is untouched


def test_a_parent_docstring_paragraph_ending_in_a_quote_gives_a_variant_that_parses() -> None:
    import ast

    from spade_core.designer.parameters import make_variant

    parent = PARENT.replace("Find the word.", 'Find the "word"')
    variant = make_variant(parent, "_SIZE = 5")
    assert ast.get_docstring(ast.parse(variant)) == 'Find the "word"'
    backslash = make_variant(PARENT.replace("Find the word.", "Find the word\\\\"), "_SIZE = 5")
    assert ast.get_docstring(ast.parse(backslash)) == "Find the word\\"


def test_a_repair_whose_parent_is_unknown_is_an_error_row_not_a_whole_module() -> None:
    from spade_core.designer.replies import design_row

    module = "```python\nclass Env:\n    def reset(self, seed=None): ...\n    def step(self, action): ...\n```"
    row = design_row(
        design_id="d", doc_id=None, group_id="g", skill="optimization", messages=[], completion=module,
        model_ref="m", parent_env_id="gone", parent_code=None, parameters=True,
    )  # fmt: skip
    assert row["code"] is None
    assert _parameter_failure(None, module)[0] == "unknown_parent"
    written = design_row(
        design_id="d", doc_id=None, group_id="g", skill="optimization", messages=[], completion=module,
        model_ref="m",
    )  # fmt: skip
    assert written["code"] is not None  # write mode still takes the whole module


def test_every_parameters_failure_is_an_error_type_on_the_validation_row(tmp_path: Path) -> None:
    import pandas as pd

    from spade_core.config import load_config
    from spade_core.designer.retries import validation_rows
    from spade_core.envs.seeds import load_starter_envs

    cfg = load_config("tiny", overrides=["designer.mode=parameters", f"store.root={tmp_path}"])
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "r", 1)
    parent = next(e for e in load_starter_envs() if e.skill == "spatial_reasoning")
    replies = {
        "too_large": ("```python\n_OBJECTS = 0x" + "f" * 3580 + "\n```", parent.env_id),
        "gone": ("```python\nclass Env: ...\n```", "no-such-parent"),
        "none": ("I cannot do that.", parent.env_id),
    }
    designs = pd.DataFrame(
        [
            {"design_id": k, "attempt": 0, "code": None, "completion": c, "parent_env_id": p}
            for k, (c, p) in replies.items()
        ]
    )
    rows = {r["design_id"]: r for r in validation_rows(ctx.design_run(), designs)}
    assert rows["too_large"]["error_type"] == "parameters_too_large" and "bits" in rows["too_large"]["message"]
    assert rows["gone"]["error_type"] == "unknown_parent"
    assert rows["none"]["error_type"] == "syntax_error" and "sets none" in rows["none"]["message"]
    assert not any(r["ok"] for r in rows.values())


# -- 3. reads that do not go through the markers --------------------------------------------------------


def test_a_deleted_file_makes_spade_sql_say_in_one_line_that_its_rows_are_missing(tmp_path: Path) -> None:
    _, records = _generation(str(tmp_path))
    statement = "select count(*) as n from documents"
    clean = runner.invoke(app, ["sql", "--store", str(tmp_path), statement])
    assert clean.exit_code == 0 and clean.stderr == "" and "29" in clean.stdout, clean.output
    gone = records[3].files["documents"][0]
    os.remove(gone)
    result = runner.invoke(app, ["sql", "--store", str(tmp_path), statement])
    assert result.exit_code == 0 and "27" in result.stdout, result.output
    line = result.stderr.strip()
    assert "\n" not in line and line.startswith(f"warning: left out gen 1 r {records[3].name}: {gone} is missing")
    assert "its rows are not in this answer (spade verify r)" in line
    other = runner.invoke(app, ["sql", "--store", str(tmp_path), "select count(*) from pool"])
    assert other.exit_code == 0 and other.stderr == "", other.output  # a table it does not read: not checked


def test_a_symlink_inside_the_store_is_not_followed_by_spade_sql(tmp_path: Path) -> None:
    root = tmp_path / "store"
    _, records = _generation(str(root))
    outside = _outside_copy(tmp_path, records[0].files["documents"][0])
    partition = Path(records[0].files["documents"][0]).parent
    link = partition / "link-0.parquet"
    os.symlink(outside, link)
    for args in (
        ["--all-files", "select count(*) from documents"],  # every file of the table: the link among them
        [f"select * from read_blob('spade-store://{link}')"],
    ):
        result = runner.invoke(app, ["sql", "--store", str(root), *args])
        assert result.exit_code == 1 and "symbolic link refused" in result.stderr, (args, result.output)
    listed = runner.invoke(app, ["sql", "--store", str(root), "select count(*) from documents"])  # no marker lists it
    assert listed.exit_code == 0 and f"skipped {link}: a symbolic link out of the store" in listed.stderr
    os.remove(link)
    assert runner.invoke(app, ["sql", "--store", str(root), "select count(*) from documents"]).exit_code == 0


def test_a_designs_row_written_under_another_run_cannot_graft_a_parent_onto_a_lineage(tmp_path: Path) -> None:
    import pandas as pd
    from samples import design_row as sample_design
    from samples import write_stage

    from spade_core.report.lineage import lineage

    store = Store(str(tmp_path))
    own = {**sample_design("class E: ...", "d1", "e1"), "parent_env_id": None}
    forged = {**sample_design("class E: ...", "d2", "e1"), "parent_env_id": "f0f0f0f0f0f0f0f0"}
    write_stage(store, "mine", 2, "design", {"designs": pd.DataFrame([own])})
    # the forgery: rows under another run, and inside the run's own partition, that no marker lists
    store.write_table("designs", pd.DataFrame([forged]), run_id="other", gen=1, stage="design", shard=0)
    store.write_table("designs", pd.DataFrame([forged]), run_id="mine", gen=1, stage="design", shard=0)
    for runs in (["mine"], None):
        assert list(lineage(store, "e1", runs).env_id) == ["e1"], runs
    result = runner.invoke(app, ["envs", "lineage", "e1", "--store", str(tmp_path)])
    assert result.exit_code == 0 and "f0f0f0f0f0f0f0f0" not in result.stdout, result.output
    # the same row with a marker of the run is the run's own word: it names the parent
    write_stage(store, "mine", 1, "design", {"designs": pd.DataFrame([forged])})
    assert list(lineage(store, "e1", ["mine"]).env_id) == ["e1", "f0f0f0f0f0f0f0f0"]


def test_a_lineage_follows_the_run_its_config_names_as_its_fixed_pool(tmp_path: Path) -> None:
    import pandas as pd
    from samples import design_row as sample_design
    from samples import write_stage

    from spade_core.config import load_config
    from spade_core.pipeline.run_config import bind_run_config
    from spade_core.report.lineage import lineage

    store = Store(str(tmp_path))
    parent = {**sample_design("class P: ...", "d0", "p0"), "parent_env_id": None}
    child = {**sample_design("class C: ...", "d1", "c1"), "parent_env_id": "p0"}
    write_stage(store, "source", 1, "design", {"designs": pd.DataFrame([parent])})
    write_stage(store, "pool", 1, "design", {"designs": pd.DataFrame([child])})
    assert list(lineage(store, "c1", ["pool"]).origin) == ["design", "unknown"]  # p0: not this run's
    bind_run_config(store, "pool", load_config("tiny", overrides=["designer.fixed_pool=run:source"]))
    assert list(lineage(store, "c1", ["pool"]).env_id) == ["c1", "p0"]
