"""Chained customer-service APIs: customer -> orders -> order details -> shipment tracking.

Skill: api_orchestration. Kind: tool.
"""

import json
import random

from spade_env import ToolEnv

_FIRST = ["Mara", "Theo", "Ines", "Jonas", "Priya", "Kofi", "Lena", "Ravi", "Sofia", "Tomas", "Yuki", "Elif"]
_LAST = ["Voss", "Okafor", "Lindqvist", "Moreau", "Tanaka", "Novak", "Haddad", "Ferreira", "Kowalski", "Brandt"]
_CITIES = [
    "Rotterdam",
    "Lyon",
    "Leipzig",
    "Porto",
    "Bologna",
    "Gdansk",
    "Aarhus",
    "Graz",
    "Tampere",
    "Brno",
    "Cork",
    "Ghent",
    "Malmo",
    "Bilbao",
]
_STATUS = ["in transit", "at sorting hub", "out for delivery", "held at customs"]
_GOODS = [
    "desk lamp",
    "kettle",
    "headphones",
    "backpack",
    "yoga mat",
    "blender",
    "monitor",
    "bookshelf",
    "chess set",
    "rain jacket",
]


class ParcelTrackingEnv(ToolEnv):
    max_answers = 2  # a handful of cities: unlimited answers would let the agent guess them all

    def reset(self, seed=None):
        rng = random.Random(seed)
        people = rng.sample([f"{first} {last}" for first in _FIRST for last in _LAST], 6)
        ids = rng.sample(range(1000, 9999), 6)
        self.customers = {p: f"C-{i}" for p, i in zip(people, ids, strict=True)}
        self.orders = {}  # customer id -> list of (order id, ISO date)
        self.details = {}  # order id -> (item, tracking code)
        self.tracking = {}  # tracking code -> (status, city)
        order_ids = rng.sample(range(10000, 99999), 30)
        for cid in self.customers.values():
            days = rng.sample(range(1, 29), rng.randint(2, 4))
            # Orders are listed in a shuffled order so "most recent" needs reading the dates.
            self.orders[cid] = [(f"O-{order_ids.pop()}", f"2024-{rng.randint(3, 9):02d}-{d:02d}") for d in days]
            for oid, _ in self.orders[cid]:
                code = "TRK" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ23456789") for _ in range(7))
                self.details[oid] = (rng.choice(_GOODS), code)
                self.tracking[code] = (rng.choice(_STATUS), rng.choice(_CITIES))
        self.name = rng.choice(people)
        cid = self.customers[self.name]
        self.latest = max(self.orders[cid], key=lambda o: o[1])[0]
        self.expected_answer = self.tracking[self.details[self.latest][1]][1]
        self.reached = []  # links of the right chain already followed, for partial reward
        obs = (
            f"Customer {self.name} asks where their MOST RECENT order is right now. Find the city "
            "its shipment is currently in, using these tools (the data is only available through "
            "them):\n"
            "- find_customer(name): the customer id for a full name\n"
            "- list_orders(customer_id): the customer's order ids with order dates\n"
            "- get_order(order_id): the ordered item and the shipment tracking code\n"
            "- track_shipment(tracking_code): the shipment status and current city\n"
            "Call one tool per turn like this:\n"
            '<tool_call>{"name": "find_customer", "arguments": {"name": "Ann Lee"}}</tool_call>\n'
            "When you know the city, reply with only the city name, e.g. <answer>Vienna</answer>. "
            "You have 2 answers: after a wrong one you may keep using the tools."
        )
        return obs, {}

    def tool_find_customer(self, name: str) -> str:
        """Look up a customer's id by full name (e.g. "Ann Lee")."""
        key = " ".join(str(name).split()).lower()
        for person, cid in self.customers.items():
            if person.lower() == key:
                self._reach(person == self.name, "customer")
                return f"customer_id: {cid}"
        return f"error: no customer named {str(name)[:60]!r}"

    def tool_list_orders(self, customer_id: str) -> str:
        """List a customer's orders (order id and order date, YYYY-MM-DD)."""
        orders = self.orders.get(str(customer_id).strip())
        if orders is None:
            return f"error: unknown customer_id {str(customer_id)[:60]!r} (ids look like C-1234)"
        self._reach(str(customer_id).strip() == self.customers[self.name], "orders")
        return "\n".join(f"order {oid}, placed {date}" for oid, date in orders)

    def tool_get_order(self, order_id: str) -> str:
        """Show one order: the item bought and the shipment tracking code."""
        detail = self.details.get(str(order_id).strip())
        if detail is None:
            return f"error: unknown order_id {str(order_id)[:60]!r} (ids look like O-12345)"
        self._reach(str(order_id).strip() == self.latest, "order")
        return f"order {order_id}: item {detail[0]}, tracking_code {detail[1]}"

    def tool_track_shipment(self, tracking_code: str) -> str:
        """Track a shipment by its tracking code: status and current city."""
        code = str(tracking_code).strip().upper()
        info = self.tracking.get(code)
        if info is None:
            return f"error: unknown tracking_code {str(tracking_code)[:60]!r}"
        self._reach(code == self.details[self.latest][1], "tracking")
        return f"shipment {code}: {info[0]}, currently in {info[1]}"

    def _reach(self, on_chain, link):
        if on_chain and link not in self.reached:
            self.reached.append(link)

    def progress(self):
        return len(self.reached) / 5  # stays below 1: only the right answer completes the task

    def solution(self):
        cid = self.customers[self.name]
        code = self.details[self.latest][1]
        calls = [
            ("find_customer", {"name": self.name}),
            ("list_orders", {"customer_id": cid}),
            ("get_order", {"order_id": self.latest}),
            ("track_shipment", {"tracking_code": code}),
        ]
        text = " ".join(f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>" for n, a in calls)
        return text + f" <answer>{self.expected_answer}</answer>"
