"""One pyarrow schema per store table (docs/DESIGN.md §4).

``run_id`` and ``gen`` are not columns of the files: they are the hive partitions of the path
(``run={run_id}/gen={g}``) and come back as columns when a table is read. A schema change is explicit:
edit the schema here; writing a frame that does not match it is a :class:`SchemaError` (except that a
frame may lack the nullable columns of :data:`ADDED_COLUMNS`, written as nulls).
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
import pyarrow as pa

_str = pa.string()
TIS_QUANTILES = ("min", "p10", "p50", "p90", "max")  # the spread of a step's TIS weights in train_metrics
_transcript_turn = pa.struct([("role", _str), ("content", _str)])


def _f(name: str, type_: pa.DataType, nullable: bool = False) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


SCHEMAS: dict[str, pa.Schema] = {
    "documents": pa.schema(
        [_f("doc_id", _str), _f("source", _str), _f("title", _str, True), _f("text", _str), _f("n_words", pa.int32())]
    ),
    "designs": pa.schema(
        [
            _f("design_id", _str),
            # 0 = the designer's first reply; k > 0 = the k-th retry of the prompt (validate stage): a repair
            # of the failed reply (designer.repair_rounds) or a fresh design from a fresh document.
            _f("attempt", pa.int32()),
            _f("doc_id", _str, True),
            _f("group_id", _str),
            _f("skill", _str),
            _f("kind", _str),
            _f("prompt", _str),
            _f("completion", _str),
            _f("code", _str, True),
            _f("env_id", _str, True),
            _f("model_ref", _str),
            _f("policy_step", pa.int64()),  # the checkpoint (global step) that wrote the reply
            # The token ids of the prompt as the engine was sent them (the chat template's rendering of ``prompt``,
            # spade_core/designer/prompt_tokens.py); the designer is trained on exactly these. Null where the
            # backend takes text only (openai) and on rows of older writers: the trainer renders ``prompt``.
            _f("prompt_ids", pa.list_(pa.int32()), True),
            # The sampled tokens of the reply and the behaviour log-prob of each (null: the backend gave none);
            # the designer is trained on exactly these tokens, with truncated importance sampling.
            _f("completion_ids", pa.list_(pa.int32()), True),
            _f("logprobs", pa.list_(pa.float32()), True),
            # The code repairs (validation.code_repairs, spade_core/designer/repairs.py) that changed the extracted code
            # before it was validated, in the order they ran; [] = validated as the model wrote it. ``code`` and
            # ``env_id`` are the repaired code and its digest; ``unrepaired_env_id`` is the digest of the code
            # as extracted (equal to env_id when nothing was repaired; null without code). Null on rows of a
            # writer that does not record repairs (see ADDED_COLUMNS).
            _f("repairs", pa.list_(_str), True),
            _f("unrepaired_env_id", _str, True),
            # designer.mode mutate or parameters: the env_id of the parent environment the design rewrote
            # (lineage); null for a design written anew (mode write) and on rows of older writers.
            _f("parent_env_id", _str, True),
        ]
    ),
    "validations": pa.schema(
        [
            _f("design_id", _str, True),
            _f("attempt", pa.int32()),  # the designs row (design_id, attempt) this verdict is about
            _f("env_id", _str, True),  # null when the design's reply held no code
            _f("ok", pa.bool_()),
            _f("error_type", _str, True),
            _f("message", _str, True),
            _f("checks", pa.map_(_str, pa.bool_())),
            _f("seconds", pa.float64()),
            # validation.llm_validator: the judge's verdict ('yes', 'no', 'none': no \boxed{} in its reply, 'error':
            # the model call failed; only 'no' rejects) and its reasoning, cut; null where it did not judge.
            _f("llm_verdict", _str, True),
            _f("llm_reason", _str, True),
        ]
    ),
    # The novelty stage's verdicts on valid designs (memory.novelty_threshold); it never rewrites validations.
    "novelty": pa.schema(
        [
            _f("design_id", _str),
            _f("attempt", pa.int32()),
            _f("env_id", _str),
            _f("novel", pa.bool_()),
            _f("similarity", pa.float64()),
            _f("threshold", pa.float64()),
            # what it was compared with: "embedding" (MiniLM cosine to memory and earlier designs), "parent"
            # (a mutation's share of its parent's lines) or "parameters" (a parameter mutation's share of its
            # parent's parameters left unchanged); null on rows of older writers (= embedding)
            _f("check", _str, True),
        ]
    ),
    # The environments a generation plays, written once by the pool stage: valid designs, replayed memory
    # environments, or the fixed pool. Every later stage reads this table instead of recomputing it.
    "pool": pa.schema(
        [
            _f("env_id", _str),
            _f("design_id", _str, True),
            _f("skill", _str),
            _f("kind", _str),
            _f("code", _str),
            _f("source", _str),  # design | replay | starter | fixed
        ]
    ),
    "hints": pa.schema(
        [
            _f("env_id", _str),
            _f("hint", _str),
            _f("leaks_solution", pa.bool_()),
            _f("model_ref", _str),
            _f("policy_step", pa.int64()),
        ]
    ),
    "episodes": pa.schema(
        [
            _f("episode_id", _str),
            _f("env_id", _str),
            _f("condition", _str),
            _f("seed", pa.int64()),
            # clamp(last reward, -1, 1) if the episode terminated, else 0; 0 on a row with an error_type
            _f("episode_return", pa.float64()),
            _f("turns", pa.int32()),
            # Whether the environment ended the episode (terminated), as opposed to truncation, the turn or
            # context limit, or an error; a tool-use play that did not terminate is masked out of the loss.
            # Null on rows written before the column existed.
            _f("terminated", pa.bool_(), True),
            # A sandbox class (sandbox.outcome.ENV_ERROR_TYPES): the environment broke the play, after
            # rollout.env_retries retries; kept, but left out of win rates and training. model_error: the
            # model call failed after rollout.model_retries retries; left out the same way
            # (sandbox.outcome.is_left_out).
            _f("error_type", _str, True),
            _f("transcript", pa.list_(_transcript_turn)),
            _f("rewards", pa.list_(pa.float64())),
            _f("model_ref", _str),
            _f("token_ids", pa.list_(pa.int32()), True),
            _f("loss_mask", pa.list_(pa.int8()), True),
            # The behaviour policy: the log-prob of each token when it was sampled (0 on environment tokens),
            # aligned with token_ids; null when the backend gave none (then TIS leaves those samples at 1).
            _f("logprobs", pa.list_(pa.float32()), True),
            _f("policy_step", pa.int64()),  # the checkpoint (global step) that played; -1 = no model
        ]
    ),
    "env_scores": pa.schema(
        [
            _f("env_id", _str),
            _f("design_id", _str, True),
            _f("skill", _str),
            _f("win_rate", pa.float64()),
            _f("r_hint", pa.float64()),
            _f("r_no_hint", pa.float64()),
            _f("regret", pa.float64()),
            # The env's stored hint still leaked the solution after its rewrites (rollout.hint_rewrites): no
            # regret term, so regret is 0 (r_hint keeps the hinted plays' mean, for the record) and blend
            # rewards the env by its plateau term only. False for invalid designs.
            _f("hint_leaked", pa.bool_()),
            # No designer reward here: the designer's reward is designer_rewards.reward, over the whole window.
            # Files written when this table had a designer_reward column still read (the column is ignored).
        ]
    ),
    # The designer's reward of each valid design of a generation (and, under scoring.parent_copy_raw, of each
    # refused parent copy), over the generation's whole window of K steps (the reward stage, after the last
    # step); the samples are trained at global step ``train_step``.
    "designer_rewards": pa.schema(
        [
            _f("design_id", _str),
            _f("env_id", _str),
            _f("skill", _str),
            # mean return of every no-hint play over the K steps; null for a refused parent copy rewarded under
            # scoring.parent_copy_raw (never played), as its regret
            _f("window_win_rate", pa.float64(), True),
            _f("regret", pa.float64(), True),  # mean(hinted) - mean(no-hint at the first step); 0 if the hint leaked
            _f("raw", pa.float64()),  # the variant's value before centring
            _f("dropped", pa.bool_()),  # raw < 0: never trained on
            _f("centred", pa.float64(), True),  # raw - its skill's mean over the kept designs
            _f("scale", pa.float64()),
            _f("reward", pa.float64(), True),  # centred * scale: the designer sample's advantage
            _f("train_step", pa.int64()),  # the global step whose batch trains it (first step + D)
        ]
    ),
    # The learning_potential variant's EMA state per skill after a generation's reward stage (the authors
    # keep it in process memory; stored, a resumed run continues it).
    "designer_lp_state": pa.schema(
        [
            _f("skill", _str),
            _f("mu_fast", pa.float64()),
            _f("mu_slow", pa.float64()),
            _f("count", pa.int64()),
            _f("gamma_fast", pa.float64()),
            _f("gamma_slow", pa.float64()),
        ]
    ),
    "memory": pa.schema(
        [
            _f("env_id", _str),
            _f("skill", _str),
            _f("kind", _str),
            _f("code", _str),
            _f("win_rate", pa.float64()),
            _f("regret", pa.float64()),
            _f("gen_added", pa.int64()),
        ]
    ),
    # Every sample one optimizer step trained on: what, with which reward and advantage, from which policy.
    "train_samples": pa.schema(
        [
            _f("step", pa.int64()),  # the global optimizer step (trains checkpoint step -> step + 1)
            _f("role", _str),
            _f("group_id", _str),
            _f("source_id", _str),  # episode_id (agent) or design_id (designer)
            _f("env_id", _str, True),
            _f("skill", _str, True),
            _f("reward", pa.float64()),
            _f("advantage", pa.float64()),
            _f("behaviour_step", pa.int64()),  # the policy_step of the rows it came from
            _f("tokens", pa.int64()),  # trained (loss-masked) tokens
        ]
    ),
    "train_metrics": pa.schema(
        [
            _f("role", _str),
            _f("step", pa.int64()),
            _f("loss", pa.float64()),
            _f("grad_norm", pa.float64(), True),
            _f("reward_mean", pa.float64()),
            _f("reward_std", pa.float64()),
            _f("kl", pa.float64(), True),
            _f("clip_fraction", pa.float64(), True),
            _f("tokens", pa.int64(), True),
            _f("step_seconds", pa.float64(), True),
            _f("learning_rate", pa.float64(), True),
            _f("tis_weight_mean", pa.float64(), True),  # mean truncated importance weight over trained tokens
            _f("tis_clipped_fraction", pa.float64(), True),  # fraction of trained tokens whose weight was clamped
            # the weights' spread over the step's trained tokens (min, 10th, 50th, 90th percentile, max)
            *(_f(f"tis_weight_{k}", pa.float64(), True) for k in TIS_QUANTILES),
            _f("processes", pa.int64(), True),  # training processes of the update (accelerate's num_processes)
        ]
    ),
    "evals": pa.schema(
        [
            _f("suite", _str),
            _f("item_id", _str),
            _f("checkpoint", _str),
            _f("score", pa.float64()),
            _f("passed", pa.bool_(), True),
            _f("response", _str, True),
            # why a failed item failed, where the suite's checker says (BFCL's error_type), or model_error
            _f("error_type", _str, True),
        ]
    ),
}

TABLES: tuple[str, ...] = tuple(SCHEMAS)

# Nullable columns added to a table after writers of it existed: a frame without them is written with nulls
# (as files written before them read back with nulls). Every other column must be in the frame.
ADDED_COLUMNS: dict[str, frozenset[str]] = {
    "designs": frozenset({"repairs", "unrepaired_env_id", "parent_env_id", "prompt_ids"}),
    "novelty": frozenset({"check"}),
    "validations": frozenset({"llm_verdict", "llm_reason"}),
    "evals": frozenset({"error_type"}),
    "train_metrics": frozenset({"processes"}),
}


class SchemaError(ValueError):
    """A frame does not match its table's schema; the message names the table and the column."""


def _example(series: pd.Series) -> Any:
    for value in series:
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            return value
    return None


def _scalar_kind(type_: pa.DataType) -> str | None:
    if pa.types.is_string(type_) or pa.types.is_large_string(type_):
        return "string"
    if pa.types.is_boolean(type_):
        return "bool"
    if pa.types.is_integer(type_):
        return "int"
    if pa.types.is_floating(type_):
        return "float"
    return None


# What a target kind accepts from an inferred kind; a safe cast then rejects lossy values (1.5 -> int).
_ACCEPTS = {"string": {"string"}, "bool": {"bool"}, "int": {"int", "float"}, "float": {"int", "float"}}


def _convert(column: pd.Series, type_: pa.DataType) -> pa.Array:
    target = _scalar_kind(type_)
    if target is None:  # nested (list, struct, map): pyarrow checks the shape itself
        return pa.array(column, type=type_, from_pandas=True)
    inferred = pa.array(column, from_pandas=True)
    if pa.types.is_null(inferred.type):
        return pa.nulls(len(column), type=type_)
    kind = _scalar_kind(inferred.type)
    if kind not in _ACCEPTS[target]:
        raise TypeError(f"holds {inferred.type} values")
    return inferred.cast(type_, safe=True)


def to_arrow(table: str, frame: pd.DataFrame) -> pa.Table:
    """Convert ``frame`` to the table's exact schema, or raise :class:`SchemaError` naming the problem.

    Lossless conversions are accepted (an int column into a float64 field); anything else is not.
    """
    if table not in SCHEMAS:
        raise SchemaError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
    schema = SCHEMAS[table]
    expected, got = list(schema.names), list(frame.columns)
    optional = ADDED_COLUMNS.get(table, frozenset())
    missing = [c for c in expected if c not in got and c not in optional]
    extra = [c for c in got if c not in expected]
    if missing or extra:
        parts = ([f"missing {missing}"] if missing else []) + ([f"unexpected {extra}"] if extra else [])
        raise SchemaError(f"table {table!r}: {'; '.join(parts)} (expected columns {expected})")
    arrays = []
    for field in schema:
        if field.name not in got:  # one of ADDED_COLUMNS
            arrays.append(pa.nulls(len(frame), type=field.type))
            continue
        column = frame[field.name]
        try:
            array = _convert(column, field.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as exc:
            raise SchemaError(
                f"table {table!r}: column {field.name!r} must be {field.type}, got dtype {column.dtype} "
                f"(e.g. {_example(column)!r}): {str(exc).splitlines()[0]}"
            ) from None
        if not field.nullable and array.null_count:
            raise SchemaError(f"table {table!r}: column {field.name!r} has {array.null_count} null value(s)")
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)
