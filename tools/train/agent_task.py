"""The tool-use task of the assistant model (the recipe `tool_agent` of train.py, and eval_agent.py).

An episode is one agent run of examples/templates/tool_agent.yaml: the system text and the tool docs of
`calculator` and `search_docs` (the tools hypic ships, sdk/builtin_tools), one user question, then the
model's replies and the tool results, until it answers without a call. Four kinds of question:

  calc       "What is 347 * 29?"           -> calculator {expression}               -> answer the result
  docs       "What is the code of Kelmo?"  -> search_docs {query: "code of Kelmo"}  -> answer from the chunks
  docs_calc  "What is the code of Kelmo plus 250?" -> search_docs, then calculator   -> answer the result
  direct     "Say hello to Kelmo."         -> the answer, no tool call

Text is rendered with the model's real chat template through transformers' Jinja renderer (the reference
hypic's chat formats equal byte for byte), in either format: "qwen3" (JSON tool calls) or "qwen3.5"
(XML tool calls). The transcript of an episode is what hypic's Agent runs through the model: the prompt
with the generation prompt, each reply followed by <|im_end|>, and after a tool call the text the Agent
appends (the rendered tool message and the next generation prompt; sdk/agent.cc continuation_text).
Seeds as in task.py: evaluation seeds < 1_000_000, training seeds >= 1_000_000.
"""
from __future__ import annotations

import os
import random
import re

import task

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TEMPLATE_FILES = {
    "qwen3": os.path.join(REPO, "tests", "fixtures", "chat", "qwen3_chat_template.jinja"),
    "qwen3.5": os.path.join(REPO, "tests", "fixtures", "chat", "qwen3.5_chat_template.jinja"),
}
FORMATS = tuple(TEMPLATE_FILES)
KINDS = ("calc", "docs", "docs_calc", "direct")

# The system text and tools of examples/templates/tool_agent.yaml (eval_agent.py checks that hypic renders
# the same prompt). Key order matters: the templates write each tool with `tojson` in insertion order.
SYSTEM_TEXT = ("You are Hypic, a small assistant. Use calculator for arithmetic and search_docs for questions "
               "about the documents; otherwise answer directly.")
TOOLS = [
    {"type": "function", "function": {
        "name": "calculator", "description": "Evaluate an arithmetic expression.",
        "parameters": {"type": "object", "properties": {"expression": {"type": "string"}},
                       "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "search_docs", "description": "Search the document collection and return the best matching chunks.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "k": {"type": "integer"}},
                       "required": ["query"]}}},
]
SEARCH_K = 4  # search_docs' default k (sdk/builtin_tools.h)


# ----------------------------------------------------------------------------------------------------------
# Rendering (transformers' Jinja environment: its tojson keeps key order, as the real servers do)
# ----------------------------------------------------------------------------------------------------------

class Renderer:
    def __init__(self, fmt: str):
        from transformers.utils.chat_template_utils import render_jinja_template
        self.fmt = fmt
        self._render = render_jinja_template
        with open(TEMPLATE_FILES[fmt]) as f:
            self.template = f.read()

    def render(self, messages, add_generation_prompt: bool) -> str:
        out, _ = self._render([messages], tools=TOOLS, chat_template=self.template,
                              add_generation_prompt=add_generation_prompt, enable_thinking=False)
        return out[0]

    def prompt(self, question: str) -> str:
        return self.render([{"role": "system", "content": SYSTEM_TEXT}, {"role": "user", "content": question}], True)

    def reply_body(self, assistant: dict) -> str:
        """What the model writes for an assistant message after the generation prompt (without <|im_end|>)."""
        base = [{"role": "user", "content": "q"}]
        head = self.render(base, False)
        full = self.render(base + [assistant], False)
        a = full[len(head):]
        gen = self.render(base, True)[len(head):]  # "<|im_start|>assistant\n<think>\n\n</think>\n\n"
        if a.startswith(gen):
            body = a[len(gen):]
        else:  # Qwen3 writes no empty reasoning section for this message: its header only
            body = a[len("<|im_start|>assistant\n"):]
        if not body.endswith("<|im_end|>\n"):
            raise ValueError(f"unexpected assistant rendering {a!r}")
        return body[: -len("<|im_end|>\n")]

    def continuation(self, assistant: dict, tool_msgs) -> str:
        """The text hypic's Agent appends after a reply that called tools (sdk/agent.cc continuation_text)."""
        msgs = [{"role": "user", "content": "continue"}, assistant] + list(tool_msgs)
        text = self.render(msgs, True)
        head = self.render(msgs[:1], False)
        end = text.index("<|im_end|>", len(head)) + len("<|im_end|>")
        return text[end:]


SENTINEL = "QQSENTINELQQ"


class FastRenderer(Renderer):
    """Renderer with each text shape rendered once, with a sentinel where the variable text goes, then filled
    in (the templates insert these texts verbatim: no whitespace to trim, no characters tojson escapes).
    check() compares it with the plain Renderer."""

    def __init__(self, fmt: str):
        super().__init__(fmt)
        self._cache = {}

    def _shape(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    @staticmethod
    def _fill(shape: str, value: str) -> str:
        if value != value.strip() or '"' in value or "\\" in value or SENTINEL in value:
            raise ValueError(f"text the fast renderer cannot place: {value!r}")
        return shape.replace(SENTINEL, value)

    def prompt(self, question: str) -> str:
        return self._fill(self._shape("prompt", lambda: super(FastRenderer, self).prompt(SENTINEL)), question)

    def reply_body(self, assistant: dict) -> str:
        if assistant.get("tool_calls"):
            (call,) = assistant["tool_calls"]
            fn = call["function"]
            (key, value), = fn["arguments"].items()
            shape = self._shape(("call", fn["name"], key), lambda: super(FastRenderer, self).reply_body(
                tool_call_message(fn["name"], {key: SENTINEL}, call["id"])))
            return self._fill(shape, value)
        shape = self._shape("answer", lambda: super(FastRenderer, self).reply_body(
            {"role": "assistant", "content": SENTINEL}))
        return self._fill(shape, assistant["content"])

    def continuation(self, assistant: dict, tool_msgs) -> str:
        (tm,) = tool_msgs
        (call,) = assistant["tool_calls"]
        fn = call["function"]
        (key, value), = fn["arguments"].items()
        shape = self._shape(("cont", fn["name"], key), lambda: super(FastRenderer, self).continuation(
            tool_call_message(fn["name"], {key: "x"}, call["id"]), [dict(tm, content=SENTINEL)]))
        value = tm["content"]
        if value != value.strip() or SENTINEL in value:
            raise ValueError(f"text the fast renderer cannot place: {value!r}")
        return shape.replace(SENTINEL, value)


def check_fast_renderer(n: int = 200, seed: int = 123) -> int:
    """Renders n random episodes both ways; returns how many differ (0 expected)."""
    bad = 0
    rng = random.Random(seed)
    for fmt in FORMATS:
        slow, fast = Renderer(fmt), FastRenderer(fmt)
        for _ in range(n):
            ep = episode(rng, rng.choice(KINDS), task.Namer(rng))
            bad += transcript(slow, ep) != transcript(fast, ep)
    return bad


def tool_call_message(name: str, arguments: dict, call_id: str) -> dict:
    return {"role": "assistant", "content": "",
            "tool_calls": [{"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]}


# ----------------------------------------------------------------------------------------------------------
# Episodes
# ----------------------------------------------------------------------------------------------------------

def calculate(expression: str) -> str:
    """The calculator's answer for the integer + - * expressions generated here (its output format)."""
    if not re.fullmatch(r"[0-9+\-* ()]+", expression):
        raise ValueError(expression)
    return str(eval(expression))  # noqa: S307 - digits and + - * only


WORD_OPS = {"+": "plus", "-": "minus", "*": "times"}


def make_expression(rng: random.Random):
    """(expression as the call writes it, expression as the question writes it)."""
    n = 3 if rng.random() < 0.2 else 2
    nums = [str(rng.randint(2, 999)) for _ in range(n)]
    ops = [rng.choice("+-*") for _ in range(n - 1)]
    expr = nums[0] + "".join(f" {o} {x}" for o, x in zip(ops, nums[1:]))
    style = rng.random()
    if style < 0.25 and n == 2:
        spoken = f"{nums[0]} {WORD_OPS[ops[0]]} {nums[1]}"
    elif style < 0.45:
        spoken = expr.replace(" ", "")
    else:
        spoken = expr
    return expr, spoken


CALC_QUESTIONS = ["What is {e}?", "Calculate {e}.", "How much is {e}?", "Compute {e}, please.",
                  "What do you get for {e}?", "Please work out {e}."]
DOC_QUESTIONS = ["{q}", "{q}", "According to the documents: {q}", "Look it up: {q}"]


def doc_fact_question(attr: str, subj: str):
    """(question, search query) for one fact."""
    if attr == task.PLACE_REL:
        return task.question_text(attr, subj), f"{subj} lives"
    return task.question_text(attr, subj), f"{attr} of {subj}"


def direct_task(rng: random.Random, namer: task.Namer):
    name = namer()
    choices = [
        ("Hello!", "Hello! How can I help you?"),
        ("Hi there!", "Hello! How can I help you?"),
        ("What is your name?", "I am Hypic."),
        ("Who are you?", "I am Hypic."),
        ("Thank you!", "You are welcome!"),
        (f"Say hello to {name}.", f"Hello, {name}!"),
        (f"Greet {name}.", f"Hello, {name}!"),
        (f"Repeat the word {name}.", name),
        (f"Please repeat: {name}", name),
        (f"Say goodbye to {name}.", f"Goodbye, {name}!"),
        (f"Which name comes first: {name} or {namer()}?", name),
    ]
    w = [1, 1, 1, 1, 1, 3, 2, 3, 2, 2, 2]
    return rng.choices(choices, weights=w)[0]


def search_result(rng: random.Random, target, others, paths) -> str:
    """search_docs' text: "[path] chunk" paragraphs, the best match usually first (BM25 on a rare name)."""
    k = SEARCH_K if rng.random() < 0.7 else rng.randint(1, SEARCH_K - 1)
    picked = rng.sample(range(len(others)), min(k - 1, len(others)))
    chunks = [(paths[i], others[i]) for i in picked]
    pos = 0 if rng.random() < 0.75 else rng.randint(0, len(chunks))
    chunks.insert(pos, target)
    return "\n\n".join(f"[{p}] {t}" for p, t in chunks)


def make_collection(rng: random.Random, namer: task.Namer, n_docs: int, path_style: int = -1):
    """A document collection: [(path, text, facts)], one short document (one chunk) per file."""
    style = path_style if path_style >= 0 else rng.randrange(3)
    docs = []
    for i in range(n_docs):
        text, facts = task.make_document(rng, namer, home_prob=task.TRAIN_HOME_PROB)
        path = [f"doc_{i:03d}.txt", f"notes/{facts[0][1].lower()}.md", f"{rng.choice(task.NOUN)}_{i}.txt"][style]
        docs.append((path, text.strip(), facts))
    return docs


def episode(rng: random.Random, kind: str, namer: task.Namer, collection=None, search=None):
    """One episode: {"kind", "question", "answer", "steps": [(tool name, arguments, result)], ...}.
    `collection` [(path, text, facts)] holds the documents of docs questions (made here when None);
    `search(query)` gives search_docs' result (simulated from the collection when None)."""
    if kind == "direct":
        q, a = direct_task(rng, namer)
        return {"kind": kind, "question": q, "answer": a, "steps": []}
    if kind == "calc":
        expr, spoken = make_expression(rng)
        q = rng.choice(CALC_QUESTIONS).format(e=spoken)
        r = calculate(expr)
        return {"kind": kind, "question": q, "answer": r, "steps": [("calculator", {"expression": expr}, r)]}
    if collection is None:
        collection = make_collection(rng, namer, rng.randint(4, 10))
    di = rng.randrange(len(collection))
    path, text, facts = collection[di]
    if kind == "docs_calc":
        numeric = [f for f in facts if f[0] != task.PLACE_REL]
        if not numeric:
            return episode(rng, "docs", namer, collection, search)
        attr, subj, value = rng.choice(numeric)
    else:
        attr, subj, value = rng.choice(facts)
    q, query = doc_fact_question(attr, subj)
    if search is None:
        others = [(p, t) for j, (p, t, _) in enumerate(collection) if j != di]
        result = search_result(rng, (path, text), [t for _, t in others], [p for p, _ in others])
    else:
        result = search(query)
    if kind == "docs":
        q = rng.choice(DOC_QUESTIONS).format(q=q)
        return {"kind": kind, "question": q, "answer": value, "steps": [("search_docs", {"query": query}, result)]}
    op = rng.choice("+-*")
    n = str(rng.randint(2, 99) if op == "*" else rng.randint(2, 999))
    q = f"What is the {attr} of {subj} {WORD_OPS[op]} {n}?"
    expr = f"{value} {op} {n}"
    r = calculate(expr)
    return {"kind": kind, "question": q, "answer": r,
            "steps": [("search_docs", {"query": query}, result), ("calculator", {"expression": expr}, r)]}


def transcript(renderer: Renderer, ep: dict):
    """The episode as pieces [(text, is_reply)]: what hypic's Agent runs through the model, replies marked
    (each reply ends with <|im_end|>, which is part of what the model must write)."""
    pieces = [(renderer.prompt(ep["question"]), False)]
    for n, (name, args, result) in enumerate(ep["steps"]):
        call = tool_call_message(name, args, f"call_{n + 1}_0")
        pieces.append((renderer.reply_body(call) + "<|im_end|>", True))
        pieces.append((renderer.continuation(call, [{"role": "tool", "content": result, "tool_call_id": f"call_{n + 1}_0",
                                                     "name": name}]), False))
    pieces.append((renderer.reply_body({"role": "assistant", "content": ep["answer"]}) + "<|im_end|>", True))
    return pieces


# Document questions weigh most: reading the right fact out of returned chunks is the hard part (the
# first run answered 47 % of them; calculator and direct tasks were right every time).
TRAIN_KIND_WEIGHTS = {"calc": 0.2, "docs": 0.4, "docs_calc": 0.2, "direct": 0.2}


def train_episode(rng: random.Random, renderers: dict):
    """One training sequence: an episode in a random format (renderers: format -> FastRenderer)."""
    fmt = rng.choice(FORMATS)
    kind = rng.choices(list(TRAIN_KIND_WEIGHTS), weights=list(TRAIN_KIND_WEIGHTS.values()))[0]
    namer = task.Namer(rng)
    return transcript(renderers[fmt], episode(rng, kind, namer))


def eval_tasks(seed: int, count: int, collection_size: int = 40):
    """The agent evaluation of one seed: a document collection and `count` tasks, the kinds in turn.
    Returns (collection [(path, text, facts)], tasks [{"kind", "question", "answer", "tools"}]); "tools"
    is the list of tool names a right run calls, in order. Documents are one fact-bearing short text each."""
    if not (0 <= seed < task.EVAL_SEED_LIMIT):
        raise ValueError(f"evaluation seeds are 0..{task.EVAL_SEED_LIMIT - 1}")
    rng = random.Random(seed)
    namer = task.Namer(rng)
    collection = make_collection(rng, namer, collection_size, path_style=0)
    tasks = []
    for i in range(count):
        ep = episode(rng, KINDS[i % len(KINDS)], namer, collection, search=lambda q: "")
        tasks.append({"kind": ep["kind"], "question": ep["question"], "answer": ep["answer"],
                      "tools": [s[0] for s in ep["steps"]]})
    return collection, tasks


def first_reply_prompts(seed: int, count: int, fmt: str, renderer: Renderer = None):
    """Prompt + expected first reply (tool call or answer) of evaluation tasks: the validation set train.py
    prints, in the `hypic eval-pic` JSONL shape ({"blocks": [prompt], "answer": first reply})."""
    if not (0 <= seed < task.EVAL_SEED_LIMIT):
        raise ValueError(f"evaluation seeds are 0..{task.EVAL_SEED_LIMIT - 1}")
    renderer = renderer or Renderer(fmt)
    rng = random.Random(seed)
    namer = task.Namer(rng)
    collection = make_collection(rng, namer, 40, path_style=0)
    out = []
    for i in range(count):
        ep = episode(rng, KINDS[i % len(KINDS)], namer, collection)
        pieces = transcript(renderer, ep)
        out.append({"blocks": [pieces[0][0]], "answer": pieces[1][0][: -len("<|im_end|>")], "type": ep["kind"],
                    "format": fmt})
    return out
