"""docs/plan.schema.json for the tests: every plan a test writes is checked against it.

`check(document, where)` exits the test with the schema's first complaint and its JSON path.
"""
import json
import os
import sys

import jsonschema

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "plan.schema.json")


def validator():
    with open(SCHEMA_PATH) as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


_VALIDATOR = None


def field_path(parts):
    """['stages', 1, 'inputs'] -> 'stages[1].inputs', the reader's spelling of a field."""
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def errors(document):
    """The schema's violations of a document, in a stable order."""
    global _VALIDATOR
    if _VALIDATOR is None:
        _VALIDATOR = validator()
    return sorted(_VALIDATOR.iter_errors(document), key=lambda e: list(map(str, e.absolute_path)))


def problems(document):
    """Each schema violation of a document as 'PATH: MESSAGE'."""
    return [f"{field_path(e.absolute_path) or '(root)'}: {e.message[:200]}" for e in errors(document)]


def check(document, where):
    found = problems(document)
    if found:
        print(f"FAIL: {where} does not match docs/plan.schema.json: {found[0]}"
              + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
        sys.exit(1)
