#!/usr/bin/env python3
"""Vectors for a list of expressions (one a line on stdin), answered by HTCondor 25.14.1 with the
shared generator's ads (as MY and TARGET) and encoding; for pinning one class of disagreement:

    /work/wt/cad-venv/bin/python classad/tests/oracle/gen_list.py PREFIX OUT.jsonl < exprs.txt
"""
import json, os, sys

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../..")
ORACLE = os.environ.get("CLASSAD_ORACLE") or next(
    (d for d in (os.path.join(_ROOT, up, "shared/classad-oracle") for up in ("..", "../.."))
     if os.path.isdir(d)), "")
sys.path.insert(0, ORACLE)
import gen_vectors as g  # noqa: E402

prefix, out = sys.argv[1], sys.argv[2]
with open(out, "w") as f:
    for i, e in enumerate(l.rstrip("\n") for l in sys.stdin if l.strip()):
        res = g.evaluate(e, True)
        if res is not None:
            f.write(json.dumps({"id": f"{prefix}{i}", "expr": e, "result": res,
                                "my": "machine", "target": "job"}) + "\n")
