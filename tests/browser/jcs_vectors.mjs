// The approver page's JCS (server/src/approver_page/assets/jcs.js, the very file
// the browser runs) against vectors made outside this project:
//
// - ../shared/vectors/rfc8785: the RFC 8785 reference implementation's test data
//   (input/X.json parsed, canonicalised, compared byte for byte with output/X.json);
// - ../shared/vectors/independent/previews.json: 60 previews canonicalised and
//   hashed by Python's rfc8785 and hashlib (hostile strings, edge numbers), so the
//   hash the page shows is checked too, with node's SHA-256 standing in for
//   crypto.subtle (both are SHA-256 over the same UTF-8 bytes).
//
// Run: node tests/browser/jcs_vectors.mjs   (exits 1 on any failure; VECTORS=DIR
// points at another vectors folder).
import { createRequire } from 'node:module';
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const require = createRequire(import.meta.url);
const jcs = require(join(root, 'server/src/approver_page/assets/jcs.js'));

function vectorsDir() {
  const candidates = [
    process.env.VECTORS,
    // The copy committed with core's tests (identical to ../shared/vectors, which a
    // clean checkout may not have beside it).
    join(root, 'core', 'tests', 'vectors', 'external'),
    resolve(root, '..', 'shared', 'vectors'),
  ].filter(Boolean);
  const found = candidates.find((d) => existsSync(join(d, 'rfc8785')));
  if (!found) {
    console.error(`no vectors folder among ${candidates.join(', ')} (set VECTORS=DIR)`);
    process.exit(2);
  }
  return found;
}

const dir = vectorsDir();
let failed = 0;

// RFC 8785 reference data.
let rfcPass = 0;
const rfcFiles = readdirSync(join(dir, 'rfc8785', 'input')).filter((f) => f.endsWith('.json')).sort();
for (const f of rfcFiles) {
  const input = JSON.parse(readFileSync(join(dir, 'rfc8785', 'input', f), 'utf8'));
  const want = readFileSync(join(dir, 'rfc8785', 'output', f));
  const got = Buffer.from(jcs(input), 'utf8');
  if (got.equals(want)) {
    rfcPass++;
  } else {
    failed++;
    console.error(`FAIL rfc8785/${f}\n  want ${want.toString('utf8')}\n  got  ${got.toString('utf8')}`);
  }
}
console.log(`rfc8785: ${rfcPass} of ${rfcFiles.length} passed`);

// Independent previews: canonical text and preview_sha256.
let prevPass = 0;
const previews = JSON.parse(readFileSync(join(dir, 'independent', 'previews.json'), 'utf8'));
previews.forEach((v, i) => {
  const text = jcs(v.preview);
  const hash = createHash('sha256').update(text, 'utf8').digest('hex');
  if (text === v.canonical && hash === v.preview_sha256) {
    prevPass++;
  } else {
    failed++;
    console.error(`FAIL previews[${i}]\n  want ${v.canonical} ${v.preview_sha256}\n  got  ${text} ${hash}`);
  }
});
console.log(`independent previews: ${prevPass} of ${previews.length} passed`);

// What JCS must refuse rather than guess at.
let refusePass = 0;
const refuse = [
  ['a lone high surrogate', { s: 'a\uD800b' }],
  ['a lone low surrogate', ['\uDC00']],
  ['a lone surrogate in a key', { '\uD83D': 1 }],
  ['NaN', [NaN]],
  ['Infinity', { n: Infinity }],
  ['undefined', [undefined]],
];
for (const [what, value] of refuse) {
  try {
    const out = jcs(value);
    failed++;
    console.error(`FAIL refuse ${what}: gave ${out}`);
  } catch (_) {
    refusePass++;
  }
}
console.log(`refusals: ${refusePass} of ${refuse.length} passed`);

if (failed) {
  console.error(`${failed} failure(s)`);
  process.exit(1);
}
console.log('all passed');
