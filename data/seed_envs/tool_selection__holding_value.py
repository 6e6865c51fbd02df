"""Value a share holding in a foreign currency, picking the two useful tools out of many distractors.

Skill: tool_selection. Kind: tool.
"""

import ast
import json
import random

from spade_env import ToolEnv

_TICKERS = ["NVRA", "KLMX", "ORBT", "ZENO", "PLSR", "QUAD", "HELI", "FJRD"]
_CURRENCIES = {
    "EUR": (8800, 9500),
    "GBP": (7500, 8200),
    "CHF": (8400, 9200),
    "CAD": (13000, 14200),
    "SEK": (98000, 112000),
    "JPY": (1380000, 1620000),
}  # ten-thousandths per 1 USD
_CITIES = ["Oslo", "Lima", "Cairo", "Perth", "Quito", "Dakar"]
_OPS = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}


def _arith(node):
    """Evaluate a parsed arithmetic expression with + - * / only (no names, calls or powers)."""
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arith(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_arith(node.left), _arith(node.right))
    raise ValueError("only numbers, + - * / and parentheses are allowed")


class HoldingValueEnv(ToolEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.prices = {t: rng.randint(1500, 60000) for t in _TICKERS}  # cents
        self.rates = {c: rng.randint(lo, hi) for c, (lo, hi) in _CURRENCIES.items()}  # 1e-4 units
        # Redraw the holding until the exact value is not close to x.5, so rounding the float the
        # calculator gives always lands on the same integer as the exact arithmetic below.
        while True:
            self.ticker = rng.choice(_TICKERS)
            self.currency = rng.choice(list(_CURRENCIES))
            self.shares = rng.randint(3, 250)
            exact = self.shares * self.prices[self.ticker] * self.rates[self.currency]  # 1e-6 units
            whole, frac = divmod(exact, 10**6)
            if abs(frac - 500000) > 50000:
                break
        self.expected_answer = str(whole + (frac > 500000))
        self.used = []  # useful tools called with the right arguments (for partial reward)
        obs = (
            f"A client holds {self.shares} shares of {self.ticker}. What is the holding worth in "
            f"{self.currency} at today's prices? Round to the nearest whole {self.currency}.\n"
            "You have these tools; only some of them are useful for this question:\n"
            "- get_stock_price(ticker): today's share price in USD\n"
            "- get_exchange_rate(base, quote): how many units of quote one unit of base buys\n"
            '- calculator(expression): evaluates + - * / arithmetic, e.g. "12.5 * 3"\n'
            "- get_weather(city): today's weather\n"
            "- get_company_news(ticker): the latest headline about a company\n"
            "- translate(text, language): translates a short text\n"
            "- get_time(city): the local time in a city\n"
            "Call one tool per turn, for example:\n"
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>\n'
            "Finish with the whole number only (no currency sign or separators), e.g. "
            "<answer>15230</answer>. A wrong answer does not end the task: keep using the tools and "
            "answer again."
        )
        return obs, {}

    def _use(self, what):
        if what not in self.used:
            self.used.append(what)

    def progress(self):
        # Two useful lookups out of three steps (the answer is the third).
        return len(self.used) / 3

    def tool_get_stock_price(self, ticker: str) -> str:
        """Today's share price of a stock, in USD."""
        ticker = str(ticker).strip().upper()
        if ticker not in self.prices:
            return f"error: unknown ticker {ticker[:12]!r}"
        if ticker == self.ticker:
            self._use("price")
        cents = self.prices[ticker]
        return f"{ticker}: {cents // 100}.{cents % 100:02d} USD per share"

    def tool_get_exchange_rate(self, base: str, quote: str) -> str:
        """How many units of the `quote` currency one unit of the `base` currency buys."""
        base, quote = str(base).strip().upper(), str(quote).strip().upper()
        per_usd = dict(self.rates, USD=10000)
        if base not in per_usd or quote not in per_usd:
            return f"error: unsupported currency pair; supported: {', '.join(sorted(per_usd))}"
        if (base, quote) == ("USD", self.currency):
            self._use("rate")
        rate = per_usd[quote] / per_usd[base]
        # The USD->X quote is exact to 4 decimals; other pairs are rounded to 6 significant digits.
        text = f"{per_usd[quote] / 10000:.4f}" if base == "USD" else f"{rate:.6g}"
        return f"1 {base} = {text} {quote}"

    def tool_calculator(self, expression: str) -> str:
        """Evaluate an arithmetic expression with numbers, + - * / and parentheses."""
        expression = str(expression)
        if len(expression) > 200:
            return "error: expression too long (max 200 characters)"
        try:
            value = _arith(ast.parse(expression.replace(",", ""), mode="eval"))
            text = f"{value:.6f}".rstrip("0").rstrip(".")
        except ZeroDivisionError:
            return "error: division by zero"
        except (SyntaxError, ValueError, TypeError, RecursionError, OverflowError, MemoryError) as exc:
            return f"error: {exc}"
        return f"{expression} = {text}"

    def tool_get_weather(self, city: str) -> str:
        """Today's weather in a city."""
        city = str(city).strip()[:40] or "?"
        seed = sum(ord(ch) for ch in city.lower())
        return f"{city}: {['sunny', 'cloudy', 'rain', 'snow', 'windy'][seed % 5]}, {seed % 30 - 5} C"

    def tool_get_company_news(self, ticker: str) -> str:
        """The latest news headline about a company."""
        ticker = str(ticker).strip().upper()
        if ticker not in self.prices:
            return f"error: unknown ticker {ticker[:12]!r}"
        return f"{ticker}: 'Board announces quarterly meeting; no change to guidance.'"

    def tool_translate(self, text: str, language: str) -> str:
        """Translate a short text into another language."""
        return f"[{str(language)[:20]}] {str(text)[:200]}"

    def tool_get_time(self, city: str) -> str:
        """The local time in a city."""
        city = str(city).strip()[:40] or "?"
        seed = sum(ord(ch) for ch in city.lower())
        return f"{city}: {seed % 24:02d}:{seed * 7 % 60:02d}"

    def solution(self):
        calls = [
            {"name": "get_stock_price", "arguments": {"ticker": self.ticker}},
            {"name": "get_exchange_rate", "arguments": {"base": "USD", "quote": self.currency}},
        ]
        return (
            " ".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
            + f" <answer>{self.expected_answer}</answer>"
        )
