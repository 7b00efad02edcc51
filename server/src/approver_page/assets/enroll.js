// The enrolment page (issue #34): an approver makes a passkey for the gate.
//
// Why it is written this way:
// - The server adds nothing to its keyring from this page. The page shows the
//   keyring line the server derived from the browser's answer, and the human
//   sends it to whoever runs the server, who adds it: the same way a key made
//   with `signer-cli keygen` reaches the keyring. A stolen enrolment link can
//   therefore make a line, never an approver.
// - The link's token is in the path (/enroll/<token>) and works once; the
//   server answers a used or expired one with its reason, shown as is.
// - Every string from the server goes in with textContent, never as markup.
'use strict';

(function () {
  var FETCH_TIMEOUT_MS = 8000;

  function $(id) { return document.getElementById(id); }

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

  function str(v) { return typeof v === 'string' ? v : (v === undefined || v === null ? '' : String(v)); }

  function say(text, tone) {
    var m = $('message');
    m.textContent = text;
    m.className = 'message' + (tone ? ' ' + tone : '');
    m.hidden = false;
  }

  async function call(method, path, body) {
    var ctl = new AbortController();
    var timer = setTimeout(function () { ctl.abort(); }, FETCH_TIMEOUT_MS);
    try {
      var opts = { method: method, headers: {}, cache: 'no-store', credentials: 'omit', signal: ctl.signal };
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

  // The token: base64url parts joined by '.' (a signed claim), at most 2048 characters.
  var m = /^\/enroll\/([A-Za-z0-9_.-]{1,2048})\/?$/.exec(location.pathname);
  var TOKEN = m ? m[1] : null;
  var BASE = TOKEN ? '/enroll/' + TOKEN : null;
  var options = null;

  async function load() {
    var r;
    try {
      r = await call('GET', BASE + '/options');
    } catch (e) {
      $('what').textContent = 'The enrolment could not be loaded.';
      say('cannot reach the server: ' + e.message + ' (reload to try again)', 'error');
      return;
    }
    if (!r.ok || !r.json) {
      $('what').textContent = 'This enrolment link cannot be used.';
      say(errorText(r), 'error');
      return;
    }
    options = r.json;
    $('what').textContent = 'Create a passkey for ' + str(options.name) + ' on ' + str(options.rp_id);
    if (options.expires_at) $('expires').textContent = 'This link works once, until ' + str(options.expires_at) + '.';
    // The server checks every later decision against this origin: a page opened
    // under another one would make a passkey the gate never accepts.
    if (options.origin && options.origin !== location.origin) {
      say('This link was made for ' + str(options.origin) + ' but this page is ' + location.origin +
        ': a passkey made here would not be accepted. Open the link exactly as you received it.', 'error');
      return;
    }
    if (!window.PublicKeyCredential || !navigator.credentials) {
      say('This browser offers no passkeys here (a secure context is needed: https, or http://localhost).', 'error');
      return;
    }
    $('enroll').hidden = false;
    $('enroll').disabled = false;
  }

  async function enroll() {
    if (!options) return;
    var btn = $('enroll');
    btn.disabled = true;
    say('Waiting for your passkey…');
    try {
      var cred = await navigator.credentials.create({
        publicKey: {
          rp: { id: options.rp_id, name: options.rp_name },
          user: { id: fromB64url(options.user_id), name: options.name, displayName: options.name },
          challenge: fromB64url(options.challenge),
          pubKeyCredParams: [{ type: 'public-key', alg: -7 }, { type: 'public-key', alg: -8 }],
          authenticatorSelection: { residentKey: 'preferred', userVerification: 'required' },
          attestation: 'none',
          timeout: 120000,
        },
      });
      if (!cred) throw new Error('no passkey was made');
      var r = await call('POST', BASE, {
        credential_id: b64url(cred.rawId),
        attestation_object: b64url(cred.response.attestationObject),
        client_data_json: b64url(cred.response.clientDataJSON),
      });
      if (r.ok && r.json && typeof r.json.keyring_line === 'string') {
        $('keyring-line').textContent = r.json.keyring_line;
        $('result').hidden = false;
        btn.hidden = true;
        say('Passkey created.', 'ok');
      } else {
        say(r.ok ? 'the server answered without a keyring line' : errorText(r), 'error');
        // A refused registration may be retried only while the link still works;
        // the server says when it does not.
        btn.disabled = false;
      }
    } catch (e) {
      var name = e && e.name ? e.name + ': ' : '';
      say('no passkey was created: ' + name + (e && e.message ? e.message : String(e)), 'error');
      btn.disabled = false;
    }
  }

  async function copy() {
    var text = $('keyring-line').textContent;
    try {
      await navigator.clipboard.writeText(text);
      $('copied').textContent = 'Copied.';
    } catch (_) {
      // No clipboard (permissions, older browser): select the line for a manual copy.
      var range = document.createRange();
      range.selectNodeContents($('keyring-line'));
      var sel = window.getSelection();
      sel.removeAllRanges();
      sel.addRange(range);
      $('copied').textContent = 'Selected: copy it with your device\'s copy command.';
    }
  }

  $('enroll').addEventListener('click', enroll);
  $('copy').addEventListener('click', copy);

  if (!TOKEN) {
    $('what').textContent = 'This address holds no enrolment token.';
    say('Open the enrolment link exactly as you received it.', 'error');
  } else {
    load();
  }
})();
