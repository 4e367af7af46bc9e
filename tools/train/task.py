"""The synthetic retrieval-QA task shared by make_tokenizer.py, make_eval.py and train.py.

A prompt is a list of blocks, each tokenized on its own (as `hypic eval-pic` does):
  [system block] [document]... [question tail]
The system block opens the user turn, every document is one block, and the question tail closes the user
turn and opens the assistant turn. The answer is the value of one fact of one document, followed by
<|im_end|>:

  <|im_start|>system\\nAnswer the question from the documents.<|im_end|>\\n<|im_start|>user\\n
  The code of Kelmora is 5831. The old bridge was quiet at night. Pelu lives in Drast.\\n
  ...
  Question: What is the code of Kelmora?<|im_end|>\\n<|im_start|>assistant\\n
  -> 5831<|im_end|>

Names (subjects and places) are random syllable words drawn per seed and values are random 4-digit
numbers, so an evaluation file's facts are new to a model trained on other seeds: it must read them
from the documents. Every subject has exactly one fact and names are unique within a document pool, so
every question has exactly one answer in any prompt drawn from that pool.

Seeds: 0..999_999 are reserved for evaluation and test files (make_eval.py); training draws from
seeds >= 1_000_000 (train.py), the tokenizer corpus from seed 2_000_000_000.
"""
from __future__ import annotations

import random

EVAL_SEED_LIMIT = 1_000_000  # seeds below this are evaluation-only
TRAIN_SEED_BASE = 1_000_000
TOKENIZER_SEED = 2_000_000_000

ONSETS = ["b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "h", "j",
          "br", "dr", "gr", "kr", "tr", "st", "th", "sh", "ch", "pl", "fl", "sk", "qu", "w"]
VOWELS = ["a", "e", "i", "o", "u", "a", "e", "o", "ai", "ou", "ei", "y"]
CODAS = ["", "", "", "n", "r", "l", "s", "m", "x", "rn", "st", "th", "nd"]

NUM_ATTRS = ["code", "number", "pin", "key", "badge", "room", "gate", "seat"]
PLACE_REL = "home"  # "X lives in Y." / "Where does X live?"

ADJ = ["old", "new", "small", "quiet", "busy", "long", "narrow", "bright", "dark", "green", "cold", "warm",
       "wooden", "empty", "little", "famous", "hidden", "tall", "broken", "open"]
NOUN = ["bridge", "road", "garden", "market", "river", "station", "library", "tower", "harbor", "school",
        "house", "square", "forest", "field", "shop", "hall", "village", "lake", "hill", "street"]
VERB = ["was quiet", "was crowded", "stayed open", "looked calm", "was closed", "felt cold", "was busy",
        "looked empty", "was painted", "was cleaned", "was repaired", "smelled of bread", "was full of birds",
        "was lit", "stood still"]
WHEN = ["at night", "in the morning", "all day", "in winter", "in spring", "after the rain", "last week",
        "every evening", "for a while", "on most days", "before noon", "during the fair"]
FILLER_EXTRA = [
    "Nobody remembers who built it.", "Visitors often walk there after lunch.", "The weather was mild.",
    "Some people say it is the best place in the region.", "A few children played near the water.",
    "The records are kept in a blue box.", "Letters arrive there twice a week.",
    "It is a good place to rest.", "Most of the trees there are very old.", "The path is hard to find.",
]

SYSTEMS = [
    "<|im_start|>system\nAnswer the question from the documents.<|im_end|>\n<|im_start|>user\n",
    "<|im_start|>system\nYou are a helpful assistant. Use only the documents below.<|im_end|>\n<|im_start|>user\n",
    "<|im_start|>system\nRead the documents and answer briefly.<|im_end|>\n<|im_start|>user\n",
]
QUESTION_TAIL = "Question: {q}<|im_end|>\n<|im_start|>assistant\n"
# A follow-up turn (training only: several questions per sequence for more answer tokens per forward).
FOLLOWUP_HEAD = "\n<|im_start|>user\n"


def make_name(rng: random.Random) -> str:
    n = rng.choice([2, 2, 2, 3])
    s = "".join(rng.choice(ONSETS) + rng.choice(VOWELS) + (rng.choice(CODAS) if i == n - 1 else "")
                for i in range(n))
    return s[0].upper() + s[1:]


def make_value(rng: random.Random) -> str:
    return str(rng.randint(1000, 9999))


def filler(rng: random.Random) -> str:
    if rng.random() < 0.25:
        return rng.choice(FILLER_EXTRA)
    art = rng.choice(["The", "A", "That"])
    return f"{art} {rng.choice(ADJ)} {rng.choice(NOUN)} {rng.choice(VERB)} {rng.choice(WHEN)}."


class Namer:
    """Draws names that are unique within one pool/prompt."""

    def __init__(self, rng: random.Random):
        self.rng, self.used = rng, set()

    def __call__(self) -> str:
        for _ in range(1000):
            n = make_name(self.rng)
            if n not in self.used:
                self.used.add(n)
                return n
        raise RuntimeError("name space exhausted")


def fact_sentence(attr: str, subj: str, value: str) -> str:
    if attr == PLACE_REL:
        return f"{subj} lives in {value}."
    return f"The {attr} of {subj} is {value}."


def question_text(attr: str, subj: str) -> str:
    if attr == PLACE_REL:
        return f"Where does {subj} live?"
    return f"What is the {attr} of {subj}?"


HOME_PROB = 0.25  # share of facts that are "X lives in Y." (the rest: "The <attr> of X is NNNN.")
TRAIN_HOME_PROB = 0.4  # training sees more of the (harder to learn) place answers


def make_document(rng: random.Random, namer: Namer, n_subjects=(2, 3), n_filler=(1, 2), home_prob=HOME_PROB):
    """Returns (text, facts) where facts = [(attr, subject, value)]. One fact per subject: a subject is
    the key of exactly one value (its numeric attribute, or its home)."""
    facts = []
    for _ in range(rng.randint(*n_subjects)):
        subj = namer()
        a = PLACE_REL if rng.random() < home_prob else rng.choice(NUM_ATTRS)
        facts.append((a, subj, namer() if a == PLACE_REL else make_value(rng)))
    sents = [fact_sentence(*f) for f in facts] + [filler(rng) for _ in range(rng.randint(*n_filler))]
    rng.shuffle(sents)
    return " ".join(sents) + "\n", facts


def make_document_v1(rng: random.Random, namer: Namer):
    """The first training stage's documents (kept to reproduce it): 1-2 subjects with 1-2 facts each, so a
    subject can hold two numeric attributes ("The room of X is .. The pin of X is .."). The model trained on
    these alone reached 69% exact match: it had learned retrieval by subject, not by attribute (README.md)."""
    facts = []
    for _ in range(rng.randint(1, 2)):
        subj = namer()
        seen = set()
        for a in rng.sample(NUM_ATTRS + [PLACE_REL, PLACE_REL], rng.randint(1, 2)):
            if a in seen:
                continue
            seen.add(a)
            facts.append((a, subj, namer() if a == PLACE_REL else make_value(rng)))
    sents = [fact_sentence(*f) for f in facts] + [filler(rng) for _ in range(rng.randint(1, 2))]
    rng.shuffle(sents)
    return " ".join(sents) + "\n", facts


def make_prompt(rng: random.Random, docs, n_questions: int = 1):
    """docs: list of (text, facts) in prompt order. Returns blocks, [(question_tail, answer)].
    The first question tail is the last eval block; further (tail, answer) pairs are follow-up turns."""
    all_facts = [f for _, fs in docs for f in fs]
    qs = rng.sample(all_facts, min(n_questions, len(all_facts)))
    turns = [(QUESTION_TAIL.format(q=question_text(a, s)), v) for a, s, v in qs]
    blocks = [rng.choice(SYSTEMS)] + [d for d, _ in docs]
    return blocks, turns


def eval_prompts(seed: int, count: int, pool: int = 40, min_docs: int = 2, max_docs: int = 8):
    """Evaluation prompts: documents drawn from a per-seed pool (they recur across prompts, in new orders and
    combinations, as retrieved chunks do). Yields {"blocks": [...], "answer": "..."}."""
    if not (0 <= seed < EVAL_SEED_LIMIT):
        raise ValueError(f"evaluation seeds are 0..{EVAL_SEED_LIMIT - 1}")
    rng = random.Random(seed)
    namer = Namer(rng)
    docs = [make_document(rng, namer) for _ in range(pool)]
    for _ in range(count):
        chosen = rng.sample(range(pool), rng.randint(min_docs, min(max_docs, pool)))
        target = rng.choice(chosen)
        attr, subj, value = rng.choice(docs[target][1])
        blocks = [rng.choice(SYSTEMS)] + [docs[c][0] for c in chosen]
        blocks.append(QUESTION_TAIL.format(q=question_text(attr, subj)))
        yield {"blocks": blocks, "answer": value}


def train_sample(rng: random.Random, n_docs: int, n_questions: int, doc_style: str = "v2"):
    """One training sequence's pieces: blocks (system + documents) and question turns (tail, answer)."""
    namer = Namer(rng)
    if doc_style == "v1":
        docs = [make_document_v1(rng, namer) for _ in range(n_docs)]
    else:
        docs = [make_document(rng, namer, home_prob=TRAIN_HOME_PROB) for _ in range(n_docs)]
    return make_prompt(rng, docs, n_questions)


# ----------------------------------------------------------------------------------------------------------
# The long-memory task (the recipe `long_memory` of train.py): three question types over the same documents
#   single   "What is the code of X?"                       one fact, one document
#   multihop "What is the code of the place where X lives?" "X lives in Y." in one document and
#                                                           "The code of Y is N." in another; the answer
#                                                           names the bridge first: "Y, N"
#   update   "What is the code of X?"                       the fact is stated in two documents with two
#                                                           values; the later document in the prompt wins
# An update is a key written twice: the Gated DeltaNet state overwrites it (the delta rule), while a state
# composed without the transfer operator keeps both values; a multi-hop answer needs two facts from two
# blocks at once. The answer of an update question depends on the order of the documents, so the same
# documents in another order have another answer.
#
# moved_homes (make_eval.py / train.py --variant moved_homes; the third training run's task, tools/train/README.md):
# X's home is stated in two documents ("X lives in Y." and, in another, "X lives in Z."), the later one in
# the prompt is where X lives now, and each home has a value somewhere: the multi-hop bridge is itself an
# update ("Where does X live?" becomes an update question), so a multi-hop answer needs three facts from up
# to four blocks and the order of two of them. With attention that carries almost no position signal
# (train.py --partial-rotary 0.03125: 2 of 64 dims), "which home is the later one" is known to a cached
# block only through the ordered linear state, which is what the transfer operator composes.
# ----------------------------------------------------------------------------------------------------------

LONG_TYPES = ("single", "multihop", "update")
# facts: the first two runs' task (hypic-qa-long until run 6); moved_homes: the third run's; meeting: the
# fifth and sixth runs' (the shipped hypic-qa-long; below)
VARIANTS = ("facts", "moved_homes", "meeting")
LONG_SYSTEM = ("<|im_start|>system\nAnswer the question from the documents. A later document replaces what an "
               "earlier one says.<|im_end|>\n<|im_start|>user\n")


def multihop_question(attr: str, person: str) -> str:
    return f"What is the {attr} of the place where {person} lives?"


def multihop_answer(place: str, value: str) -> str:
    """A multi-hop answer names the place it went through, then the value ("Thajogar, 6625"): one step of
    written reasoning. A model of this size did not learn the two lookups in one hidden step (the first
    long-memory run: 24.5 % with the bare value); written out, each step is a single-fact lookup, and the
    exact match checks both."""
    return f"{place}, {value}"


def _distinct_values(rng: random.Random, n: int):
    out = []
    while len(out) < n:
        v = make_value(rng)
        if v not in out:
            out.append(v)
    return out


def long_documents(rng: random.Random, namer: Namer, n_docs: int, n_chain: int, n_update: int, n_single: int,
                   home_prob: float = HOME_PROB, moved_homes: bool = False):
    """Documents of the long-memory task. Returns (texts, items); an item is (type, question, docs, values):
    docs the document indices it needs (may repeat), values its answer (one value; for an update and a
    multi-hop question two: the answer when docs[0] is the later of docs[0] and docs[1], and when docs[1]
    is). Two-document items need n_docs >= 2."""
    sents = [[] for _ in range(n_docs)]
    items = []
    two = n_docs >= 2
    for _ in range(n_chain if two and not moved_homes else 0):
        person, place, attr = namer(), namer(), rng.choice(NUM_ATTRS)
        (value,) = _distinct_values(rng, 1)
        i, j = rng.sample(range(n_docs), 2)
        sents[i].append(fact_sentence(PLACE_REL, person, place))
        sents[j].append(fact_sentence(attr, place, value))
        items.append(("multihop", multihop_question(attr, person), (i, j), (multihop_answer(place, value),)))
        items.append(("single", question_text(PLACE_REL, person), (i,), (place,)))
        items.append(("single", question_text(attr, place), (j,), (value,)))
    for _ in range(n_chain if two and moved_homes else 0):
        person, attr = namer(), rng.choice(NUM_ATTRS)
        homes = (namer(), namer())
        values = _distinct_values(rng, 2)
        i, j = rng.sample(range(n_docs), 2)  # the two statements of X's home
        sents[i].append(fact_sentence(PLACE_REL, person, homes[0]))
        sents[j].append(fact_sentence(PLACE_REL, person, homes[1]))
        k, m = rng.randrange(n_docs), rng.randrange(n_docs)  # each home's value, in any document
        sents[k].append(fact_sentence(attr, homes[0], values[0]))
        sents[m].append(fact_sentence(attr, homes[1], values[1]))
        items.append(("multihop", multihop_question(attr, person), (i, j, k, m),
                      (multihop_answer(homes[0], values[0]), multihop_answer(homes[1], values[1]))))
        items.append(("update", question_text(PLACE_REL, person), (i, j), homes))
        items.append(("single", question_text(attr, homes[0]), (k,), (values[0],)))
        items.append(("single", question_text(attr, homes[1]), (m,), (values[1],)))
    for _ in range(n_update if two else 0):
        subj, attr = namer(), rng.choice(NUM_ATTRS)
        v1, v2 = _distinct_values(rng, 2)
        i, j = rng.sample(range(n_docs), 2)
        sents[i].append(fact_sentence(attr, subj, v1))
        sents[j].append(fact_sentence(attr, subj, v2))
        items.append(("update", question_text(attr, subj), (i, j), (v1, v2)))
    # Single facts fill the documents that have none first, so no document is only filler.
    _single_facts(rng, namer, sents, n_single, home_prob, items)
    return _texts(rng, sents), items


def long_answer(item, order) -> str:
    """The answer of an item when its documents stand in `order` (document indices in prompt order)."""
    kind, _, docs, values = item
    if len(values) == 1:
        return values[0]
    return values[0] if order.index(docs[0]) > order.index(docs[1]) else values[1]


def long_eval_prompts(seed: int, count: int, pool: int = 40, min_docs: int = 2, max_docs: int = 8,
                      variant: str = "facts"):
    """The long-memory evaluation: documents drawn from a per-seed pool of `pool` documents (recurring in new
    orders and combinations), question types in turn (single, multihop, update). Yields
    {"blocks": [...], "answer": "...", "type": "..."}."""
    if not (0 <= seed < EVAL_SEED_LIMIT):
        raise ValueError(f"evaluation seeds are 0..{EVAL_SEED_LIMIT - 1}")
    if pool < max_docs or min_docs < 2:
        raise ValueError("need pool >= max_docs and min_docs >= 2")
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r} (one of {', '.join(VARIANTS)})")
    if variant == "meeting":
        yield from meeting_eval_prompts(seed, count, pool, min_docs, max_docs)
        return
    moved_homes = variant == "moved_homes"
    rng = random.Random(seed)
    namer = Namer(rng)
    texts, items = long_documents(rng, namer, pool, n_chain=pool * 3 // 10, n_update=pool // 4, n_single=pool * 3 // 4,
                                  moved_homes=moved_homes)
    by_type = {t: [it for it in items if it[0] == t] for t in LONG_TYPES}
    for k in range(count):
        item = rng.choice(by_type[LONG_TYPES[k % len(LONG_TYPES)]])
        need = list(dict.fromkeys(item[2]))
        n = rng.randint(max(min_docs, len(need)), max_docs)
        rest = [d for d in range(pool) if d not in need]
        order = need + rng.sample(rest, n - len(need))
        rng.shuffle(order)
        blocks = [LONG_SYSTEM] + [texts[d] for d in order] + [QUESTION_TAIL.format(q=item[1])]
        yield {"blocks": blocks, "answer": long_answer(item, order), "type": item[0]}


# Multi-hop questions twice as often as the others in training: the first run learned single facts and
# updates but not the two-step lookup.
LONG_TRAIN_TYPE_WEIGHTS = {"single": 1, "multihop": 2, "update": 1}


def long_train_sample(rng: random.Random, n_docs: int, n_questions: int, variant: str = "facts"):
    """One training sequence of the long-memory task: blocks (system + fresh documents in index order) and
    question turns (tail, answer), the question types equally likely where the documents allow."""
    if variant == "meeting":
        return meeting_train_sample(rng, n_docs, n_questions)
    moved_homes = variant == "moved_homes"
    namer = Namer(rng)
    two = n_docs >= 2
    texts, items = long_documents(rng, namer, n_docs, n_chain=rng.randint(1, max(1, n_docs // 2)) if two else 0,
                                  n_update=rng.randint(1, max(1, n_docs // 3)) if two else 0,
                                  n_single=rng.randint(1, n_docs), home_prob=TRAIN_HOME_PROB, moved_homes=moved_homes)
    by_type = {t: [it for it in items if it[0] == t] for t in LONG_TYPES}
    kinds = [t for t in LONG_TYPES if by_type[t]]
    order = list(range(n_docs))
    turns, asked = [], set()
    for _ in range(n_questions):
        item = rng.choice(by_type[rng.choices(kinds, weights=[LONG_TRAIN_TYPE_WEIGHTS[k] for k in kinds])[0]])
        if item[1] in asked:
            continue
        asked.add(item[1])
        turns.append((QUESTION_TAIL.format(q=item[1]), long_answer(item, order)))
    return [LONG_SYSTEM] + texts, turns


# ----------------------------------------------------------------------------------------------------------
# meeting (make_eval.py's default / train.py --variant meeting; the fifth and sixth runs' task, README.md):
# besides single facts, some documents move one shared slot, "The meeting is now in P.", each to another
# place, and every such place has a gate ("The gate of P is N.") in some document. The later statement in
# the prompt is where the meeting is:
#   update   "Where is the meeting now?"                           -> P of the last statement
#   multihop "What is the gate of the place where the meeting is?" -> "P, N" (the bridge, then its gate)
# Evaluation prompts carry two or three statements, so the answer depends on the order of the blocks. With
# attention that carries almost no position signal (--partial-rotary 0.03125), a cached block cannot know
# whether its statement is the later one; the Gated DeltaNet state can (a key written again replaces the
# old value, and older writes decay), and hypic composes that state in block order. A state summed without
# the transfer operators (naive) holds every statement alike. Unlike moved_homes, the slot's key is the
# same phrase in every document, so the linear layers need not bind it to a name first.
# ----------------------------------------------------------------------------------------------------------

MEETING_ATTR = "gate"
MEETING_SIMILAR_PROB = 0.4


def meeting_fact(place: str) -> str:
    return f"The meeting is now in {place}."


def meeting_question(kind: str) -> str:
    if kind == "update":
        return "Where is the meeting now?"
    return f"What is the {MEETING_ATTR} of the place where the meeting is?"


def meeting_answer(kind: str, place: str, value: str) -> str:
    return place if kind == "update" else multihop_answer(place, value)


def _single_facts(rng, namer, sents, n_single, home_prob, items):
    """n_single single facts (at least one in every document that has none yet) appended to `sents`."""
    empty = [d for d in range(len(sents)) if not sents[d]]
    for k in range(max(n_single, len(empty))):
        d = empty[k] if k < len(empty) else rng.randrange(len(sents))
        subj = namer()
        attr = PLACE_REL if rng.random() < home_prob else rng.choice(NUM_ATTRS)
        value = namer() if attr == PLACE_REL else make_value(rng)
        sents[d].append(fact_sentence(attr, subj, value))
        items.append(("single", question_text(attr, subj), (d,), (value,)))


def _texts(rng, sents):
    texts = []
    for s in sents:
        s = s + [filler(rng) for _ in range(rng.randint(1, 2))]
        rng.shuffle(s)
        texts.append(" ".join(s) + "\n")
    return texts


def similar_name(rng: random.Random, namer: Namer, other: str) -> str:
    """A new name that starts like `other` (its first two letters: mostly its first token too)."""
    for _ in range(20000):
        n = make_name(rng)
        if n.startswith(other[:2]) and n not in namer.used:
            namer.used.add(n)
            return n
    return namer()


def meeting_documents(rng: random.Random, namer: Namer, n_docs: int, slot_docs, n_single: int,
                      home_prob: float = HOME_PROB, similar_prob: float = 0.0):
    """Documents with the meeting slot stated once in each of `slot_docs`, at distinct places. Each place's
    gate stands in a document that states no meeting place (any document if every one does). Returns
    (texts, items, places): items the single facts (the gates among them), places {doc: (place, gate,
    document of the gate)}.
    similar_prob: the chance that a place after the first starts like an earlier one (training: the
    first checkpoint of this task told two candidate places apart by their first token only)."""
    sents = [[] for _ in range(n_docs)]
    items, places = [], {}
    others = [d for d in range(n_docs) if d not in slot_docs] or list(range(n_docs))
    for d in slot_docs:
        if similar_prob and places and rng.random() < similar_prob:
            place = similar_name(rng, namer, rng.choice([p for p, _, _ in places.values()]))
        else:
            place = namer()
        value = make_value(rng)
        sents[d].append(meeting_fact(place))
        g = rng.choice(others)
        sents[g].append(fact_sentence(MEETING_ATTR, place, value))
        items.append(("single", question_text(MEETING_ATTR, place), (g,), (value,)))
        places[d] = (place, value, g)
    _single_facts(rng, namer, sents, n_single, home_prob, items)
    return _texts(rng, sents), items, places


def meeting_eval_prompts(seed: int, count: int, pool: int, min_docs: int, max_docs: int):
    """The meeting variant's evaluation (see long_eval_prompts). A pool of `pool` documents, a third of them
    stating the meeting place; a multihop or update prompt takes two or three of those, their places' gate
    documents and other documents that state no meeting place, in a random order."""
    if max_docs < 6:
        raise ValueError("the meeting variant needs max_docs >= 6 (three statements and their gates)")
    rng = random.Random(seed)
    namer = Namer(rng)
    slot_docs = rng.sample(range(pool), pool // 3)
    texts, items, places = meeting_documents(rng, namer, pool, slot_docs, n_single=pool * 3 // 4)
    quiet = [d for d in range(pool) if d not in places]
    for k in range(count):
        kind = LONG_TYPES[k % len(LONG_TYPES)]
        if kind == "single":
            item = rng.choice(items)
            need = [item[2][0]]
            answer = item[3][0]
            question = item[1]
        else:
            chosen = rng.sample(slot_docs, rng.randint(2, 3))
            need = list(dict.fromkeys(chosen + [places[d][2] for d in chosen]))
            question = meeting_question(kind)
        n = rng.randint(max(min_docs, len(need)), max_docs)
        rest = [d for d in quiet if d not in need]
        order = need + rng.sample(rest, n - len(need))
        rng.shuffle(order)
        if kind != "single":
            last = max(chosen, key=order.index)
            answer = meeting_answer(kind, places[last][0], places[last][1])
        blocks = [LONG_SYSTEM] + [texts[d] for d in order] + [QUESTION_TAIL.format(q=question)]
        yield {"blocks": blocks, "answer": answer, "type": kind}


def meeting_train_sample(rng: random.Random, n_docs: int, n_questions: int):
    """One training sequence of the meeting variant (see long_train_sample): one to three statements of the
    meeting place (two or three in four of five sequences), in documents in index order."""
    namer = Namer(rng)
    k = 1 if rng.random() < 0.2 else rng.randint(2, min(3, n_docs))
    slot_docs = rng.sample(range(n_docs), min(k, n_docs))
    texts, items, places = meeting_documents(rng, namer, n_docs, slot_docs, n_single=rng.randint(1, n_docs),
                                             home_prob=TRAIN_HOME_PROB, similar_prob=MEETING_SIMILAR_PROB)
    place, value, _ = places[max(slot_docs)]
    turns, asked = [], set()
    kinds = list(LONG_TRAIN_TYPE_WEIGHTS)
    for _ in range(n_questions):
        kind = rng.choices(kinds, weights=[LONG_TRAIN_TYPE_WEIGHTS[t] for t in kinds])[0]
        if kind == "single":
            _, question, _, (answer,) = rng.choice(items)
        else:
            question, answer = meeting_question(kind), meeting_answer(kind, place, value)
        if question in asked:
            continue
        asked.add(question)
        turns.append((QUESTION_TAIL.format(q=question), answer))
    return [LONG_SYSTEM] + texts, turns
