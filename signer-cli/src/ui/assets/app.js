// The approver page. Everything it shows was checked and escaped by signer-cli;
// text only ever goes into the page with textContent (never innerHTML), so even
// a hostile summary cannot become markup. The page holds no key: it sends what the
// human typed (hash prefix, reason) to signer-cli, which checks again and signs.
'use strict';

const $ = (sel) => document.querySelector(sel);

// The page's token: handed over once in the URL fragment (#t=...), which no server
// ever receives; kept in this tab's sessionStorage (per origin, port included) and
// sent with every call. Cookies ignore ports; this token does not.
const TOKEN = (() => {
  const m = /^#t=([A-Za-z0-9_-]+)$/.exec(location.hash);
  if (m) {
    sessionStorage.setItem('signer-token', m[1]);
    history.replaceState(null, '', '/');
  }
  return sessionStorage.getItem('signer-token') || '';
})();

// An element with attributes and children; string children become text nodes.
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const k of kids) e.append(k);
  return e;
}

async function call(method, path, body) {
  const opts = { method, headers: { 'X-Signer-Token': TOKEN }, credentials: 'same-origin' };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch (_) { /* a plain-text refusal */ }
  if (!r.ok) {
    const msg = json && json.message ? `${json.code}: ${json.message}` : `HTTP ${r.status}: ${text}`;
    throw new Error(msg);
  }
  return json;
}

const LABEL = {
  'approve': 'Approve',
  'reject': 'Reject (veto)',
  'revoke': 'Revoke my approval',
  'resolve-succeeded': 'Resolve: it succeeded',
  'resolve-failed': 'Resolve: it failed',
};

// The form that asks, like the terminal does, for the first 8 characters of the
// preview hash and a reason.
function decideForm(item) {
  const f = el('form', { class: 'decide' });
  const sel = el('select', { name: 'decision' });
  for (const d of item.decisions) sel.append(el('option', { value: d }, LABEL[d] || d));
  const confirm = el('input', { name: 'confirm', autocomplete: 'off', maxlength: '64', spellcheck: 'false' });
  const reason = el('input', { name: 'reason', autocomplete: 'off' });
  const btn = el('button', { type: 'submit', name: 'sign' }, 'Sign');
  const err = el('p', { class: 'error', role: 'alert' });
  f.append(
    el('label', {}, 'Decision', sel),
    el('label', {}, 'First 8 characters of the preview hash', confirm),
    el('label', {}, 'Reason (signed with it)', reason),
    btn,
    err,
  );
  f.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    btn.disabled = true;
    err.textContent = '';
    try {
      const r = await call('POST', '/api/decide', {
        proposal_id: item.proposal_id,
        decision: sel.value,
        confirm: confirm.value,
        shown_sha256: item.preview_sha256,
        shown_status: item.status,
        reason: reason.value,
      });
      confirm.value = '';
      reason.value = '';
      logResult(r);
      refresh();
    } catch (e) {
      err.textContent = e.message;
    } finally {
      btn.disabled = false;
    }
  });
  return f;
}

// Fills a card: the proposal exactly as `signer-cli show` prints it, and the
// decisions open to this approver; a proposal that failed a check gets the CLI's
// refusal and no form.
function fill(card, item) {
  card.replaceChildren();
  card.dataset.id = item.proposal_id;
  card.dataset.sig = JSON.stringify(item);
  if (item.unread) {
    card.className = 'proposal refused';
    card.append(
      el('h3', {}, `UNREAD ${item.proposal_id}`),
      el('p', { class: 'error problem' }, item.problem),
      el('p', {}, 'It may have changed: nothing can be signed from this card until it is read again.'),
    );
    return;
  }
  if (!item.checked) {
    card.className = 'proposal refused';
    card.append(
      el('h3', {}, `REFUSED ${item.proposal_id}`),
      el('p', { class: 'error problem' }, item.problem),
      el('p', {}, 'It failed the local checks: nothing can be signed for it.'),
    );
    return;
  }
  card.className = 'proposal';
  card.append(
    el('h3', {}, `${item.proposal_id}  ${item.kind}  ${item.summary}`),
    preview(item.text),
  );
  if (item.decisions.length) card.append(decideForm(item));
}

// The text as `signer-cli show` prints it, one span per line, so that warning
// lines can stand out as the terminal's highlight does (textContent is unchanged).
function preview(text) {
  const pre = el('pre', { class: 'preview' });
  const lines = text.split('\n');
  const last = lines.pop();
  for (const line of lines) {
    const warn = line.startsWith('WARNING: ');
    pre.append(warn ? el('span', { class: 'warning' }, line) : line, '\n');
  }
  pre.append(last);
  return pre;
}

function card(item) {
  const c = el('article', {});
  fill(c, item);
  return c;
}

function logResult(r) {
  const entry = el('div', { class: 'entry' },
    el('p', { class: 'outcome' }, r.outcome),
    card(r.proposal));
  $('#log').prepend(entry);
}

// Re-reads everything the page shows that can still change. One run at a time (a
// change announced during a run starts one more after it), so an older answer
// never lands after a newer one and brings a decided proposal back as pending.
let running = null;
let again = false;
function refresh() {
  if (running) {
    again = true;
    return running;
  }
  running = (async () => {
    try {
      do {
        again = false;
        await refreshOnce();
      } while (again);
    } finally {
      running = null;
    }
  })();
  return running;
}

// The pending list, then every other card. A card whose proposal did not change is
// left alone, so what the human is typing into it survives live updates; a card
// whose proposal left the list (decided here or elsewhere, expired, withdrawn)
// moves to "No longer pending" and shows what it is now.
async function refreshOnce() {
  let st;
  try {
    st = await call('GET', '/api/state');
  } catch (e) {
    $('#problem').hidden = false;
    $('#problem').textContent = e.message;
    return;
  }
  $('#problem').hidden = !st.live_problem;
  $('#problem').textContent = st.live_problem || '';
  $('#who').textContent = `Signing as ${st.me} with ${st.server} (server ${st.server_id})`;
  const box = $('#pending');
  const have = new Map([...box.children].map((c) => [c.dataset.id, c]));
  const seen = new Set();
  for (const item of st.proposals) {
    seen.add(item.proposal_id);
    const old = have.get(item.proposal_id);
    if (!old) {
      box.append(card(item));
    } else if (old.dataset.sig !== JSON.stringify(item)) {
      fill(old, item);
    }
  }
  for (const [id, c] of have) if (!seen.has(id)) $('#moved').prepend(c);
  $('#moved-section').hidden = $('#moved').children.length === 0;
  $('#empty').hidden = st.proposals.length !== 0;
  await rereadOthers();
}

// Every card outside the pending list whose proposal can still change, read again
// as `signer-cli show ID` (once per proposal). One that cannot be read now loses its
// form until it can: a card is never left actionable on an old reading.
async function rereadOthers() {
  const byId = new Map();
  for (const c of document.querySelectorAll('#moved article, #opened article, #log article')) {
    let item = null;
    try { item = JSON.parse(c.dataset.sig); } catch (_) { /* re-read it */ }
    if (item && item.checked && item.final) continue;
    if (!byId.has(c.dataset.id)) byId.set(c.dataset.id, []);
    byId.get(c.dataset.id).push(c);
  }
  await Promise.all([...byId].map(async ([id, cards]) => {
    let item;
    try {
      item = await call('GET', `/api/proposal?id=${encodeURIComponent(id)}`);
    } catch (e) {
      item = { proposal_id: id, checked: false, unread: true, problem: `cannot read it again: ${e.message}` };
    }
    for (const c of cards) if (c.dataset.sig !== JSON.stringify(item)) fill(c, item);
  }));
}

function listen() {
  const es = new EventSource(`/events?t=${encodeURIComponent(TOKEN)}`);
  es.addEventListener('open', () => { $('#live').textContent = 'live updates: on'; refresh(); });
  es.addEventListener('changed', () => refresh());
  es.addEventListener('error', () => { $('#live').textContent = 'live updates: reconnecting…'; });
}

$('#open').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('#open-error').textContent = '';
  const id = new FormData(ev.target).get('id');
  try {
    const item = await call('GET', `/api/proposal?id=${encodeURIComponent(id)}`);
    $('#opened').replaceChildren(card(item));
  } catch (e) {
    $('#open-error').textContent = e.message;
  }
});

if (TOKEN) {
  refresh();
  listen();
} else {
  $('#problem').hidden = false;
  $('#problem').textContent =
    'This tab has no token: use the tab that signer-cli ui opened. Its URL works once; for a new tab, stop signer-cli ui and run it again.';
}
