"""End-to-end checks of `hypic serve` with the real `openai` client package (run by serve_openai_test.sh).

Usage: serve_openai_client.py URL_QWEN3 URL_QWEN35 TEMPLATES_DIR. The first server requires API keys k1 and k2,
has room for one running and one waiting request and serves the templates of TEMPLATES_DIR
(examples/templates); the second speaks the Qwen3.5 chat format (XML tool calls).
Every check raises AssertionError with what differed."""
import json
import sys
import threading
import time
import urllib.error
import urllib.request

import openai

URL3, URL35, TEMPLATES = sys.argv[1], sys.argv[2], sys.argv[3]
MODEL = "hypic-qa-tiny"
TOOLS = [{"type": "function", "function": {
    "name": "lookup", "description": "Look a word up in the dictionary.",
    "parameters": {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}}}]


def client(url, key):
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)


def http(method, url, body=None, key=None):
    req = urllib.request.Request(url, method=method, data=None if body is None else body)
    if key:
        req.add_header("Authorization", "Bearer " + key)
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(url, key, name):
    _, text = http("GET", url + "/metrics", key=key)
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError("no metric " + name)


def check(cond, what):
    if not cond:
        raise AssertionError(what)
    print("ok -", what.split(":")[0])


def messages(question, docs=()):
    parts = [{"type": "text", "text": d, "cache": True} for d in docs] + [{"type": "text", "text": question}]
    return [{"role": "system", "content": "You answer questions about the documents."},
            {"role": "user", "content": parts}]


c1, c2 = client(URL3, "k1"), client(URL3, "k2")

# --- models, health, auth ---
check([m.id for m in c1.models.list().data] == [MODEL], "models.list names the served model")
check(http("GET", URL3 + "/health")[0] == 200, "health: open without a key")
try:
    client(URL3, "wrong").models.list()
    raise AssertionError("a wrong key was accepted")
except openai.AuthenticationError as e:
    check(e.status_code == 401 and e.body["type"] == "authentication_error", "wrong key: 401 in OpenAI's error shape")
check(http("GET", URL3 + "/v1/models")[0] == 401, "no key: 401")

# --- chat, non-streamed and streamed agree (greedy) ---
kw = dict(model=MODEL, temperature=0, max_tokens=12)
docs = ["Paris is the capital of France.", "Oslo is the capital of Norway.", "Rome is the capital of Italy."]
r = c1.chat.completions.create(messages=messages("What is the capital of France?", docs), **kw)
text = r.choices[0].message.content
check(isinstance(text, str) and r.choices[0].finish_reason in ("stop", "length"), "chat: a reply and a finish reason")
u = r.usage
check(u.prompt_tokens > 0 and u.completion_tokens > 0 and u.total_tokens == u.prompt_tokens + u.completion_tokens,
      "chat usage: %s" % u)
hy = u.model_extra["hypic"]
kinds = [b["kind"] for b in hy["blocks"]]
check(kinds.count("document") == 3, "chat: each cached document part is a block: %s" % kinds)
check(sum(b["tokens"] for b in hy["blocks"]) < u.prompt_tokens, "chat: blocks plus the query tail make the prompt")

chunks = list(c1.chat.completions.create(messages=messages("What is the capital of France?", docs), stream=True,
                                         stream_options={"include_usage": True}, **kw))
streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
check(streamed == text, "stream: the deltas join to the non-streamed reply: %r vs %r" % (streamed, text))
check(chunks[-1].usage is not None and not chunks[-1].choices, "stream: the last chunk carries the usage")
check(any(ch.choices and ch.choices[0].finish_reason for ch in chunks), "stream: a chunk carries the finish reason")
check(chunks[-1].usage.prompt_tokens_details.cached_tokens > 0, "stream: the repeated prompt was served from the cache")

# Documents in another order: every document block is a hit (position-independent reuse).
r2 = c1.chat.completions.create(messages=messages("What is the capital of France?", docs[::-1]), **kw)
b2 = r2.usage.model_extra["hypic"]["blocks"]
check(all(b["hit"] for b in b2 if b["kind"] == "document"), "reordered documents are all hits: %s" % b2)

# --- tenant isolation: key k2 and a cache salt never hit k1's blocks ---
r3 = c2.chat.completions.create(messages=messages("What is the capital of France?", docs), **kw)
b3 = r3.usage.model_extra["hypic"]["blocks"]
check(not any(b["hit"] for b in b3) and r3.usage.prompt_tokens_details.cached_tokens == 0,
      "tenant isolation: key k2 gets no hit on k1's blocks: %s" % b3)
check(r3.choices[0].message.content == text, "tenant isolation: the same answer, computed")
r4 = c1.chat.completions.create(messages=messages("What is the capital of France?", docs), extra_body={"cache_salt": "s"},
                                **kw)
check(not any(b["hit"] for b in r4.usage.model_extra["hypic"]["blocks"]), "cache_salt: a new namespace, no hits")

# --- a server-side template (--templates examples/templates) named through extra_body ---
qa = json.load(open(TEMPLATES + "/qa_docs.vars.json"))[0]
tvars = {"docs": qa["docs"], "question": qa["question"]}
t1 = c1.chat.completions.create(messages=[], extra_body={"hypic": {"template": "qa_docs", "vars": tvars}}, **kw)
tb1 = t1.usage.model_extra["hypic"]["blocks"]
check(t1.choices[0].message.content == qa["expected"],
      "template: the model answers over the template's prompt: %r" % t1.choices[0].message.content)
check([b["id"] for b in tb1][:2] == ["system", "intro"] and sum(b["id"].startswith("doc.") for b in tb1) == len(qa["docs"]),
      "template: one block per template block, named by its id: %s" % [b["id"] for b in tb1])
t2 = c1.chat.completions.create(messages=[], extra_body={"hypic": {"template": "qa_docs",
                                                                   "vars": dict(tvars, docs=qa["docs"][::-1])}}, **kw)
tb2 = t2.usage.model_extra["hypic"]["blocks"]
check(all(b["hit"] for b in tb2 if b["id"].startswith("doc.")) and t2.choices[0].message.content == qa["expected"],
      "template: documents in another order are all hits, same answer: %s" % tb2)
t3 = c2.chat.completions.create(messages=[], extra_body={"hypic": {"template": "qa_docs", "vars": tvars}}, **kw)
# (k2's own earlier request cached the bare "<|im_start|>user\n" that the intro block also is.)
check(not any(b["hit"] for b in t3.usage.model_extra["hypic"]["blocks"] if b["id"] == "system" or b["id"].startswith("doc.")),
      "template: tenant k2 gets no hit on k1's blocks: %s" % t3.usage.model_extra["hypic"]["blocks"])
st, body = http("POST", URL3 + "/tokenize", json.dumps({"messages": [], "hypic": {"template": "qa_docs", "vars": tvars}}).encode(),
                "k1")
check(st == 200 and json.loads(body)["count"] == t1.usage.prompt_tokens,
      "template: /tokenize gives the template request's prompt: %s" % body[:100])
st, body = http("GET", URL3 + "/v1/templates", key="k1")
check(st == 200 and [t["id"] for t in json.loads(body)["data"]] == ["qa_docs", "rag_qa", "tool_agent"],
      "template: GET /v1/templates lists them: %s" % body[:200])
for hy, cls, status, param in [({"template": "nope"}, openai.NotFoundError, 404, "hypic.template"),
                               ({"template": "../qa_docs"}, openai.NotFoundError, 404, "hypic.template"),
                               ({"template": "qa_docs", "vars": {"docs": qa["docs"]}}, openai.BadRequestError, 400,
                                "hypic.vars.question"),
                               ({"template": "qa_docs", "vars": dict(tvars, docs="x")}, openai.BadRequestError, 400,
                                "hypic.vars.docs")]:
    try:
        c1.chat.completions.create(messages=[], extra_body={"hypic": hy}, **kw)
        raise AssertionError("accepted %s" % hy)
    except cls as e:
        check(e.status_code == status and e.body["param"] == param and e.body["message"],
              "template error %d, param %s: %s" % (status, param, e.body["message"]))

# --- completions ---
cr = c1.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=6, temperature=0)
cs = "".join(ch.choices[0].text for ch in c1.completions.create(model=MODEL, prompt="The capital of France is",
                                                                    max_tokens=6, temperature=0, stream=True))
check(cr.choices[0].text == cs and cr.usage.completion_tokens > 0, "completions: streamed equals non-streamed")

# --- token logprobs, streamed and not, through the client's own types ---
lr = c1.chat.completions.create(messages=messages("What is the capital of France?", docs), logprobs=True,
                                top_logprobs=3, **kw)
content = lr.choices[0].logprobs.content
check(lr.choices[0].message.content == text, "logprobs: the same greedy reply")
check(len(content) > 0 and "".join(t.token for t in content) == text,
      "logprobs: one entry per token of the reply: %r" % [t.token for t in content])
check(all(t.logprob <= 0 and len(t.top_logprobs) == 3 and t.top_logprobs[0].token == t.token and
          abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6 and bytes(t.bytes).decode("utf-8", "replace") == t.token
          for t in content), "logprobs: greedy tokens are their rows' most likely, with their bytes")
lchunks = list(c1.chat.completions.create(messages=messages("What is the capital of France?", docs), logprobs=True,
                                          top_logprobs=3, stream=True, **kw))
lstream = [t for ch in lchunks if ch.choices and ch.choices[0].logprobs for t in ch.choices[0].logprobs.content]
check([(t.token, round(t.logprob, 4)) for t in lstream] == [(t.token, round(t.logprob, 4)) for t in content],
      "logprobs: the streamed entries are the non-streamed ones")
clp = c1.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=5, temperature=0, logprobs=2)
lp = clp.choices[0].logprobs
check("".join(lp.tokens) == clp.choices[0].text and lp.text_offset[0] == 0 and len(lp.top_logprobs) == len(lp.tokens),
      "completions logprobs: tokens, offsets and alternatives: %s" % lp)
st, body = http("POST", URL3 + "/tokenize", json.dumps({"prompt": "b"}).encode(), "k1")
b_id = json.loads(body)["tokens"][0]
biased = c1.completions.create(model=MODEL, prompt="The capital of France is", max_tokens=3, temperature=0,
                               logit_bias={str(b_id): 100})
check(biased.choices[0].text == "bbb", "logit_bias: +100 makes the token the greedy choice: %r" % biased.choices[0].text)
if r.choices[0].finish_reason == "stop":
    n0 = r.usage.completion_tokens
    ml = c1.chat.completions.create(messages=messages("What is the capital of France?", docs),
                                    extra_body={"min_tokens": n0 + 2}, **kw)
    check(ml.usage.completion_tokens >= n0 + 2, "min_tokens: no end of turn before %d tokens: %s" % (n0 + 2, ml.usage))
for bad in [{"response_format": {"type": "json_object"}}, {"top_logprobs": 2}, {"logit_bias": {"99999999": 1}}]:
    try:
        c1.chat.completions.create(messages=[{"role": "user", "content": "hi"}], **dict(kw, **bad))
        raise AssertionError("accepted %s" % bad)
    except openai.BadRequestError as e:
        check(e.status_code == 400 and e.body["param"] in bad, "400 naming the field for %s" % bad)

# --- tokenize / detokenize ---
st, body = http("POST", URL3 + "/tokenize", json.dumps({"prompt": "hello world"}).encode(), "k1")
ids = json.loads(body)["tokens"]
st2, body2 = http("POST", URL3 + "/detokenize", json.dumps({"tokens": ids}).encode(), "k1")
check(st == 200 and st2 == 200 and json.loads(body2)["prompt"] == "hello world", "tokenize/detokenize round trip")

# --- errors ---
for bad, status, cls in [({"temperature": 5}, 400, openai.BadRequestError),
                         ({"model": "no-such-model"}, 404, openai.NotFoundError),
                         ({"max_tokens": 0}, 400, openai.BadRequestError)]:
    try:
        args = dict(kw, **bad)
        c1.chat.completions.create(messages=[{"role": "user", "content": "hi"}], **args)
        raise AssertionError("accepted %s" % bad)
    except cls as e:
        check(e.status_code == status and "message" in e.body, "error %d for %s" % (status, bad))
st, body = http("POST", URL3 + "/v1/chat/completions", b"x" * (5 << 20), "k1")
check(st == 413 and json.loads(body)["error"]["message"], "413 for a body over the limit")
st, body = http("POST", URL3 + "/v1/chat/completions", b"{not json", "k1")
check(st == 400, "400 for a body that is not JSON")
st, body = http("GET", URL3 + "/v1/nothing", key="k1")
check(st == 404 and json.loads(body)["error"]["type"] == "not_found_error", "404 for an unknown endpoint")

# --- cancellation: a client that leaves mid-stream stops its generation ---
before = metric(URL3, "k1", "hypic_cancelled_total")
stream = c1.chat.completions.create(messages=[{"role": "user", "content": "Tell a long story."}], model=MODEL,
                                    max_tokens=4000, temperature=0, stream=True, extra_body={"ignore_eos": True})
next(iter(stream))
stream.close()
deadline = time.time() + 20
while time.time() < deadline and (metric(URL3, "k1", "hypic_cancelled_total") <= before or
                                  metric(URL3, "k1", "hypic_running_sessions") > 0):
    time.sleep(0.05)
check(metric(URL3, "k1", "hypic_cancelled_total") > before and metric(URL3, "k1", "hypic_running_sessions") == 0,
      "cancellation: the generation stopped and its session was freed")

# --- a full queue: 429 (one running, one waiting) ---
codes = []


def long_request():
    try:
        client(URL3, "k1").chat.completions.create(messages=[{"role": "user", "content": "Count."}], model=MODEL,
                                                   max_tokens=100, temperature=0, extra_body={"ignore_eos": True})
        codes.append(200)
    except openai.RateLimitError as e:
        codes.append(e.status_code)


threads = [threading.Thread(target=long_request) for _ in range(5)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(429 in codes and 200 in codes, "queue full: 429 for some, the others answered: %s" % sorted(codes))

# --- the Qwen3.5 format server: chat, streaming and tools with XML tool calls ---
c35 = client(URL35, "none")
r = c35.chat.completions.create(messages=messages("Define capital.", docs[:1]), tools=TOOLS, model=MODEL,
                                temperature=0, max_tokens=8, extra_body={"chat_template_kwargs": {"enable_thinking": False}})
check(r.choices[0].finish_reason in ("stop", "length", "tool_calls"), "qwen3.5 format: chat with tools answers")
kinds = [b["kind"] for b in r.usage.model_extra["hypic"]["blocks"]]
check({"system", "tools", "document"} <= set(kinds), "qwen3.5 format: system, tool docs and document blocks: %s" % kinds)
with_tools = json.loads(http("POST", URL35 + "/tokenize", json.dumps({"messages": [{"role": "user", "content": "hi"}],
                                                                        "tools": TOOLS}).encode())[1])["count"]
without = json.loads(http("POST", URL35 + "/tokenize",
                          json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode())[1])["count"]
check(with_tools > without + 20, "qwen3.5 format: tokenize renders the tool docs into a chat")
chunks = list(c35.chat.completions.create(messages=[{"role": "user", "content": "Look up 'capital'."}], tools=TOOLS,
                                          tool_choice={"type": "function", "function": {"name": "lookup"}},
                                          model=MODEL, temperature=0, max_tokens=24, stream=True,
                                          extra_body={"chat_template_kwargs": {"enable_thinking": False}}))
check(chunks and chunks[-1].choices[0].finish_reason in ("stop", "length", "tool_calls"),
      "qwen3.5 format: a streamed reply under a named tool_choice ends properly")
print("all end-to-end checks passed")
