#!/usr/bin/env python3
"""lint-filter.py SUPPRESSIONS REPORT... - prints the findings of cppcheck and
clang-tidy reports that no suppression covers; exit 1 if any remain.

A finding is a line "path:line:col: severity: message [check]". A suppression
line is "path | check | text | reason" (the text may contain '|', the
reason may not): it covers a finding of that check in
that file whose source line contains text (so it survives edits that move the
line, and dies with the code it excused). Every suppression must give a
reason; a suppression that matched nothing is reported, so stale ones go.
"""
import os
import re
import sys

FINDING = re.compile(r"^(?P<path>[^:\s][^:]*):(?P<line>\d+):(?P<col>\d+): "
                     r"(?P<sev>warning|error|style|performance|portability|information): "
                     r"(?P<msg>.*) \[(?P<check>[^\]]+)\]$")


def load_suppressions(path):
    sups = []
    with open(path) as f:
        for n, raw in enumerate(f, 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            # The text may itself hold '|' (C expressions): path and check come first,
            # the reason last, and the text is everything between.
            raw_parts = line.split("|")
            parts = [raw_parts[0], raw_parts[1], "|".join(raw_parts[2:-1]), raw_parts[-1]]
            parts = [p.strip() for p in parts]
            if len(raw_parts) < 4 or not all(parts):
                sys.exit(f"{path}:{n}: want 'path | check | text | reason', got: {line}")
            sups.append({"path": parts[0], "check": parts[1], "text": parts[2],
                         "reason": parts[3], "where": f"{path}:{n}", "used": 0})
    return sups


def source_line(path, line, cache={}):
    if path not in cache:
        try:
            with open(path, errors="replace") as f:
                cache[path] = f.read().split("\n")
        except OSError:
            cache[path] = []
    lines = cache[path]
    return lines[line - 1] if 0 < line <= len(lines) else ""


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.getcwd() + "/"
    sups = load_suppressions(sys.argv[1])
    seen, left = set(), []
    missing = 0
    for report in sys.argv[2:]:
        try:
            with open(report, errors="replace") as f:
                lines = f.read().split("\n")
        except OSError:
            missing += 1  # a source edited during its analysis: mk/lint.mk dropped the report
            print(f"lint: no report {report} (not analysed)")
            continue
        for i, raw in enumerate(lines):
            m = FINDING.match(raw)
            if not m:
                continue
            path = m["path"][len(root):] if m["path"].startswith(root) else m["path"]
            check = m["check"].split(",")[0]
            key = (path, m["line"], check)
            if key in seen:  # a header's finding repeats once per includer
                continue
            seen.add(key)
            # Both tools print the flagged source line right after the finding: use it, so
            # that a file edited since it was analysed is judged on what was analysed.
            nxt = lines[i + 1] if i + 1 < len(lines) else ""
            text = nxt if nxt and not FINDING.match(nxt) else source_line(path, int(m["line"]))
            hit = next((s for s in sups if s["path"] == path and s["check"] == check
                        and s["text"] in text), None)
            if hit:
                hit["used"] += 1
                continue
            left.append(f"{path}:{m['line']}:{m['col']}: {m['msg']} [{check}]")
    for s in sups:
        if not s["used"]:
            print(f"{s['where']}: note: suppression matched nothing (remove it?): "
                  f"{s['path']} {s['check']}")
    for f in left:
        print(f)
    print(f"lint: {len(left)} finding(s), "
          f"{sum(s['used'] for s in sups)} suppressed by {sum(1 for s in sups if s['used'])} "
          f"suppression(s)")
    return 1 if left or missing else 0


if __name__ == "__main__":
    sys.exit(main())
