#!/bin/bash
# The final build's run for BENCHMARKS.md: round 3's figures on sled, then PostgreSQL with 1 and 2 instances.
cd "$(dirname "$0")/../.."
B=target/release/approval-bench
echo "== uptime before: $(uptime)"; echo "== commit $(git rev-parse --short HEAD)"; date -u
$B --scenario peers
$B --scenario http-pair --clients 32 --duration 10s
for sc in status prepare decide round-trip; do $B --scenario $sc --clients 32 --duration 10s; done
psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE' 2>/dev/null
for n in 1 2; do
  for sc in status prepare decide round-trip; do
    psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE; CREATE SCHEMA bench' 2>/dev/null
    URL='postgres://root@127.0.0.1:5432/test?options=-csearch_path%3Dbench'
    target/release/approval-server migrate --store "$URL" > /dev/null
    echo "== PostgreSQL, $n instance(s), $sc"
    $B --scenario $sc --clients 32 --duration 10s --instances $n --server-arg=--store --server-arg="$URL"
  done
done
psql -h 127.0.0.1 -U root test -qc 'DROP SCHEMA IF EXISTS bench CASCADE' 2>/dev/null
date -u; echo "== uptime after: $(uptime)"
