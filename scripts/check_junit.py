"""Fails unless every JUnit report ran tests and skipped none (a skipped integration suite is a failure)."""

import sys
import xml.etree.ElementTree as ElementTree

totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
for report in sys.argv[1:]:
    suite = ElementTree.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {key: int(suite.get(key, 0)) for key in totals}
    print(f"{report}: {counts}")
    if counts["tests"] == 0:
        sys.exit(f"{report}: no test ran")
    if counts["skipped"]:
        sys.exit(f"{report}: {counts['skipped']} test(s) skipped; every test must run")
    for key in totals:
        totals[key] += counts[key]
passed = totals["tests"] - totals["failures"] - totals["errors"]
print(f"{passed} passed, {totals['failures'] + totals['errors']} failed")
sys.exit(1 if totals["failures"] or totals["errors"] else 0)
