#!/usr/bin/env python3
"""Compare MCP conformance-suite results with tests/conformance/expected-failures.txt.

Usage: compare.py RESULTS_DIR EXPECTED_FAILURES_FILE

RESULTS_DIR holds one folder per wire revision run (its label, e.g. `2025-11-25`), each with
  * the suite's per-scenario folders `server-<scenario>-<timestamp>/checks.json`, and
  * `expected-scenarios.txt`: the scenarios that run should have produced (one a line).

A scenario run FAILS when one of its checks has status FAILURE (WARNING and INFO do not fail,
as in the suite's own summary), is SKIPPED when none of its own checks succeeded (none at all, or
only SKIPPED/INFO/WARNING ones besides the suite's synthetic wire-schema checks), and otherwise PASSES.

Baseline lines (`#` starts a comment; every entry must carry one saying why):
  scenario                    every revision's run of it is expected to fail
  scenario@REV                only the run at revision REV (a folder label)
  scenario:check-id           only that check may fail (any revision)
  scenario@REV:check-id       that check, at that revision

Outcome, per scenario run: a failure not covered by the baseline is UNEXPECTED; a baselined
scenario (or check) that passes is STALE (remove the entry: the baseline stays honest); a
baseline entry that matches no scenario run at all is STALE too. Either makes the exit status 1.

The last line is `N passed, N failed, N skipped`: passed = scenario runs that passed; failed =
unexpected failures + stale baseline entries; skipped = baselined failures + suite-skipped runs.
"""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field

# Checks the suite adds to every scenario (wire messages valid against the schema): alone they
# do not make a scenario "passed".
SYNTHETIC = {"wire-schema-valid", "wire-schema-harness-error"}
TS_SUFFIX = re.compile(r"-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@dataclass
class Entry:
    scenario: str
    rev: str | None
    check: str | None
    reason: str
    line: int
    used: bool = False

    def matches(self, scenario: str, rev: str) -> bool:
        return self.scenario == scenario and (self.rev is None or self.rev == rev)

    def __str__(self) -> str:
        s = self.scenario + (f"@{self.rev}" if self.rev else "") + (f":{self.check}" if self.check else "")
        return f"{s} (line {self.line})"


@dataclass
class Run:
    rev: str
    scenario: str
    checks: list[dict] = field(default_factory=list)
    error: str | None = None

    @property
    def failing(self) -> list[str]:
        return [c.get("id", "?") for c in self.checks if c.get("status") == "FAILURE"]

    @property
    def state(self) -> str:
        if self.error or self.failing:
            return "FAIL"
        if not [c for c in self.checks if c.get("status") == "SUCCESS" and c.get("id") not in SYNTHETIC]:
            return "SKIP"  # only SKIPPED / INFO / WARNING checks: nothing was shown to work
        return "PASS"


def load_baseline(path: str) -> list[Entry]:
    entries: list[Entry] = []
    errors: list[str] = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            body, _, reason = raw.partition("#")
            body = body.strip()
            if not body:
                continue
            m = re.fullmatch(r"([a-z0-9][a-z0-9-]*)(?:@([0-9]{4}-[0-9]{2}-[0-9]{2}))?(?::([A-Za-z0-9_.-]+))?", body)
            if not m:
                errors.append(f"{path}:{n}: cannot parse {body!r}")
                continue
            if not reason.strip():
                errors.append(f"{path}:{n}: {body} has no '# reason'")
            entries.append(Entry(m.group(1), m.group(2), m.group(3), reason.strip(), n))
    if errors:
        for e in errors:
            print(e)
        sys.exit(2)
    return entries


def load_runs(root: str) -> tuple[list[Run], list[str]]:
    runs: list[Run] = []
    problems: list[str] = []
    for rev in sorted(os.listdir(root)):
        d = os.path.join(root, rev)
        if not os.path.isdir(d):
            continue
        seen: set[str] = set()
        for sub in sorted(os.listdir(d)):
            p = os.path.join(d, sub)
            if not (os.path.isdir(p) and sub.startswith("server-")):
                continue
            scenario = TS_SUFFIX.sub("", sub[len("server-"):])
            run = Run(rev, scenario)
            try:
                with open(os.path.join(p, "checks.json"), encoding="utf-8") as f:
                    run.checks = json.load(f)
            except (OSError, ValueError) as e:
                run.error = f"no readable checks.json: {e}"
            runs.append(run)
            seen.add(scenario)
        exp = os.path.join(d, "expected-scenarios.txt")
        if os.path.exists(exp):
            with open(exp, encoding="utf-8") as f:
                for s in (line.strip() for line in f):
                    if s and s not in seen:
                        problems.append(f"{s}@{rev}: listed for this run but produced no results")
    return runs, problems


def main() -> int:
    root, baseline_path = sys.argv[1], sys.argv[2]
    baseline = load_baseline(baseline_path)
    runs, problems = load_runs(root)
    if not runs:
        print(f"no conformance results under {root}")
        print("0 passed, 1 failed")
        return 1

    passed = skipped = expected = 0
    unexpected: list[str] = []
    stale: list[str] = []
    width = max(len(f"{r.scenario}@{r.rev}") for r in runs)
    for run in sorted(runs, key=lambda r: (r.rev, r.scenario)):
        key = f"{run.scenario}@{run.rev}"
        whole = [e for e in baseline if e.check is None and e.matches(run.scenario, run.rev)]
        per_check = [e for e in baseline if e.check is not None and e.matches(run.scenario, run.rev)]
        for e in whole + per_check:
            e.used = True
        warnings = [c.get("id", "?") for c in run.checks if c.get("status") == "WARNING"]
        note = f"  (warnings: {', '.join(sorted(set(warnings)))})" if warnings else ""
        state = run.state
        if whole:
            if state == "FAIL":
                expected += 1
                print(f"  xfail {key:<{width}}  baselined: {whole[0].reason}")
            else:
                verb = {"PASS": "passed", "SKIP": "was skipped"}[state]
                stale.append(f"{key}: {verb} but is baselined ({whole[0]}): remove the entry")
                print(f"  STALE {key:<{width}}  {verb}, but baselined: {whole[0].reason}")
            continue
        if state == "FAIL":
            excused = {e.check for e in per_check}
            bad = [c for c in run.failing if c not in excused]
            if run.error or bad:
                detail = run.error or ", ".join(sorted(set(bad)))
                unexpected.append(f"{key}: {detail}")
                print(f"  FAIL  {key:<{width}}  failing checks: {detail}{note}")
                for c in run.checks:
                    if c.get("status") == "FAILURE" and c.get("id") in bad:
                        print(f"          {c.get('id')}: {str(c.get('errorMessage'))[:400]}")
                continue
            expected += 1
            good = len({c.get("id") for c in run.checks if c.get("status") == "SUCCESS"} - SYNTHETIC)
            print(f"  xfail {key:<{width}}  {good} checks passed; only baselined checks failed: "
                  f"{', '.join(sorted(set(run.failing)))}{note}")
        elif state == "SKIP":
            skipped += 1
            print(f"  skip  {key:<{width}}  (no check succeeded: the suite skipped it or only warned){note}")
        else:
            passed += 1
            print(f"  pass  {key:<{width}}{note}".rstrip())
        ids = {c.get("id") for c in run.checks}
        failing = set(run.failing)
        for e in per_check:
            if e.check in ids and e.check not in failing:
                stale.append(f"{key}: check {e.check} passes but is baselined ({e}): remove the entry")
    for e in baseline:
        if not e.used:
            stale.append(f"baseline entry {e} matches no scenario run")
    unexpected += problems

    if unexpected:
        print("\nUnexpected failures (not in the baseline; details in each scenario's checks.json):")
        for u in unexpected:
            print(f"  - {u}")
    if stale:
        print("\nStale baseline (a baselined scenario passed or matched nothing):")
        for s in stale:
            print(f"  - {s}")
    print(f"\nconformance: {passed} passed, {expected} failed as baselined, {skipped} skipped by the suite, "
          f"{len(unexpected)} unexpected failures, {len(stale)} stale baseline entries")
    print(f"{passed} passed, {len(unexpected) + len(stale)} failed, {expected + skipped} skipped")
    return 1 if unexpected or stale else 0


if __name__ == "__main__":
    sys.exit(main())
