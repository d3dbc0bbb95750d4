"""Benchmarks, run by hand or in CI (``--short``): each prints numbers measured side by side
in one run, so comparisons hold on whatever machine runs them. They are not tests and
assert nothing about timing."""
