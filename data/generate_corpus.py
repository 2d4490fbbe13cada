"""Generate the small corpus shipped in data/raw/ (deterministic: same seed, same bytes).

    python data/generate_corpus.py [--out data/raw] [--seed 0]

The text is synthetic English in a question/answer style: short "Q: …\\nA: …"
pairs, one-line facts, little stories, dialogues and glossary entries. Words
are built from roots and affixes (re-connect-ion, un-build-able), so a BPE
tokenizer trained on it learns real subwords rather than whole sentences.
It comes in every input format lmprep reads — blank-line separated .txt,
one-per-line .txt, a .txt split on a literal marker (with CRLF line ends),
gzipped .jsonl and .parquet — and contains a few exact duplicates, empty
documents and decomposed accents, so the prepare stats have something to show.
Only the standard library is used, except pyarrow for the .parquet file.
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import unicodedata
from pathlib import Path

ROOTS = ["act", "build", "connect", "form", "measure", "mark", "paint", "plant", "print", "play", "read", "count",
         "cook", "cover", "order", "fold", "train", "load", "pack", "test", "call", "help", "move", "turn", "wash",
         "work", "write", "check", "clean", "open", "close", "lock", "heat", "fill", "light", "list", "look", "name",
         "need", "place", "plan", "point", "press", "pull", "push", "rain", "sail", "search", "ship", "sort", "start",
         "step", "store", "teach", "track", "trade", "travel", "wait", "walk", "want", "watch", "water", "join",
         "learn", "level", "lift", "limit", "mix", "note", "paint", "print", "record", "repair", "report", "rest",
         "return", "ring", "roll", "sign", "sing", "sketch", "stamp", "stitch", "stretch", "study", "test", "think",
         "tune", "view", "visit", "vote", "weigh", "wrap", "charge", "color", "comfort", "deliver", "develop",
         "discover", "employ", "enjoy", "explain", "follow", "gather", "govern", "harvest", "hunt", "invent", "manage",
         "observe", "organize", "perform", "prepare", "protect", "question", "remember", "shelter", "signal", "solve",
         "support", "translate", "wonder"]
NOUNS = ["apple", "anchor", "badger", "basket", "beacon", "bicycle", "blanket", "boat", "bottle", "bridge", "bucket",
         "cabin", "candle", "canyon", "castle", "cedar", "chair", "clock", "cloud", "comet", "compass", "copper",
         "cottage", "crane", "crystal", "desk", "dolphin", "dragon", "drum", "eagle", "engine", "falcon", "feather",
         "fence", "fern", "field", "flute", "forest", "fountain", "garden", "glacier", "goat", "harbor", "hammer",
         "harp", "hawk", "helmet", "hill", "island", "jacket", "jar", "kettle", "kite", "ladder", "lake", "lamp",
         "lantern", "lemon", "library", "lighthouse", "lizard", "market", "meadow", "mirror", "mountain", "needle",
         "nest", "notebook", "oak", "ocean", "orchard", "otter", "owl", "paddle", "palace", "parrot", "pebble",
         "pencil", "pepper", "piano", "pillow", "pine", "planet", "pond", "pumpkin", "puzzle", "quilt", "rabbit",
         "radio", "raven", "ribbon", "river", "robot", "rocket", "saddle", "satellite", "school", "shell", "shovel",
         "silver", "sparrow", "spoon", "stable", "station", "statue", "stone", "storm", "street", "tablet", "teapot",
         "telescope", "tent", "tiger", "tower", "tractor", "train", "tunnel", "turtle", "valley", "violin", "volcano",
         "wagon", "wall", "whale", "window", "wizard", "wolf", "yard", "zebra"]
ADJECTIVES = ["ancient", "bright", "brave", "calm", "careful", "cheerful", "clever", "cold", "curious", "dark", "deep",
              "distant", "dusty", "eager", "early", "empty", "famous", "fancy", "fast", "gentle", "giant", "golden",
              "green", "happy", "heavy", "hidden", "honest", "huge", "humble", "icy", "kind", "large", "late", "lazy",
              "little", "lively", "lonely", "loud", "lucky", "merry", "mighty", "modern", "narrow", "noisy", "old",
              "patient", "plain", "polite", "proud", "purple", "quick", "quiet", "rapid", "rare", "red", "rough",
              "round", "rusty", "shiny", "shy", "silent", "simple", "slow", "small", "smooth", "soft", "sparkling",
              "steady", "strange", "strong", "sunny", "sweet", "swift", "tall", "tiny", "tired", "warm", "wild",
              "wise", "wooden", "young"]
NAMES = ["Ada", "Alma", "Amir", "Anya", "Arlo", "Bea", "Bruno", "Cara", "Chen", "Dario", "Dev", "Eli", "Elif", "Emeka",
         "Esme", "Farah", "Felix", "Gia", "Hana", "Hugo", "Ines", "Ivan", "Jae", "Jonas", "Kai", "Kalani", "Lars",
         "Lea", "Lina", "Luca", "Maya", "Mei", "Milo", "Nadia", "Nia", "Noor", "Olga", "Omar", "Otto", "Pia", "Priya",
         "Quinn", "Rafa", "Rosa", "Ruben", "Sana", "Sofia", "Taro", "Tessa", "Theo", "Uma", "Vera", "Wren", "Yara",
         "Yusuf", "Zane", "José", "Zoë", "Renée", "Søren", "Chloé", "Łukasz", "Ana", "Björn"]
PLACES = ["bakery", "barn", "beach", "canal", "farm", "ferry", "forge", "garage", "greenhouse", "gym", "harbor",
          "hospital", "hotel", "kitchen", "laboratory", "library", "market", "mill", "museum", "observatory", "office",
          "park", "pier", "post-office", "quarry", "school", "shipyard", "stadium", "station", "studio", "theater",
          "warehouse", "workshop", "zoo"]
CITIES = ["Ashford", "Brightwater", "Cedarvale", "Dunmore", "Eastport", "Fairhaven", "Glenrock", "Highbury",
          "Ironbridge", "Juniper", "Kingsley", "Lakeshore", "Millbrook", "Northwood", "Oakridge", "Pinecrest",
          "Queensbay", "Riverton", "Stonefield", "Thornbury", "Upton", "Westhollow", "Yarrow", "Zephyr"]
COLORS = ["amber", "azure", "crimson", "emerald", "gray", "indigo", "ivory", "lilac", "olive", "orange", "scarlet",
          "teal", "violet", "white"]
FOODS = ["berries", "seeds", "grass", "fish", "honey", "nuts", "leaves", "insects", "fruit", "roots", "bread",
         "cheese", "rice", "soup"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
ADVERBS = ["carefully", "quickly", "slowly", "quietly", "gladly", "gently", "boldly", "neatly", "patiently", "loudly"]
PREFIXES = {"re": "again", "un": "not", "pre": "before", "over": "too much", "mis": "wrongly",
            "out": "better than others", "co": "together"}
SUFFIXES = {"er": "a person or thing that {third}", "able": "able to be {past}", "ing": "the act of {ing}",
            "ment": "the result of {ing}", "ful": "full of {root}", "less": "without {root}",
            "ive": "tending to {root}", "ion": "the process of {ing}"}
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
                "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]


def plural(noun: str) -> str:
    if noun.endswith(("s", "sh", "ch", "x", "z")):
        return noun + "es"
    if noun.endswith("y") and noun[-2] not in "aeiou":
        return noun[:-1] + "ies"
    if noun in ("wolf", "shelf"):
        return noun[:-1] + "ves"
    return noun + "s"


def past(verb: str) -> str:
    if verb.endswith("e"):
        return verb + "d"
    if verb.endswith("y") and verb[-2] not in "aeiou":
        return verb[:-1] + "ied"
    return verb + "ed"


def third_person(verb: str) -> str:
    return plural(verb)


def article(word: str) -> str:
    return "an" if word[0] in "aeiou" else "a"


def stem(root: str) -> str:
    """The root as it joins a vowel suffix: 'write' + 'ing' → 'writing'."""
    return root[:-1] if root.endswith("e") else root


def derived_words(rng: random.Random) -> list[tuple[str, str]]:
    """(word, definition) pairs made from roots and affixes, a few thousand of them."""
    words = []
    for root in ROOTS:
        for prefix, meaning in PREFIXES.items():
            words.append((prefix + root, f"to {root} {meaning}"))
        for suffix, pattern in SUFFIXES.items():
            joined = stem(root) + suffix if suffix[0] in "aeiou" else root + suffix
            meaning = pattern.format(root=root, past=past(root), ing=stem(root) + "ing", third=third_person(root))
            words.append((joined, meaning))
    rng.shuffle(words)
    return words


class Writer:
    """Sentence templates over the word lists, all drawing from one seeded generator."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.glossary = derived_words(rng)

    def pick(self, items):
        return self.rng.choice(items)

    def qa(self) -> str:
        r, noun, name = self.rng, self.pick(NOUNS), self.pick(NAMES)
        a, b = r.randint(0, 20), r.randint(0, 20)
        word, meaning = self.pick(self.glossary)
        options = [
            (f"What does {article(noun)} {noun} need?", f"{article(noun).capitalize()} {noun} needs "
             f"{self.pick(FOODS)} and a {self.pick(ADJECTIVES)} {self.pick(NOUNS)}."),
            (f"How many {plural(noun)} are in the {self.pick(PLACES)}?",
             f"There are {NUMBER_WORDS[a]} {plural(noun)} in the {self.pick(PLACES)}."),
            (f"Where does {name} work?", f"{name} works at the {self.pick(PLACES)} in {self.pick(CITIES)}."),
            (f"What is {NUMBER_WORDS[a]} plus {NUMBER_WORDS[b]}?",
             f"{NUMBER_WORDS[a].capitalize()} plus {NUMBER_WORDS[b]} is {a + b}."),
            (f"What color is the {noun}?", f"The {noun} is {self.pick(COLORS)}."),
            (f"What does \"{word}\" mean?", f"\"{word.capitalize()}\" means {meaning}."),
            (f"Why did {name} {self.pick(ROOTS)} the {noun}?",
             f"Because {name} wanted to {self.pick(ROOTS)} it {self.pick(ADVERBS)}."),
            (f"When will {name} {self.pick(ROOTS)} the {self.pick(ADJECTIVES)} {noun}?",
             f"{name} will do it on {self.pick(WEEKDAYS)}."),
            (f"Is the {noun} {self.pick(ADJECTIVES)}?",
             f"{r.choice(['Yes', 'No'])}, the {noun} is {self.pick(ADJECTIVES)}."),
        ]
        question, answer = self.pick(options)
        return f"Q: {question}\nA: {answer}"

    def fact(self) -> str:
        options = [
            f"The {self.pick(ADJECTIVES)} {self.pick(NOUNS)} lives near the {self.pick(NOUNS)}.",
            f"{self.pick(NAMES)} {past(self.pick(ROOTS))} {self.rng.randint(2, 99)} {plural(self.pick(NOUNS))} "
            f"on {self.pick(WEEKDAYS)}.",
            f"In {self.pick(CITIES)}, every {self.pick(PLACES)} has {article(self.pick(COLORS))} "
            f"{self.pick(COLORS)} door.",
            f"{plural(self.pick(NOUNS)).capitalize()} {self.pick(ROOTS)} {self.pick(ADVERBS)}.",
        ]
        return self.pick(options)

    def story(self) -> str:
        name, noun, place = self.pick(NAMES), self.pick(NOUNS), self.pick(PLACES)
        sentences = [f"Once, {name} found {article(noun)} {noun} behind the {place}."]
        for _ in range(self.rng.randint(3, 7)):
            sentences.append(self.pick([
                f"It was {self.pick(ADJECTIVES)} and very {self.pick(ADJECTIVES)}.",
                f"{name} {past(self.pick(ROOTS))} it {self.pick(ADVERBS)}.",
                f"A {self.pick(ADJECTIVES)} {self.pick(NOUNS)} watched from the {self.pick(NOUNS)}.",
                f"\"Can we {self.pick(ROOTS)} the {noun}?\" asked {self.pick(NAMES)}.",
                f"By {self.pick(WEEKDAYS)}, the {noun} was {self.pick(COLORS)}.",
            ]))
        sentences.append(f"In the end, {name} {past(self.pick(ROOTS))} the {noun} and went home.")
        return "\n".join(" ".join(sentences[i:i + 3]) for i in range(0, len(sentences), 3))

    def dialogue(self) -> str:
        turns = [self.qa() for _ in range(self.rng.randint(2, 4))]
        return "\n".join(turns)

    def definition(self) -> str:
        word, meaning = self.pick(self.glossary)
        return f"{word}: {meaning}. Example: the {self.pick(NOUNS)} is {word}."


def write_txt(path: Path, documents: list[str], separator: str, *, newline: str = "\n") -> None:
    text = separator.join(documents) + "\n"
    path.write_bytes(text.replace("\n", newline).encode("utf-8"))


def write_jsonl_gz(path: Path, records: list[dict]) -> None:
    lines = "".join(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n" for record in records)
    path.write_bytes(gzip.compress(lines.encode("utf-8"), mtime=0))


def write_parquet(path: Path, texts: list[str | None]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": pa.array(range(len(texts)), pa.int32()), "text": pa.array(texts, pa.string())})
    pq.write_table(table, path, compression="zstd", row_group_size=2000)


def with_duplicates(rng: random.Random, documents: list, count: int) -> list:
    """Insert ``count`` exact copies of earlier documents at later positions."""
    for _ in range(count):
        index = rng.randrange(len(documents) // 2)
        documents.insert(rng.randrange(index + 1, len(documents)), documents[index])
    return documents


def generate(out: Path, seed: int) -> None:
    rng = random.Random(seed)
    for folder in ("qa", "facts", "stories", "dialogues", "glossary"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    writer = Writer(rng)
    qa = with_duplicates(rng, [writer.qa() for _ in range(9000)], 40)
    write_txt(out / "qa" / "questions.txt", qa, "\n\n")
    facts = [writer.fact() for _ in range(6000)]
    facts[100:100] = ["", "   "]  # empty documents: dropped by prepare
    write_txt(out / "facts" / "facts.txt", facts, "\n")
    stories = [writer.story() for _ in range(900)]
    stories[7] = unicodedata.normalize("NFD", stories[7] + " Zoë said: café, crème brûlée, naïve.")
    write_txt(out / "stories" / "stories.txt", stories, "<|endoftext|>", newline="\r\n")
    dialogues = [{"id": i, "text": writer.dialogue()} for i in range(1500)]
    dialogues[42]["text"] = ""
    write_jsonl_gz(out / "dialogues" / "dialogues.jsonl.gz", with_duplicates(rng, dialogues, 10))
    glossary: list[str | None] = [writer.definition() for _ in range(3000)]
    glossary[3] = None
    write_parquet(out / "glossary" / "glossary.parquet", glossary)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "raw")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    generate(args.out, args.seed)


if __name__ == "__main__":
    main()
