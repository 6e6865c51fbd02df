"""``spade serve`` serves exactly the deployments of prefect.yaml (the e2e test runs one of them)."""

from __future__ import annotations

import yaml

from flows.deployments import PREFECT_YAML, flow_at, runner_deployments


def test_served_deployments_are_those_of_prefect_yaml() -> None:
    specs = yaml.safe_load(PREFECT_YAML.read_text())["deployments"]
    served = runner_deployments()
    assert [(d.flow_name, d.name) for d in served] == [(flow_at(s["entrypoint"]).name, s["name"]) for s in specs]
    assert [d.name for d in served] == ["iteration", "run", "eval"]
    iteration = served[0]
    assert iteration.flow_name == "spade" and iteration.parameters["gen"] is None
    assert iteration.parameters["overrides"] == [] and iteration.description.startswith("One SPADE generation")
