"""BFCL multi-turn executor and checker, run INSIDE the jail (never executed by the host).

The host reads this file as text and runs it with :func:`sandbox.oneshot.run_program` under the jail's
Python 3.11, with ``bfcl_eval`` and ``mpmath`` bound read-only under ``/pkgs``; keep it 3.11-compatible and
standard library + those two. ``INPUT`` is ``{"jobs": [...]}``; ``OUTPUT`` is one result per job:

- ``{"kind": "execute", "entry": E, "steps": [[call, ...], ...]}``: replay every step from the entry's
  initial state with BFCL's ``execute_multi_turn_func_call`` and return the last step's results (list of
  strings). Replaying makes each job stateless; BFCL's classes are deterministic (seeded ``random``).
- ``{"kind": "check", "entry": E, "decoded": [[[call, ...], ...], ...], "ground_truth": [[call, ...], ...]}``:
  BFCL's ``multi_turn_checker``; returns ``{"valid", "error_type", "error_message"}``.

``E`` holds ``id``, ``initial_config`` and ``involved_classes``; calls are source strings. Each job gets a
fresh instance namespace and a reset ``decimal`` / ``mpmath`` precision (BFCL's MathAPI sets them globally),
and a failing job reports ``{"error": ...}`` without affecting the others.
"""

import decimal
import sys

PACKAGES = "/pkgs"  # where the host binds bfcl_eval and mpmath, read-only


def _category(entry):
    """BFCL's test category of an entry: its id without the number (``multi_turn_long_context_7``)."""
    return entry["id"].rsplit("_", 1)[0]


def _execute(job, name):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call

    entry, results = job["entry"], []
    for step in job["steps"]:
        results, _ = execute_multi_turn_func_call(
            func_call_list=step,
            initial_config=entry["initial_config"],
            involved_classes=entry["involved_classes"],
            model_name=name,
            test_entry_id=entry["id"],
            long_context="long_context" in _category(entry),
            is_evaL_run=False,
        )
    return [str(r) for r in results]


def _check(job, name):
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    result = multi_turn_checker(job["decoded"], job["ground_truth"], job["entry"], _category(job["entry"]), name)
    return {
        "valid": bool(result.get("valid")),
        "error_type": result.get("error_type"),
        "error_message": str(result.get("error_message", ""))[:500],
    }


def run(jobs):
    if PACKAGES not in sys.path:
        sys.path.insert(0, PACKAGES)
    import mpmath

    outputs = []
    for index, job in enumerate(jobs):
        decimal.setcontext(decimal.Context())
        mpmath.mp.dps = 15
        name = f"spade_job{index}"  # BFCL keys its instances by model name and entry id
        try:
            if job["kind"] == "execute":
                outputs.append(_execute(job, name))
            else:
                outputs.append(_check(job, name))
        except Exception as exc:  # AssertionError from the checker included
            outputs.append({"error": f"{type(exc).__name__}: {exc}"[:500]})
    return outputs


if __name__ == "__candidate__":
    OUTPUT = run(INPUT["jobs"])  # type: ignore[name-defined]  # noqa: F821
