"""Audit a warehouse's stock by a script of instructions, each given when the previous one is done.

Skill: data_retrieval. Kind: tool (multi-turn instructions).
"""

import json
import random

from spade_env import InstructionEnv

_CATEGORIES = {
    "tools": ["hammer", "wrench", "drill", "saw", "pliers"],
    "paint": ["primer", "gloss", "matte", "varnish", "stain"],
    "garden": ["hose", "rake", "shears", "trowel", "seeds"],
}
_REASONS = ["low_stock", "overstock", "damaged"]


class StockAuditEnv(InstructionEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.stock = {}
        for category, items in _CATEGORIES.items():
            for item, count in zip(items, rng.sample(range(0, 60), len(items))):
                self.stock["%s-%s" % (category[:3].upper(), item)] = (category, count)
        self.flags = {}
        self.reorders = {}
        self.category = rng.choice(sorted(_CATEGORIES))
        in_category = {sku: n for sku, (c, n) in self.stock.items() if c == self.category}
        self.lowest = min(in_category, key=in_category.get)
        self.highest = max(in_category, key=in_category.get)
        self.reorder_qty = 50 - in_category[self.lowest]
        self.user_messages = [
            "Find the %s item with the lowest stock and flag it as low_stock." % self.category,
            "Order enough of that item to bring its stock up to 50 units.",
            "Flag the %s item with the highest stock as overstock." % self.category,
        ]
        self.criteria = [
            lambda env: env.flags.get(env.lowest) == "low_stock",
            lambda env: env.reorders.get(env.lowest) == env.reorder_qty,
            lambda env: env.flags.get(env.highest) == "overstock",
        ]
        obs = (
            "You audit a warehouse through tools (list_skus, get_stock, flag, reorder). You will get "
            "instructions one at a time; each next one arrives in a tool result once the current one is "
            "done. Reply <answer>done</answer> when told that all steps are complete.\n"
            "Instruction 1: " + self.user_messages[0]
        )
        return obs, {}

    def tool_list_skus(self, category: str) -> str:
        """The SKUs of a category (tools, paint or garden)."""
        skus = sorted(sku for sku, (c, _) in self.stock.items() if c == str(category).strip().lower())
        return ", ".join(skus) if skus else "error: unknown category; categories: " + ", ".join(sorted(_CATEGORIES))

    def tool_get_stock(self, sku: str) -> str:
        """The units in stock of one SKU."""
        sku = str(sku).strip()
        if sku not in self.stock:
            return "error: no SKU %r" % sku[:40]
        return "%s: %d units" % (sku, self.stock[sku][1])

    def tool_flag(self, sku: str, reason: str) -> str:
        """Flag a SKU; reason is one of low_stock, overstock, damaged."""
        sku, reason = str(sku).strip(), str(reason).strip()
        if sku not in self.stock:
            return "error: no SKU %r" % sku[:40]
        if reason not in _REASONS:
            return "error: reason must be one of " + ", ".join(_REASONS)
        self.flags[sku] = reason
        return "flagged %s as %s" % (sku, reason)

    def tool_reorder(self, sku: str, quantity: int) -> str:
        """Order a quantity of a SKU (replaces an earlier order of it)."""
        sku = str(sku).strip()
        if sku not in self.stock:
            return "error: no SKU %r" % sku[:40]
        try:
            quantity = int(quantity)
        except (TypeError, ValueError):
            return "error: quantity must be a whole number"
        if not 1 <= quantity <= 500:
            return "error: quantity must be between 1 and 500"
        self.reorders[sku] = quantity
        return "ordered %d of %s" % (quantity, sku)

    def solution(self):
        calls = [
            {"name": "flag", "arguments": {"sku": self.lowest, "reason": "low_stock"}},
            {"name": "reorder", "arguments": {"sku": self.lowest, "quantity": self.reorder_qty}},
            {"name": "flag", "arguments": {"sku": self.highest, "reason": "overstock"}},
        ]
        return " ".join("<tool_call>%s</tool_call>" % json.dumps(c) for c in calls) + " <answer>done</answer>"
