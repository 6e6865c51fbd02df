"""Write one sentence that uses every word of a list: a parent family of the designer's test bed, whose
parameter _WORDS sets the difficulty by its length (how many words the sentence must hold).

Skill: logical_deduction (nominal: in the test bed the family is the parent of every game skill). Kind: game.
Not part of the seed library: benchmarks/designer_learning.py --family words runs the test bed with
designer.parents: use_the_words, so the designer writes a new _WORDS for this parent.

The observation asks for one sentence that uses the distinct non-blank words of _WORDS (a string is split on
white space), e.g. "Write one sentence that uses all of these words: falcon, copper." The first reply is final:
reward 1 if it holds every word (case-insensitive, as a substring), else 0. No \\boxed{} is needed (the step
reads the whole reply, or the boxed part where the rollout passes only that); solution() boxes its sentence,
as the validator asks of a game.

Measured base win rate by words asked for (the embedded SmolLM2-135M, no hint, the designer-bench preset's
sampling and limits, 4 word sets x 4 plays each, evaluation seeds 2**32 + i, ad hoc at load ~1 on 2 cores;
2026-12-06): 1: 0.88, 2: 0.50, 3: 0.31, 4: 0.06, 6: 0.06, 8: 0.06, 10: 0.00; with the benchmark's one word
set, 16 plays each: 1: 1.00, 2: 0.63, 3: 0.19, 4: 0.00, 6-10: 0.19 (replies that repeat the whole list).
Unlike the people family (data/seed_envs/difficulty/), it runs from near 1 to near 0 within four words; but
the untrained designer wrote back the parent,
or nothing, in all 48 designs from parents of 2 and 3 words (benchmarks/README.md, designer_learning.py).
"""

_WORDS = ["falcon", "copper", "meadow"]


class UseTheWordsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        items = _WORDS.split() if isinstance(_WORDS, str) else [str(w) for w in _WORDS]
        self.words = list(dict.fromkeys(w.strip() for w in items if w.strip())) or ["falcon"]
        self.done = False
        return "Write one sentence that uses all of these words: %s." % ", ".join(self.words), {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.done = True
        said = str(action).lower()
        missing = [w for w in self.words if w.lower() not in said]
        if not missing:
            return "Correct.", 1.0, True, False, {"correct": True}
        return "Wrong: the sentence lacks %s." % ", ".join(missing), 0.0, True, False, {}

    def solution(self):
        return "\\boxed{%s.}" % " ".join(self.words)
