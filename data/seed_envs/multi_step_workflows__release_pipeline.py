"""Release pipeline: build, test, get approval for and deploy the right commit, in the required order.

Skill: multi_step_workflows. Kind: tool.
"""

import json
import random

from spade_env import ToolEnv

_SERVICES = ["billing", "search", "checkout", "inventory", "notifications", "auth"]
_MESSAGES = [
    "fix rounding in totals",
    "add retry to client",
    "bump dependencies",
    "improve logging",
    "refactor config loader",
    "speed up cache warmup",
    "handle empty payloads",
    "update translations",
    "tighten input validation",
    "remove dead code",
]
_HEX = "0123456789abcdef"


def _code(rng, prefix, n, taken):
    """A fresh random hex id; ``taken`` guarantees no two ids of an episode collide."""
    while True:
        code = prefix + "".join(rng.choice(_HEX) for _ in range(n))
        if code not in taken:
            taken.append(code)
            return code


class ReleasePipelineEnv(ToolEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.service = rng.choice(_SERVICES)
        self.branch = rng.choice(["main", "release", "stable"])
        self.ticket = f"CHG-{rng.randint(1000, 9999)}"  # approvals are filed against this ticket
        # Commits on several branches, newest first; the task is the newest one on the release branch,
        # which is not always the newest overall.
        self.commits, taken = [], []
        for i in range(6):
            branch = self.branch if i in (1, 3, 4) else rng.choice([self.branch, "feature/ui", "hotfix/login"])
            self.commits.append(
                {
                    "id": _code(rng, "", 7, taken),
                    "branch": branch,
                    "message": rng.choice(_MESSAGES),
                    "age_hours": 2 * i + rng.randint(1, 2),
                }
            )
        self.target = next(c["id"] for c in self.commits if c["branch"] == self.branch)
        # Each commit's pipeline identifiers are fixed up front so the same calls always give the
        # same ids, but they are only revealed as the agent performs the steps in order.
        self.artifact = {c["id"]: _code(rng, "art-", 6, taken) for c in self.commits}
        self.report = {a: _code(rng, "rep-", 6, taken) for a in self.artifact.values()}
        self.approval = {r: _code(rng, "apr-", 6, taken) for r in self.report.values()}
        self.built, self.tested, self.approved = [], [], []
        self.deployed = {"staging": None, "production": None}
        obs = (
            f"Release the newest commit on branch {self.branch} of the {self.service} service to "
            f"production under change ticket {self.ticket}. The release process is strict:\n"
            "1. build(commit_id) builds a commit and returns an artifact id.\n"
            "2. run_tests(artifact_id) tests a built artifact and returns a test report id.\n"
            "3. request_approval(report_id, ticket) returns an approval code for a passing report.\n"
            '4. deploy(artifact_id, environment, approval_code) deploys; environment is "staging" '
            'or "production", and production needs the approval code of that artifact.\n'
            "Use list_commits() to see the recent commits (id, branch, age). Call one tool per "
            "turn, for example:\n"
            '<tool_call>{"name": "list_commits", "arguments": {}}</tool_call>\n'
            "When the right artifact runs in production, reply <answer>done</answer>: the deployment "
            "is checked, and if it is not right yet you may keep using the tools."
        )
        return obs, {}

    def tool_list_commits(self) -> str:
        """List recent commits of the service, newest first: id, branch, age and message."""
        return "\n".join(
            f'{c["id"]}  branch={c["branch"]}  {c["age_hours"]}h ago  "{c["message"]}"' for c in self.commits
        )

    def tool_build(self, commit_id: str) -> str:
        """Build one commit; returns the artifact id."""
        commit_id = str(commit_id).strip().lower()
        if commit_id not in self.artifact:
            return f"error: unknown commit {commit_id[:20]!r}; see list_commits"
        art = self.artifact[commit_id]
        if art not in self.built:
            self.built.append(art)
        return f"build succeeded: artifact {art}"

    def tool_run_tests(self, artifact_id: str) -> str:
        """Run the test suite on a built artifact; returns the test report id."""
        art = str(artifact_id).strip().lower()
        if art not in self.built:
            return f"error: artifact {art[:20]!r} has not been built; call build first"
        if art not in self.tested:
            self.tested.append(art)
        return f"all tests passed for {art}: report {self.report[art]}"

    def tool_request_approval(self, report_id: str, ticket: str) -> str:
        """Request release approval for a passing test report under a change ticket; returns the code."""
        if str(ticket).strip().upper() != self.ticket:
            return f"error: {str(ticket)[:20]!r} is not an open change ticket for {self.service}"
        rep = str(report_id).strip().lower()
        art = next((a for a, r in self.report.items() if r == rep and a in self.tested), None)
        if art is None:
            return f"error: no passing test report {rep[:20]!r}; call run_tests first"
        if art not in self.approved:
            self.approved.append(art)
        return f"approved: approval code {self.approval[rep]} (valid for artifact {art} only)"

    def tool_deploy(self, artifact_id: str, environment: str, approval_code: str = "") -> str:
        """Deploy a built artifact to "staging" or "production" (production needs its approval code)."""
        art, env = str(artifact_id).strip().lower(), str(environment).strip().lower()
        if env not in self.deployed:
            return 'error: environment must be "staging" or "production"'
        if art not in self.built:
            return f"error: artifact {art[:20]!r} has not been built"
        if env == "production":
            code = str(approval_code).strip().lower()
            if art not in self.approved or code != self.approval[self.report[art]]:
                return f"error: production deploys need the approval code issued for {art}"
        self.deployed[env] = art
        return f"deployed {art} to {env}"

    def is_solved(self):
        return self.deployed["production"] == self.artifact[self.target]

    def progress(self):
        art = self.artifact[self.target]
        steps = [art in self.built, art in self.tested, art in self.approved]
        return sum(steps) / 4  # the fourth step, the production deploy, is judged by the answer

    def solution(self):
        art = self.artifact[self.target]
        rep = self.report[art]
        calls = [
            {"name": "build", "arguments": {"commit_id": self.target}},
            {"name": "run_tests", "arguments": {"artifact_id": art}},
            {"name": "request_approval", "arguments": {"report_id": rep, "ticket": self.ticket}},
            {
                "name": "deploy",
                "arguments": {"artifact_id": art, "environment": "production", "approval_code": self.approval[rep]},
            },
        ]
        return " ".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls) + " <answer>done</answer>"
