#!/bin/bash
# The final build's run for BENCHMARKS.md: issue #14's figures on sled, then PostgreSQL with 1 and 2
# instances. With BASE_SERVER=/path/to/an/older/approval-server, every figure (sled and PostgreSQL)
# is measured for that build too, each right before this build's on a fresh schema, so the two are
# compared in one run.
cd "$(dirname "$0")/../.."
BASE=${BASE_SERVER:-}
# Every run's note files stay in one folder, deleted after the last run: a run that created
# notes right after another run deleted thousands measures that deletion (see --notes-dir).
# NOTES_ROOT puts them elsewhere than TMPDIR (where the stores live): on tmpfs, a run's file
# creations are not slowed by the previous run's deletions, which ext4 remembers (round 15).
NOTES=$(mktemp -d "${NOTES_ROOT:-${TMPDIR:-/tmp}}/approval-bench-notes.XXXXXX")
trap 'rm -rf "$NOTES"' EXIT
B="target/release/approval-bench --notes-dir $NOTES"
echo "== uptime before: $(uptime)"; echo "== commit $(git rev-parse --short HEAD)"; date -u
each() { # each ARGS...: the bench with ARGS, first on the base build (if any), then on this one
  if [ -n "$BASE" ]; then echo "== base build: $*"; $B --server-bin "$BASE" "$@"; fi
  echo "== this build: $*"; $B "$@"
}
each --scenario peers
each --scenario http-pair --clients 32 --duration 10s
for sc in status prepare decide round-trip; do each --scenario $sc --clients 32 --duration 10s; done
psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE' 2>/dev/null
for n in 1 2; do
  for sc in status prepare decide round-trip; do
    psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE; CREATE SCHEMA bench' 2>/dev/null
    URL='postgres://root@127.0.0.1:5432/test?options=-csearch_path%3Dbench'
    target/release/approval-server migrate --store "$URL" > /dev/null
    if [ -n "$BASE" ]; then
      "$BASE" migrate --store "$URL" > /dev/null
      echo "== base build: PostgreSQL, $n instance(s), $sc"
      $B --server-bin "$BASE" --scenario $sc --clients 32 --duration 10s --instances $n --server-arg=--store --server-arg="$URL"
      psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE; CREATE SCHEMA bench' 2>/dev/null
      target/release/approval-server migrate --store "$URL" > /dev/null
    fi
    echo "== this build: PostgreSQL, $n instance(s), $sc"
    $B --scenario $sc --clients 32 --duration 10s --instances $n --server-arg=--store --server-arg="$URL"
  done
done
psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE' 2>/dev/null
date -u; echo "== uptime after: $(uptime)"
