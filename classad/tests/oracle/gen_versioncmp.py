#!/usr/bin/env python3
"""versioncmp over every pair of a set of tricky version strings (leading zeros, fractions,
lengths), answered by HTCondor 25.14.1; writes tests/vectors/versioncmp-pairs.jsonl:

    /work/wt/cad-venv/bin/python classad/tests/oracle/gen_versioncmp.py classad/tests/vectors/versioncmp-pairs.jsonl
"""
import itertools, json, sys
import htcondor2  # noqa: F401  (daemon semantics, as gen_vectors.py)
import classad2 as c
S=["1.02","1.2","1.10","01","001","0","00","1","9","10","010","09","a","","abc","1.0","1.00","1a","1.01","0.1","0.01","2.5","7","x1","x01","x1.0","000","8.9.0","8.10.2","1024","100000","64000"]
with open(sys.argv[1], "w") as f:
    for i,(a,b) in enumerate(itertools.product(S,S)):
        e=f'versioncmp("{a}", "{b}")'
        f.write(json.dumps({"id":f"vc-{i}","expr":e,"result":{"t":"int","v":c.ExprTree(e).eval()}})+"\n")
