"""Paper tables as sweeps of training runs: which runs, run them, archive them, judge, print.

A paper's tables (`fedjax_face/proj/<paper>/reproduce.py:TABLES`) are data, and
`python -m fedjax_face.reproduce` is the command. Import the module that owns a name:

- `spec`: `Run`, `Combined`, `Row`, `Ordering`, `Table`; what a column reads and how it prints.
- `run`: running a table's runs, once each, resumably, failures recorded (`run_all`).
- `archive`: what a table keeps of its runs under results/ (`ARCHIVED`, `archive_runs`, `park`),
  and reading it back: the commits its runs came from, a spot check against a rerun.
- `verdict`: the verdict rule on the seeds' paired margins (`VERDICT_RULE`, `judge`).
- `markdown`: the table as markdown, ours beside the paper's (`render`).
"""
