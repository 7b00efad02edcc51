// The approver page (issue #34): one proposal, decided with a passkey.
//
// Why it is written this way:
// - The passkey signs whatever challenge this script hands it, so the script
//   trusts nothing the server claims about what is signed: it recomputes the
//   preview hash from the preview (jcs.js, then SHA-256) and refuses to offer any
//   decision when the server's claim differs. The challenge is built from that
//   locally computed hash, exactly as signer-cli builds its signed text.
// - Every string from the server goes into the page with textContent, never as
//   markup, so a hostile summary or payload cannot become an element.
// - The view token arrives in the fragment (#v=...), which browsers never send
//   to servers or proxies; it is kept in this tab's sessionStorage and removed
//   from the address bar.
// - The page polls every second and, whenever the proposal changed elsewhere,
//   redraws; a changed status clears what the human typed and disables every
//   button, so a card never stays actionable on a proposal that moved on.
'use strict';

(function () {
  var POLL_MS = 1000;
  var FETCH_TIMEOUT_MS = 8000;
  var MAX_REASON = 1000;
  // The decisions this page can make, with their buttons.
  var BUTTONS = { approve: 'btn-approve', reject: 'btn-reject', revoke: 'btn-revoke' };

  function $(id) { return document.getElementById(id); }

  // ---------------------------------------------------------------------------
  // Bytes
  // ---------------------------------------------------------------------------

  function b64url(bytes) {
    var u8 = new Uint8Array(bytes);
    var s = '';
    for (var i = 0; i < u8.length; i++) s += String.fromCharCode(u8[i]);
    return btoa(s).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
  }

  function fromB64url(s) {
    if (typeof s !== 'string' || !/^[A-Za-z0-9_-]*$/.test(s)) throw new Error('not base64url: ' + s);
    var b = s.replace(/-/g, '+').replace(/_/g, '/');
    while (b.length % 4) b += '=';
    var bin = atob(b);
    var out = new Uint8Array(bin.length);
    for (var i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
    return out;
  }

  function hex(buf) {
    var u8 = new Uint8Array(buf);
    var s = '';
    for (var i = 0; i < u8.length; i++) s += (u8[i] < 16 ? '0' : '') + u8[i].toString(16);
    return s;
  }

  function sha256(text) {
    return crypto.subtle.digest('SHA-256', new TextEncoder().encode(text));
  }

  // ---------------------------------------------------------------------------
  // Where we are: the proposal id (path) and the view token (fragment)
  // ---------------------------------------------------------------------------

  var pathMatch = /^\/approve\/([A-Za-z0-9_-]{1,64})\/?$/.exec(location.pathname);
  var ID = pathMatch ? pathMatch[1] : null;
  var TOKEN = (function () {
    if (!ID) return '';
    var key = 'approval-view:' + ID;
    // The token is base64url (a MAC): anything else in the fragment is ignored.
    var m = /^#v=([A-Za-z0-9_-]{1,128})$/.exec(location.hash);
    if (m) {
      sessionStorage.setItem(key, m[1]);
      history.replaceState(null, '', location.pathname + location.search);
    }
    return sessionStorage.getItem(key) || '';
  })();

  // ---------------------------------------------------------------------------
  // What the page shows, and its state
  // ---------------------------------------------------------------------------

  // The last state drawn: {version, status, hash (local), ok (hash matched), data}.
  var shown = null;
  // A decision is being signed or sent: every button stays disabled meanwhile.
  var busy = false;
  // What #message holds: 'poll' (a failed poll, cleared when polling works again),
  // 'result' (a decision's answer, kept until the next decision) or null.
  var messageKind = null;

  function say(text, kind, tone) {
    var m = $('message');
    m.textContent = text;
    m.className = 'message' + (tone ? ' ' + tone : '');
    m.hidden = false;
    messageKind = kind;
  }

  function unsay(kind) {
    if (messageKind !== kind) return;
    $('message').hidden = true;
    $('message').textContent = '';
    messageKind = null;
  }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function str(v) { return typeof v === 'string' ? v : (v === undefined || v === null ? '' : String(v)); }

  // The prefix the human typed is the first 8 characters (or all) of the hash
  // computed here: the same rule signer-cli applies in the terminal.
  function prefixOk() {
    if (!shown || !shown.ok) return false;
    var t = $('prefix').value.trim().toLowerCase();
    return t === shown.hash.slice(0, 8) || t === shown.hash;
  }

  // Actions offered now: those the server lists that this page knows, and only
  // when a passkey may decide this kind.
  function offered(data) {
    var acts = Array.isArray(data.actions) ? data.actions : [];
    return acts.filter(function (a) { return Object.prototype.hasOwnProperty.call(BUTTONS, a); });
  }

  function passkeyUsable(data) {
    return Array.isArray(data.accept) && data.accept.indexOf('passkey') >= 0 &&
      Array.isArray(data.passkeys) && data.passkeys.length > 0;
  }

  // Enables each offered button when the prefix is right and nothing is in flight.
  function updateButtons() {
    var acts = shown && shown.ok && passkeyUsable(shown.data) ? offered(shown.data) : [];
    var ready = !busy && prefixOk() && $('reason').value.length <= MAX_REASON;
    Object.keys(BUTTONS).forEach(function (a) {
      var b = $(BUTTONS[a]);
      var on = acts.indexOf(a) >= 0;
      b.hidden = !on;
      b.disabled = !(on && ready);
    });
  }

  function disableAll() {
    Object.keys(BUTTONS).forEach(function (a) { $(BUTTONS[a]).disabled = true; });
  }

  function drawHash(hash) {
    var h = $('hash');
    h.replaceChildren();
    h.append(el('mark', null, hash.slice(0, 8)), el('span', null, hash.slice(8)));
  }

  function drawDecisions(list) {
    var ul = $('decisions');
    ul.replaceChildren();
    var ds = Array.isArray(list) ? list : [];
    ds.forEach(function (d) {
      var line = str(d.approver) + ': ' + str(d.decision) + (d.at ? ' at ' + str(d.at) : '');
      if (d.reason) line += ' (reason: ' + str(d.reason) + ')';
      if (d.kind) line += ' [' + str(d.kind) + ']';
      ul.append(el('li', null, line));
    });
    $('no-decisions').hidden = ds.length > 0;
  }

  function drawRefusal(local, claimed, why) {
    var r = $('refusal');
    r.replaceChildren(
      el('p', null, 'Refused: ' + why + ': do not approve; tell whoever runs the server.'),
      el('p', 'mono', 'computed on this page: ' + local),
      el('p', 'mono', 'the server claims:     ' + str(claimed))
    );
    r.hidden = false;
  }

  // Draws one state. `changed` says whether the status or the hash differs from
  // the state drawn before, in which case what the human typed is cleared.
  function draw(data, hash, ok, why, changed) {
    $('proposal-id').textContent = str(data.proposal_id);
    $('status').textContent = str(data.status);
    var q = data.quorum || {};
    $('quorum').textContent = str(q.have) + ' of ' + str(q.need) + ' approvals';
    $('preview').textContent = str(data.rendered);
    // Every character outside printable ASCII as its JSON escape (\u202e, \u0430...):
    // the same JSON, with nothing hidden, reordered or looking like something else.
    $('preview-json').textContent = JSON.stringify(data.preview, null, 2).replace(
      /[^\x20-\x7e\n]/g,
      (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'),
    );
    drawHash(hash);
    drawDecisions(data.decisions);
    if (!ok) {
      drawRefusal(hash, data.preview_sha256, why);
    } else {
      $('refusal').hidden = true;
      $('refusal').replaceChildren();
    }
    if (changed) {
      $('prefix').value = '';
    }
    var note = $('decide-note');
    var fields = $('decide-fields');
    $('decide').hidden = !ok;
    if (!ok) {
      fields.hidden = true;
    } else if (!passkeyUsable(data)) {
      note.textContent = 'This kind is decided with signer-cli, not with a passkey: signer-cli approve ' +
        str(data.proposal_id);
      note.hidden = false;
      fields.hidden = true;
    } else if (offered(data).length === 0) {
      note.textContent = 'nothing to decide now (status ' + str(data.status) + ')';
      note.hidden = false;
      fields.hidden = true;
    } else {
      note.textContent = '';
      note.hidden = true;
      fields.hidden = false;
    }
    updateButtons();
  }

  // Checks what the server sent; returns why it must be refused, or null.
  function problemWith(data, hash) {
    if (!data || typeof data !== 'object' || !data.preview || typeof data.preview !== 'object') {
      return 'the server sent no preview';
    }
    if (data.proposal_id !== ID || data.preview.proposal_id !== ID) {
      return 'the server sent another proposal than the one this link names (' + ID + ')';
    }
    if (hash !== data.preview_sha256) {
      return 'the server sent a preview that does not hash to what it asks you to sign';
    }
    return null;
  }

  async function localHash(preview) {
    try {
      return hex(await sha256(jcs(preview)));
    } catch (e) {
      return 'cannot be computed (' + e.message + ')';
    }
  }

  // ---------------------------------------------------------------------------
  // The server
  // ---------------------------------------------------------------------------

  // A fetch with a time-out; answers {ok, status, json}, the JSON being null when
  // the body is not JSON. Network failures throw.
  async function call(method, path, body) {
    var ctl = new AbortController();
    var timer = setTimeout(function () { ctl.abort(); }, FETCH_TIMEOUT_MS);
    try {
      var opts = { method: method, headers: {}, cache: 'no-store', credentials: 'omit', signal: ctl.signal };
      if (TOKEN) opts.headers['X-Approval-View'] = TOKEN;
      if (body !== undefined) {
        opts.headers['Content-Type'] = 'application/json';
        opts.body = JSON.stringify(body);
      }
      var r = await fetch(path, opts);
      var text = await r.text();
      var json = null;
      try { json = JSON.parse(text); } catch (_) { /* not JSON: shown as text */ }
      return { ok: r.ok, status: r.status, json: json, text: text };
    } finally {
      clearTimeout(timer);
    }
  }

  function errorText(r) {
    if (r.json && r.json.code) return str(r.json.code) + ': ' + str(r.json.message);
    return 'HTTP ' + r.status + ': ' + r.text.slice(0, 300);
  }

  var pollTimer = null;

  async function poll() {
    clearTimeout(pollTimer);
    try {
      var r = await call('GET', '/approve/' + encodeURIComponent(ID) + '/state');
      if (!r.ok || !r.json) {
        // Nothing can be trusted to be current: no button stays enabled.
        disableAll();
        say(errorText(r), 'poll', 'error');
      } else {
        await take(r.json);
        unsay('poll');
      }
    } catch (e) {
      disableAll();
      say('cannot reach the server: ' + e.message + ' (trying again)', 'poll', 'error');
    }
    pollTimer = setTimeout(poll, POLL_MS);
  }

  // Takes one state from the server and redraws when anything changed.
  async function take(data) {
    var hash = await localHash(data && data.preview);
    var why = problemWith(data, hash);
    var ok = why === null;
    if (shown && shown.version === data.version && shown.status === data.status &&
        shown.hash === hash && shown.ok === ok && shown.claimed === data.preview_sha256) {
      updateButtons();
      return;
    }
    var changed = !shown || shown.status !== data.status || shown.hash !== hash || !ok;
    shown = { version: data.version, status: data.status, hash: hash, ok: ok, claimed: data.preview_sha256, data: data };
    draw(data, hash, ok, why, changed);
  }

  // ---------------------------------------------------------------------------
  // Deciding
  // ---------------------------------------------------------------------------

  async function decide(decision) {
    if (busy || !shown || !shown.ok || !prefixOk()) return;
    var data = shown.data;
    var hash = shown.hash;
    var reason = $('reason').value;
    if (reason.length > MAX_REASON) {
      say('the reason is over ' + MAX_REASON + ' characters', 'result', 'error');
      return;
    }
    if (!window.PublicKeyCredential || !navigator.credentials) {
      say('this browser offers no passkeys here (a secure context is needed: https, or http://localhost)',
        'result', 'error');
      return;
    }
    busy = true;
    updateButtons();
    say('Waiting for your passkey…', 'result');
    try {
      // The same text signer-cli signs (PROTOCOL §2.1), with the hash computed here.
      var text = 'approval-v1\n' + decision + '\n' + hash + '\n' + reason;
      var challenge = await sha256(text);
      var passkeys = data.passkeys;
      var cred = await navigator.credentials.get({
        publicKey: {
          challenge: challenge,
          rpId: passkeys[0].rp_id,
          allowCredentials: passkeys.map(function (p) {
            return { type: 'public-key', id: fromB64url(p.credential_id) };
          }),
          userVerification: 'required',
          timeout: 120000,
        },
      });
      if (!cred) throw new Error('no passkey was used');
      var credId = b64url(cred.rawId);
      var mine = passkeys.filter(function (p) { return p.credential_id === credId; })[0];
      if (!mine) {
        say('the passkey used is not one of this proposal\'s approvers\' passkeys: nothing sent', 'result', 'error');
        return;
      }
      var resp = cred.response;
      var r = await call('POST', '/v1/proposals/' + encodeURIComponent(ID) + '/decisions', {
        approver: mine.approver,
        decision: decision,
        reason: reason,
        passkey: {
          credential_id: credId,
          authenticator_data: b64url(resp.authenticatorData),
          client_data_json: b64url(resp.clientDataJSON),
          signature: b64url(resp.signature),
        },
      });
      if (r.ok && r.json) {
        var p = r.json.proposal || {};
        var st = p.status || r.json.status || '';
        var what = r.json.already_recorded ? 'already recorded' : 'recorded';
        say(decision + ' by ' + str(mine.approver) + ': ' + what + (st ? ' (status ' + str(st) + ')' : ''),
          'result', 'ok');
        $('prefix').value = '';
        $('reason').value = '';
      } else {
        say(errorText(r), 'result', 'error');
      }
    } catch (e) {
      var name = e && e.name ? e.name + ': ' : '';
      say('nothing was sent: ' + name + (e && e.message ? e.message : String(e)), 'result', 'error');
    } finally {
      busy = false;
      updateButtons();
      poll();
    }
  }

  // ---------------------------------------------------------------------------
  // Start
  // ---------------------------------------------------------------------------

  Object.keys(BUTTONS).forEach(function (a) {
    $(BUTTONS[a]).addEventListener('click', function () { decide(a); });
  });
  $('prefix').addEventListener('input', updateButtons);
  $('reason').addEventListener('input', updateButtons);

  if (!ID) {
    $('status').textContent = 'no proposal';
    say('This address names no proposal: open the link from your notification.', 'fatal', 'error');
  } else if (!TOKEN) {
    $('proposal-id').textContent = ID;
    $('status').textContent = 'no access';
    say('This tab has no view token: open the whole link from your notification again (the part after # is the token).',
      'fatal', 'error');
  } else {
    $('proposal-id').textContent = ID;
    poll();
  }
})();
