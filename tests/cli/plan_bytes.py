"""plan.json's bytes but for its "generator" object, whose command line names each run's output
folder: what two runs of one request must share byte for byte (the plan writer puts every other
byte the same way)."""
import re

GENERATOR = re.compile(rb'\n *"generator": \{[^{}]*\},?')


def without_generator(raw, required=True):
    """`raw` (bytes of a plan.json written by rannc-partition) without its generator; raises
    ValueError where there is none, so that a comparison never passes by stripping nothing
    (required=False: plans of versions that wrote none)."""
    stripped, count = GENERATOR.subn(b"", raw)
    if count > 1 or (required and count != 1):
        raise ValueError("plan.json has %d generator objects, expected 1" % count)
    return stripped


def read_without_generator(path):
    with open(path, "rb") as f:
        return without_generator(f.read())
