// RFC 8785 (JCS) canonical JSON, for the approver page to recompute the preview
// hash itself: a passkey signs whatever challenge the page hands it, so the page
// must not take the server's word for the hash it asks the human to sign.
//
// One file, two loaders: the browser runs it as a classic script (it defines the
// global `jcs`, before approve.js), and tests/browser/jcs_vectors.mjs loads the
// same bytes with node's require, so the code the vectors check is the code the
// page runs.
//
// The rules (RFC 8785 §3.2): no whitespace; object members sorted by their names'
// UTF-16 code units (what Array.prototype.sort does with no comparator); strings
// and numbers written as ECMAScript's JSON.stringify writes them (which is what
// the RFC specifies, §3.2.2.2 and §3.2.2.3). Values JCS cannot carry (lone
// surrogates, NaN, Infinity, anything not JSON) throw rather than be guessed at.
'use strict';

var jcs = (function () {
  // A lone surrogate: JSON.stringify would escape it, JCS (I-JSON) forbids it.
  var LONE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?:^|[^\uD800-\uDBFF])[\uDC00-\uDFFF]/;

  function str(s) {
    if (LONE.test(s)) throw new Error('JCS: a string holds a lone surrogate');
    return JSON.stringify(s);
  }

  function canon(v, depth) {
    if (depth > 256) throw new Error('JCS: nested too deep');
    if (v === null || v === true || v === false) return String(v);
    switch (typeof v) {
      case 'number':
        if (!Number.isFinite(v)) throw new Error('JCS: not a finite number');
        return JSON.stringify(v);
      case 'string':
        return str(v);
      case 'object': {
        if (Array.isArray(v)) {
          var items = [];
          for (var i = 0; i < v.length; i++) items.push(canon(v[i], depth + 1));
          return '[' + items.join(',') + ']';
        }
        var keys = Object.keys(v).sort();
        var members = [];
        for (var j = 0; j < keys.length; j++) {
          members.push(str(keys[j]) + ':' + canon(v[keys[j]], depth + 1));
        }
        return '{' + members.join(',') + '}';
      }
      default:
        throw new Error('JCS: ' + typeof v + ' is not JSON');
    }
  }

  /** The canonical text of `value` (a value JSON.parse returned). */
  return function jcs(value) {
    return canon(value, 0);
  };
})();

if (typeof module !== 'undefined' && module.exports) module.exports = jcs;
