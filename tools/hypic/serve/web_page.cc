#include "tools/hypic/serve/web_page.h"

namespace hypic::serve {

// The page talks to /v1/chat/completions with stream=true and include_usage, renders the deltas as they
// come (reasoning greyed, tool calls listed), and shows each reply's TTFT and per-block cache hits from
// the usage chunk's hypic field.
std::string_view web_page_html() {
  static constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hypic chat</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:15px/1.4 system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}
header{padding:10px 16px;background:#23395d;color:#fff;display:flex;gap:12px;align-items:center}
header input{flex:0 0 220px}
#log{max-width:860px;margin:0 auto;padding:16px}
.msg{margin:10px 0;padding:10px 12px;border-radius:8px;white-space:pre-wrap}
.user{background:#dde7f5}.assistant{background:#fff;border:1px solid #ddd}
.reasoning{color:#888;font-style:italic}.tool{font-family:monospace;color:#7a3d00}
.stats{font-size:12px;color:#555;margin-top:6px}.hit{color:#17803d}.miss{color:#b3261e}
form{max-width:860px;margin:0 auto;padding:0 16px 16px;display:flex;gap:8px}
textarea{flex:1;height:60px;font:inherit}button{font:inherit;padding:0 18px}
</style></head><body>
<header><b>hypic</b><span id="model"></span><label>API key <input id="key" type="password"></label></header>
<div id="log"></div>
<form id="f"><textarea id="q" placeholder="Ask something"></textarea><button id="send">Send</button></form>
<script>
const log = document.getElementById('log'), q = document.getElementById('q');
const messages = [];
function headers() {
  const h = {'Content-Type': 'application/json'}, k = document.getElementById('key').value;
  if (k) h['Authorization'] = 'Bearer ' + k;
  return h;
}
function el(cls, text) { const d = document.createElement('div'); d.className = cls; d.textContent = text || ''; return d; }
fetch('/v1/models', {headers: headers()}).then(r => r.json()).then(j => {
  document.getElementById('model').textContent = j.data ? j.data[0].id : '';
}).catch(() => {});
document.getElementById('f').onsubmit = async (ev) => {
  ev.preventDefault();
  const text = q.value.trim(); if (!text) return;
  q.value = '';
  messages.push({role: 'user', content: text});
  log.appendChild(el('msg user', text));
  const box = el('msg assistant'), reasoning = el('reasoning'), answer = el(''), tools = el('tool'), stats = el('stats');
  box.append(reasoning, answer, tools, stats); log.appendChild(box);
  const t0 = performance.now(); let first = 0, content = '', calls = [];
  const res = await fetch('/v1/chat/completions', {method: 'POST', headers: headers(),
    body: JSON.stringify({messages, stream: true, stream_options: {include_usage: true}})});
  if (!res.ok) { answer.textContent = 'error ' + res.status + ': ' + (await res.text()); return; }
  const reader = res.body.getReader(), dec = new TextDecoder(); let buf = '';
  for (;;) {
    const {value, done} = await reader.read(); if (done) break;
    buf += dec.decode(value, {stream: true});
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const line = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!line.startsWith('data: ') || line === 'data: [DONE]') continue;
      const j = JSON.parse(line.slice(6));
      if (j.error) { answer.textContent += '\n[error] ' + j.error.message; continue; }
      if (j.usage) {
        const h = j.usage.hypic, blocks = h.blocks.map(b => '<span class="' + (b.hit ? 'hit' : 'miss') + '">' +
          b.kind + ' ' + b.tokens + (b.hit ? ' hit' : ' miss') + '</span>').join(' · ');
        stats.innerHTML = 'TTFT ' + first.toFixed(0) + ' ms (engine ' + h.ttft_ms.toFixed(1) + ' ms) · prompt ' +
          j.usage.prompt_tokens + ' tokens, ' + j.usage.prompt_tokens_details.cached_tokens + ' cached, ' +
          h.computed_tokens + ' computed · ' + j.usage.completion_tokens + ' generated<br>blocks: ' + blocks;
        continue;
      }
      const d = j.choices[0].delta;
      if ((d.content || d.reasoning_content || d.tool_calls) && !first) first = performance.now() - t0;
      if (d.reasoning_content) reasoning.textContent += d.reasoning_content;
      if (d.content) { content += d.content; answer.textContent = content; }
      if (d.tool_calls) for (const c of d.tool_calls) {
        calls.push(c); tools.textContent += 'tool call: ' + c.function.name + '(' + c.function.arguments + ')\n';
      }
    }
  }
  const m = {role: 'assistant', content};
  if (calls.length) m.tool_calls = calls.map(c => ({id: c.id, type: 'function', function: c.function}));
  messages.push(m);
  box.dataset.done = '1';
  document.body.dataset.replies = String(Number(document.body.dataset.replies || 0) + 1);
};
// ?q=TEXT sends TEXT once the page has loaded (a shareable question; the headless-browser test uses it).
const first = new URLSearchParams(location.search).get('q');
if (first) { q.value = first; document.getElementById('f').requestSubmit(); }
</script></body></html>
)HTML";
  return kPage;
}

}  // namespace hypic::serve
