"""The offline built-in data set: synthetic product-review polarity, generated deterministically.

Why it gives a meaningful score: validation and test sentences use sentiment words that never occur in training
("superb", "dreadful", ...), so a model can only get them right from what the encoder already knows about English.
A pretrained encoder scores well above chance; the same model from random init stays near chance on them. About a
fifth of the sentences are negated ("is not great" is negative), so a bag of words is not enough either.
"""

from __future__ import annotations

import random

LABELS = ["negative", "positive"]

NOUNS = ["phone", "camera", "battery", "screen", "player", "router", "printer", "laptop", "charger", "speaker",
         "headset", "keyboard", "monitor", "software", "app", "case", "lens", "remote", "tablet", "watch"]
# Train and held-out sentiment words are disjoint on purpose (see the module docstring).
POSITIVE = {
    "train": ["good", "great", "excellent", "nice", "amazing", "perfect", "wonderful", "fantastic", "reliable",
              "awesome", "impressive", "solid"],
    "heldout": ["superb", "outstanding", "terrific", "brilliant", "marvelous", "flawless", "splendid", "delightful"],
}
NEGATIVE = {
    "train": ["bad", "terrible", "awful", "poor", "horrible", "useless", "broken", "disappointing", "cheap",
              "annoying", "flimsy", "defective"],
    "heldout": ["dreadful", "lousy", "pathetic", "abysmal", "atrocious", "shoddy", "miserable", "dismal"],
}
ADVERBS = ["", "really ", "very ", "quite ", "truly ", "pretty ", "so "]
TEMPLATES = [
    "the {noun} is {adv}{adj}",
    "this {noun} was {adv}{adj}",
    "i think the {noun} is {adv}{adj}",
    "overall the {noun} seems {adv}{adj}",
    "my new {noun} is {adv}{adj} , {adj2} even",
    "the {noun} turned out {adv}{adj}",
    "honestly , a {adv}{adj} {noun}",
]
NEGATED = [
    "the {noun} is not {adv}{adj}",
    "this {noun} was not {adj} at all",
    "i would not call the {noun} {adj}",
    "the {noun} is far from {adj}",
]


def _sentence(rng: random.Random, words: str) -> tuple[str, str]:
    label = rng.randrange(2)
    negate = rng.random() < 0.2
    # A negated sentence says "not <word of the other polarity>".
    pool = (NEGATIVE if label else POSITIVE) if negate else (POSITIVE if label else NEGATIVE)
    adj, adj2 = rng.choice(pool[words]), rng.choice(pool[words])
    template = rng.choice(NEGATED if negate else TEMPLATES)
    text = template.format(noun=rng.choice(NOUNS), adv=rng.choice(ADVERBS), adj=adj, adj2=adj2)
    return text, LABELS[label]


def generate(split: str, n: int, seed: int = 0) -> list[dict]:
    """Rows `{"text", "text_pair": None, "label"}`; train uses the training words, val/test the held-out ones."""
    offset = {"train": 0, "val": 1, "test": 2}[split]
    rng = random.Random(seed * 10 + offset)
    words = "train" if split == "train" else "heldout"
    return [dict(zip(("text", "label"), _sentence(rng, words)), text_pair=None) for _ in range(n)]
