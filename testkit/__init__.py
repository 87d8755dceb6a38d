"""Test and benchmark support that is not part of the installed package.

`toy_model`: a toy decoder stack for the runtime; `closed_forms` and `paper`: the closed forms
and published profile of the OOM-Free Alpamayo paper, against which the predictor is checked.
Importable from the repository root (pytest sets `pythonpath`; run bench scripts with
`python -m bench.<script>` from there).
"""
