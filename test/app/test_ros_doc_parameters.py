"""docs/ros.md carries the parameter table generated from the schema, unchanged."""
from __future__ import annotations

from pathlib import Path

from alpamayo_offload.app import schema

DOC = Path(__file__).resolve().parents[2] / 'docs' / 'ros.md'


def test_the_parameter_table_in_docs_is_the_generated_one() -> None:
    text = DOC.read_text(encoding='utf-8')
    table = schema.markdown_table()
    assert table in text, ('docs/ros.md parameter table is out of date: regenerate it with '
                           '`python -m alpamayo_offload.app.schema --markdown`')
    assert text.count('| `') >= len(schema.PARAMETERS)
    for name in schema.PARAMETERS:
        assert f'| `{name}` |' in table
