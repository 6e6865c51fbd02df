"""Query a two-table company directory (employees, departments) to answer a question needing a join.

Skill: data_retrieval. Kind: tool.
"""

import json
import random

from spade_env import ToolEnv

_FIRST = [
    "Alma",
    "Bruno",
    "Carla",
    "Dmitri",
    "Esme",
    "Farid",
    "Greta",
    "Hugo",
    "Irene",
    "Jasper",
    "Kenji",
    "Lucia",
    "Milan",
    "Noor",
    "Oskar",
    "Paula",
    "Quinn",
    "Rosa",
    "Sami",
    "Tilda",
]
_LAST = [
    "Adler",
    "Baker",
    "Castro",
    "Dahl",
    "Engel",
    "Fischer",
    "Guerra",
    "Holm",
    "Ivanova",
    "Jensen",
    "Klein",
    "Lopez",
    "Meyer",
    "Nilsen",
]
_DEPTS = ["Finance", "Legal", "Marketing", "Research", "Logistics", "Support", "Design", "Security"]
_TITLES = ["analyst", "engineer", "coordinator", "specialist", "associate"]
_COLUMNS = {
    "employees": ["id", "name", "title", "dept_id", "extension", "room"],
    "departments": ["id", "name", "manager_id", "floor"],
}


class CompanyDirectoryEnv(ToolEnv):
    max_answers = 2  # the managers are few: unlimited answers would let the agent guess among them

    def reset(self, seed=None):
        rng = random.Random(seed)
        names = rng.sample([f"{first} {last}" for first in _FIRST for last in _LAST], 16)
        depts = rng.sample(_DEPTS, 4)
        emp_ids = [f"E{n}" for n in rng.sample(range(100, 999), 16)]
        extensions = rng.sample(range(2000, 9999), 16)
        self.employees = []
        for i, (eid, name) in enumerate(zip(emp_ids, names, strict=True)):
            self.employees.append(
                {
                    "id": eid,
                    "name": name,
                    "title": rng.choice(_TITLES),
                    "dept_id": f"D{i % 4 + 1}",
                    "extension": str(extensions[i]),
                    "room": f"R-{rng.randint(1, 6)}{rng.randint(10, 49)}",
                }
            )
        self.departments = []
        for d, dname in enumerate(depts):
            members = [e for e in self.employees if e["dept_id"] == f"D{d + 1}"]
            manager = rng.choice(members)
            manager["title"] = "manager"
            self.departments.append(
                {"id": f"D{d + 1}", "name": dname, "manager_id": manager["id"], "floor": str(rng.randint(1, 9))}
            )
        # The subject is never a manager, so the question needs the full employee -> department ->
        # manager -> employee join rather than one lookup.
        managers = [d["manager_id"] for d in self.departments]
        self.subject = rng.choice([e for e in self.employees if e["id"] not in managers])
        dept = next(d for d in self.departments if d["id"] == self.subject["dept_id"])
        self.manager = next(e for e in self.employees if e["id"] == dept["manager_id"])
        # The asked-for field has many possible values, so a guessed answer essentially never wins.
        self.field = rng.choice(["extension", "room", "name"])
        label = {"extension": "phone extension", "room": "office room", "name": "full name"}[self.field]
        self.expected_answer = self.manager[self.field]
        example = {"extension": "4821", "room": "R-312", "name": "Ann Lee"}[self.field]
        obs = (
            f"Question: what is the {label} of the manager of the department that "
            f"{self.subject['name']} works in?\n"
            "The company directory is a small database you can only read through these tools:\n"
            "- list_tables(): table names and their columns\n"
            "- query(table, column, value): all rows of a table whose column equals value "
            "(exact match, case-insensitive)\n"
            "Call one tool per turn, for example:\n"
            '<tool_call>{"name": "query", "arguments": {"table": "employees", "column": "name", '
            '"value": "Ann Lee"}}</tool_call>\n'
            f"Finish with the value only, e.g. <answer>{example}</answer>. You have 2 answers: after a "
            "wrong one you may keep using the tools."
        )
        return obs, {}

    def tool_list_tables(self) -> str:
        """List the tables of the directory and their columns."""
        return "\n".join(f"{t}: {', '.join(cols)}" for t, cols in _COLUMNS.items())

    def tool_query(self, table: str, column: str, value: str) -> str:
        """Return the rows of `table` whose `column` equals `value` (case-insensitive exact match)."""
        table, column = str(table).strip().lower(), str(column).strip().lower()
        if table not in _COLUMNS:
            return f"error: unknown table {table[:40]!r}; tables: {', '.join(_COLUMNS)}"
        if column not in _COLUMNS[table]:
            return f"error: table {table} has no column {column[:40]!r}; columns: {', '.join(_COLUMNS[table])}"
        rows = self.employees if table == "employees" else self.departments
        wanted = " ".join(str(value).split()).lower()
        hits = [r for r in rows if r[column].lower() == wanted]
        if not hits:
            return f"no rows in {table} where {column} = {str(value)[:60]!r}"
        return "\n".join(json.dumps(r) for r in hits[:8]) + ("\n(first 8 rows shown)" if len(hits) > 8 else "")

    def solution(self):
        calls = [
            {"table": "employees", "column": "name", "value": self.subject["name"]},
            {"table": "departments", "column": "id", "value": self.subject["dept_id"]},
            {"table": "employees", "column": "id", "value": self.manager["id"]},
        ]
        text = " ".join(f"<tool_call>{json.dumps({'name': 'query', 'arguments': a})}</tool_call>" for a in calls)
        return text + f" <answer>{self.expected_answer}</answer>"
