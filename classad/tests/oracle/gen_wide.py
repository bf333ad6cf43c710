#!/usr/bin/env python3
"""Wider differential vectors: every builtin with arguments of any kind.

The shared generator (../shared/classad-oracle/gen_vectors.py beside the checkout) gives each function
arguments of the kind it expects; the disagreements left after its sets pass hide in the other
cases: strings where numbers go, lists where strings go, UNDEFINED beside ERROR. This script reuses
that generator (same ads, same output format) but lets every argument be of any kind and covers the
functions it leaves out. Same command line as gen_vectors.py, with $CLASSAD_ORACLE naming its folder when it is elsewhere.

    /work/wt/cad-venv/bin/python classad/tests/oracle/gen_wide.py --seed 5 --random 5000 \
        --depth 4 --out /tmp/wide/w5.jsonl
"""
import os, sys

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../..")
ORACLE = os.environ.get("CLASSAD_ORACLE") or next(
    (d for d in (os.path.join(_ROOT, up, "shared/classad-oracle") for up in ("..", "../.."))
     if os.path.isdir(d)), "")
sys.path.insert(0, ORACLE)
import gen_vectors as g  # noqa: E402

# name: arities that HTCondor accepts (time-dependent and random functions are left out).
WIDE = {
    "isUndefined": [1], "isError": [1], "isString": [1], "isInteger": [1], "isReal": [1], "isList": [1],
    "isClassAd": [1], "isBoolean": [1], "int": [1], "real": [1], "string": [1], "bool": [1],
    "floor": [1], "ceiling": [1], "round": [1], "pow": [2], "quantize": [2], "interval": [1],
    "strcat": [0, 1, 2, 3], "join": [1, 2, 3], "split": [1, 2], "toUpper": [1], "toLower": [1],
    "size": [1], "substr": [2, 3], "strcmp": [2], "stricmp": [2], "member": [2], "identicalMember": [2],
    "sum": [1], "min": [1], "max": [1], "avg": [1], "anyCompare": [3], "allCompare": [3],
    "ifThenElse": [3], "regexp": [2, 3], "regexps": [3], "regexpMember": [2, 3], "replace": [3],
    "replaceAll": [3], "stringListMember": [2, 3], "stringListIMember": [2, 3], "stringListSize": [1, 2],
    "stringListSum": [1, 2], "stringListAvg": [1, 2], "stringListMin": [1, 2], "stringListMax": [1, 2],
    "stringListsIntersect": [2, 3], "stringListRegexpMember": [2, 3], "versioncmp": [2],
    "versionGT": [2], "versionLT": [2], "versionGE": [2], "versionLE": [2], "versionEQ": [2],
    "version_in_range": [3], "splitSlotName": [1], "splitUserName": [1], "unparse": [1], "eval": [1],
}
ODD_STRS = ['"0x10"', '"1e3"', '" 12"', '"1,2,3"', '"true"', '"a b c"', '"1.5"', '"-0"', '"slot1@host"',
            '"u@d"', '"8.10.2"', '"<"', '"=="', '"is"', '"i"', '"^a"', '"[0-9]"', '"inf"', '"1 + 2"']
LISTS = g.LISTS + ["{true, false}", "{true, 1, \"a\"}", "{error}", "{undefined}", "{\"a\", {\"b\"}}",
                   "{[a = 1]}", "{0.0, -0.0, 1e300}", "{\"1\", \"2\"}"]
REALS = ["0.0", "-0.0", "1e300", "1e-300", "123456789.125", "0.1", "100.0", "1e15", "1e16", "-2.5e-5"]
_leaf = g.rnd_leaf


def wide_leaf(r, kind="any"):
    x = r.random()
    if x < 0.12:
        return r.choice(LISTS)
    if x < 0.24:
        return r.choice(ODD_STRS)
    if x < 0.32:
        return r.choice(REALS)
    return _leaf(r, r.choice(["any", "any", "str", "num"]))


def wide_expr(r, depth, kind="any"):
    if depth <= 0 or r.random() < 0.25:
        return wide_leaf(r)
    if r.random() < 0.5:
        return _expr(r, depth, kind)
    name = r.choice(sorted(WIDE))
    n = r.choice(WIDE[name])
    args = ", ".join(wide_expr(r, depth - 1) if r.random() < 0.5 else wide_leaf(r) for _ in range(n))
    return f"{name}({args})"


_expr = g.rnd_expr
g.rnd_leaf = wide_leaf
g.rnd_expr = wide_expr

if __name__ == "__main__":
    g.main()
