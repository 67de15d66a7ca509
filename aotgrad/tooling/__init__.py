"""Tooling: what people run to look at compiles, built on what observe/ records.

explain.py (`aotgrad.explain`: what a model's compile would do and why), report.py with
report_words.py, report_curve.py and report_page.py (`python -m aotgrad report`: one HTML page
of a run's compiles), and demo.py (`python -m aotgrad demo`). Nothing but the package's entry
points (`aotgrad/__init__.py`, `__main__.py`) imports these; they may import anything.
"""
