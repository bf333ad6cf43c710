"""Reads submit files with HTCondor's own submit language (its Python bindings) and with
`carmi submit -dry-run`, each in a scratch directory holding the files it names, with the same
environment for both, and reports every disagreement: verdict (accepted or refused), number of
procs, and per proc the arguments, environment, RequestCpus/Memory/Disk/GPUs, the user's part of
the requirements and every attribute carmi sets. Exits 1 on any disagreement.

Usage: python3 compare.py CARMI_BINARY DIR_WITH_SUB_FILES HTCONDOR_PYTHON [--verbose]
HTCONDOR_PYTHON is a Python with HTCondor 24's bindings (`pip install 'htcondor>=24,<25'`).

By design (docs/submit.md, "Differences from HTCondor"), encoded below, not by skipping files:
- a file with no `queue` statement: HTCondor's `jobs()` makes one proc, carmi refuses it;
- attributes carmi adds that HTCondor has no counterpart for (OURS_ONLY);
- requirements: HTCondor appends its own defaults (Arch, OpSys, Disk >= RequestDisk, file
  transfer...), carmi appends `Cpus/Memory/Disk/GPUs >= N` for the requests; each side's
  additions are removed and the user's part compared;
- `$(ClusterId)` is left as text by carmi for the global RM; it is compared as HTCondor's 1.
"""
import json, os, re, shutil, subprocess, sys, tempfile

carmi, corpus, htc = [os.path.abspath(a) if i < 2 else a for i, a in enumerate(sys.argv[1:4])]
verbose = "--verbose" in sys.argv

# The one environment both readers see ($ENV(), getenv).
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TZ": "UTC", "USER": "ann",
       "CONDOR_CONFIG": "/dev/null",
       "LOGNAME": "ann", "PROJECT": "demo", "SCRATCH_DIR": "/scratch/ann", "OMP_NUM_THREADS": "4"}
# Attributes carmi sets with no HTCondor counterpart in `jobs()`, and why.
OURS_ONLY = {
    "GetEnv": "getenv is recorded; its variables are in Environment (compared)",
    "HoldAtSubmit": "HTCondor sets JobStatus = 5 instead; the global RM holds the job",
    "NiceUser": "HTCondor 24 folds nice_user into the accounting group",
    "JobMaterializeLimit": "max_materialize is read by the schedd's factory, not put on the ad",
}
# Attributes of carmi's own ad that are not job attributes of HTCondor's, or compared apart.
SKIP = {"Owner", "ClusterId", "ProcId", "Cmd", "Arguments", "MasterMachine", "ExecutableSha256",
        "Iwd", "Out", "Err", "UserLog", "TransferInput", "TransferOutput", "MasterRequirements",
        "Environment", "Requirements", "RequestCpus", "RequestMemory", "RequestDisk", "RequestGPUs"}

ORACLE = r'''
import json, sys, warnings
warnings.filterwarnings("ignore")
import classad, htcondor
req = json.load(open(sys.argv[1]))
out = {"pieces": [], "norm": {}}
procid = 0
for text in req["pieces"]:
    try:
        ads = list(htcondor.Submit(text).jobs(clusterid=1, procid=procid, owner=req["owner"]))
    except Exception as e:
        out["pieces"].append({"ok": False, "why": str(e)[:300]}); break
    procs = []
    for a in ads:
        d = {}
        for k in a.keys():
            v = a[k]
            d[k] = v if isinstance(v, (int, float, str, bool)) else {"expr": str(v)}
        procs.append(d)
    procid += len(ads)
    out["pieces"].append({"ok": True, "procs": procs})
for k, v in req["normalize"].items():
    try:
        out["norm"][k] = str(classad.ExprTree(v))
    except Exception:
        out["norm"][k] = v
for k, v in req.get("normalize_theirs", {}).items():
    out["norm"][k] = v
print(json.dumps(out, default=str))
'''

def lines(text):
    return text.replace("\r\n", "\n").split("\n")

def statements(text):
    """(start, end) physical line spans of the queue statements (a `(` list spans its lines)."""
    ls, spans, i = lines(text), [], 0
    while i < len(ls):
        start, logical = i, ls[i]
        while logical.rstrip().endswith("\\") and i + 1 < len(ls):
            i += 1; logical = logical.rstrip()[:-1] + " " + ls[i]
        s = logical.strip()
        if re.match(r"(?i)^queue(\s|$)", s):
            if s.endswith("(") and ")" not in s:
                while i + 1 < len(ls) and not ls[i].strip().startswith(")"):
                    i += 1
            spans.append((start, i))
        i += 1
    return spans

def pieces(text):
    """For each queue statement k: the file up to it with earlier queue statements removed."""
    ls, spans, out = lines(text), statements(text), []
    for k, (s, e) in enumerate(spans):
        drop = set()
        for (a, b) in spans[:k]:
            drop.update(range(a, b + 1))
        out.append("\n".join(l for j, l in enumerate(ls[:e + 1]) if j not in drop) + "\n")
    return out

def fixtures(text, d):
    """What the corpus files name relative to their directory."""
    for name in os.listdir(corpus):
        if not name.endswith(".sub"):
            shutil.copy(os.path.join(corpus, name), d)
    # A proxy HTCondor can read: a certificate and its key.
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "30",
                    "-subj", "/CN=ann", "-keyout", os.path.join(d, ".k"), "-out", os.path.join(d, ".c")],
                   capture_output=True)
    with open(os.path.join(d, "x509up_u1000"), "w") as f:
        f.write(open(os.path.join(d, ".c")).read() + open(os.path.join(d, ".k")).read())
    for name in ["a.dat", "b.dat", "c.dat", "inputs/x1.txt", "inputs/x2.txt", "params.txt",
                 "data.csv", "in.txt", "dir1/f", "dir2/f"]:
        p = os.path.join(d, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f: f.write("x\n")
    for l in lines(text):
        s = l.strip()
        m = re.match(r"(?i)^(executable|transfer_input_files|initialdir|initial_dir)\s*=\s*(.*)$", s)
        if m:
            key, v = m.group(1).lower(), m.group(2).strip()
            items = [v] if key != "transfer_input_files" else [x.strip() for x in v.split(",")]
            for it in items:
                it = it.strip('"')
                if not it or "$" in it or "://" in it or it.startswith("/") or it == ".":
                    continue
                p = os.path.join(d, it)
                if key in ("initialdir", "initial_dir") or it.endswith("/"):
                    os.makedirs(p, exist_ok=True); continue
                os.makedirs(os.path.dirname(p) or d, exist_ok=True)
                if not os.path.exists(p):
                    with open(p, "w") as f: f.write("#!/bin/sh\nexit 0\n")
                    os.chmod(p, 0o755)
        m = re.match(r"(?i)^queue\s+(.*?)\s+from\s+([^\s(|][^\s|]*)\s*$", s)
        if m:
            names = [x for x in re.split(r"[\s,]+", re.sub(r"(?i)^\d+\s+", "", m.group(1))) if x]
            p = os.path.join(d, m.group(2))
            if not p.startswith(d) or os.path.exists(p): continue
            with open(p, "w") as f:
                for r in range(3):
                    f.write(", ".join(f"v{r}{i}" for i in range(max(1, len(names)))) + "\n")

def v2_words(s):
    """HTCondor's new syntax: white space separates, single quotes group, '' is a quote."""
    out, cur, any_, q, i = [], "", False, False, 0
    while i < len(s):
        c = s[i]
        if c == "'" and q and s[i + 1:i + 2] == "'":
            cur += "'"; i += 2; continue
        if c == "'":
            q = not q; any_ = True
        elif c.isspace() and not q:
            if any_: out.append(cur); cur, any_ = "", False
        else:
            cur += c; any_ = True
        i += 1
    if any_: out.append(cur)
    return out

def their_args(a):
    if a.get("Arguments") not in (None, ""):
        return v2_words(a["Arguments"])
    return (a.get("Args") or "").split()

def their_env(a):
    if a.get("Environment") not in (None, ""):
        words = v2_words(a["Environment"])
    else:
        words = [w for w in (a.get("Env") or "").split(";") if w.strip()]
    return dict(w.split("=", 1) for w in words if "=" in w)

def conjuncts(expr):
    """Top-level `&&` parts of an expression, flattened through parentheses, blanks removed and
    HTCondor's spellings made one (`=?=` is `is`, `True` is `true`)."""
    parts, depth, cur, i, instr = [], 0, "", 0, False
    while i < len(expr):
        c = expr[i]
        if c == '"' and (i == 0 or expr[i - 1] != "\\"): instr = not instr
        if not instr:
            if c == "(": depth += 1
            elif c == ")": depth -= 1
            elif expr[i:i + 2] == "&&" and depth == 0:
                parts.append(cur); cur = ""; i += 2; continue
        cur += c; i += 1
    parts.append(cur)
    out = []
    for p in parts:
        p = strip_parens(p)
        if not p:
            continue
        sub = conjuncts_once(p)
        out.extend(conjuncts(p) if len(sub) > 1 else [normal(p)])
    return out

def conjuncts_once(p):
    depth, n, instr = 0, 1, False
    for i, c in enumerate(p):
        if c == '"': instr = not instr
        if instr: continue
        depth += c == "("; depth -= c == ")"
        if depth == 0 and p[i:i + 2] == "&&": n += 1
    return [None] * n

def normal(p):
    p = p.replace("=?=", "is").replace("=!=", "isnt")
    return re.sub(r"\b(True|TRUE)\b", "true", re.sub(r"\b(False|FALSE)\b", "false", p))

def strip_parens(p):
    p = "".join(p.split())
    while p.startswith("(") and p.endswith(")"):
        depth, ok = 0, True
        for j, c in enumerate(p):
            depth += c == "("; depth -= c == ")"
            if depth == 0 and j < len(p) - 1: ok = False; break
        if not ok: break
        p = p[1:-1]
    return p

THEIR_DEFAULTS = re.compile(r"^(versioncmp\(|TARGET\.(Arch|OpSys|Disk|Memory|GPUs|Cpus|HasFileTransfer|HasSelfCheckpointTransfers|FileSystemDomain)\b|countMatches\()")
# HTCondor reads `+RequestX` as a request of a custom machine resource X (TARGET.X >= RequestX);
# carmi keeps it as a plain attribute (docs/submit.md).
THEIR_CUSTOM_RESOURCE = re.compile(r"^TARGET\.(\w+)>=Request\1$")

def user_requirements(expr, ours, ad):
    parts = conjuncts(expr or "true")
    if ours:
        # carmi appends one term per request, in this order, after the user's expression.
        added = [f"{a}>={ad[r]}" for a, r in [("Cpus", "RequestCpus"), ("Memory", "RequestMemory"),
                                                ("Disk", "RequestDisk"), ("GPUs", "RequestGPUs")] if r in ad]
        if added and parts[-len(added):] == added:
            parts = parts[:-len(added)]
        parts = [p for p in parts if p != "true"]
    else:
        parts = [p for p in parts if not THEIR_DEFAULTS.match(p) and not THEIR_CUSTOM_RESOURCE.match(p)
                 and "TARGET.HasFileTransfer" not in p]
    return " && ".join(parts)

def carmi_dry(f, d):
    p = subprocess.run([carmi, "submit", "-dry-run", f], cwd=d, env=dict(ENV, HOME=os.path.join(d, ".home")),
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        return {"ok": False, "why": (p.stderr.strip().splitlines() or ["?"])[-1][:300]}
    ads, cur = [], {}
    for l in p.stdout.splitlines():
        if not l.strip():
            if cur: ads.append(cur); cur = {}
            continue
        k, _, v = l.partition(" = ")
        cur[k.strip()] = v.strip()
    if cur: ads.append(cur)
    return {"ok": True, "procs": [a for a in ads if "ProcId" in a]}

def unquote(v):
    if v.startswith('"') and v.endswith('"'):
        return v[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return v

def compare_proc(i, o, t, norm):
    """Why proc i of ours (o) and theirs (t) differ, or ''."""
    oa = [w.replace("$(ClusterId)", "1").replace("$(Cluster)", "1") for w in v2_words(unquote(o.get("Arguments", '""')))]
    if oa != their_args(t):
        return f"proc {i}: arguments {oa} vs htcondor {their_args(t)}"
    oe = dict(w.split("=", 1) for w in v2_words(unquote(o.get("Environment", '""'))) if "=" in w)
    oe = {k: v.replace("$(ClusterId)", "1").replace("$(Cluster)", "1") for k, v in oe.items()}
    if oe != their_env(t):
        return f"proc {i}: environment {oe} vs htcondor {their_env(t)}"
    for k, default in [("RequestCpus", 1), ("RequestMemory", None), ("RequestDisk", None), ("RequestGPUs", None)]:
        theirs = t.get(k)
        ours = int(o[k]) if k in o else None
        if not isinstance(theirs, int) or isinstance(theirs, bool):
            theirs = None
        if ours is None and theirs == default:
            continue
        if ours != theirs:
            return f"proc {i}: {k} {ours} vs htcondor {theirs}"
    treq = t.get("Requirements")
    treq = treq["expr"] if isinstance(treq, dict) else str(treq)
    ur, tr = user_requirements(o.get("Requirements"), True, o), user_requirements(treq, False, t)
    if ur != tr:
        return f"proc {i}: requirements '{ur}' vs htcondor '{tr}'"
    for k, v in o.items():
        if k in SKIP or k.startswith("Class_") or k in OURS_ONLY:
            continue
        # ClassAd attribute names are case-insensitive (HTCondor writes `x509userproxy`).
        tk = next((n for n in t if n.lower() == k.lower()), None)
        if tk is None:
            return f"proc {i}: attribute {k} = {v} has no counterpart in htcondor's ad"
        ours = norm.get(f"{i}:{k}", v).replace("$(ClusterId)", "1").replace("$(Cluster)", "1")
        theirs = norm.get(f"t{i}:{k}", json.dumps(t[tk]) if isinstance(t[tk], str) else str(t[tk]))
        try:
            same = float(ours) == float(theirs)
        except ValueError:
            same = "".join(ours.split()).lower() == "".join(theirs.split()).lower()
        if not same:
            return f"proc {i}: {k} = {ours} vs htcondor {theirs}"
    return ""

def compare_file(f):
    d = tempfile.mkdtemp()
    try:
        text = open(os.path.join(corpus, f), newline="").read()
        shutil.copy(os.path.join(corpus, f), d)
        fixtures(text, d)
        ours = carmi_dry(f, d)
        owner = "ann"
        norm = {}
        for i, a in enumerate(ours.get("procs", [])):
            for k, v in a.items():
                if k not in SKIP and not k.startswith("Class_") and k not in OURS_ONLY:
                    norm[f"{i}:{k}"] = v
        ps = pieces(text)
        req = {"pieces": ps or [text], "owner": owner, "normalize": norm}
        rq = os.path.join(d, ".oracle.json")
        json.dump(req, open(rq, "w"))
        o = subprocess.run([htc, "-c", ORACLE, rq], cwd=d, env=dict(ENV, HOME=os.path.join(d, ".home")),
                           capture_output=True, text=True, timeout=300)
        try:
            res = json.loads(o.stdout.strip().splitlines()[-1])
        except Exception:
            return f"the oracle failed: {o.stderr.strip()[-300:]}"
        norm = res["norm"]
        pcs = res["pieces"]
        theirs_ok = all(p["ok"] for p in pcs)
        if not ps:
            # By design: no `queue`, HTCondor's jobs() makes one proc; carmi refuses.
            theirs_ok = False
        if theirs_ok != ours["ok"]:
            why = ours.get("why", "") or next((p["why"] for p in pcs if not p["ok"]), "")
            return f"htcondor {'accepts' if theirs_ok else 'refuses'}, carmi {'accepts' if ours['ok'] else 'refuses'}: {why}"
        if not theirs_ok:
            return ""
        tprocs = [a for p in pcs for a in p["procs"]]
        if len(tprocs) != len(ours["procs"]):
            return f"procs {len(ours['procs'])} vs htcondor {len(tprocs)}"
        # Their attribute values in ClassAd form, to compare with ours normalized the same way.
        for i, t in enumerate(tprocs):
            for k in ours["procs"][i]:
                tk = next((n for n in t if n.lower() == k.lower()), None)
                if tk is not None:
                    v = t[tk]
                    norm[f"t{i}:{k}"] = (v["expr"] if isinstance(v, dict) else json.dumps(v) if isinstance(v, str)
                                         else "true" if v is True else "false" if v is False else str(v))
        for i, (o_, t) in enumerate(zip(ours["procs"], tprocs)):
            why = compare_proc(i, o_, t, norm)
            if why:
                return why
        return ""
    finally:
        shutil.rmtree(d, ignore_errors=True)

files = sorted(f for f in os.listdir(corpus) if f.endswith(".sub"))
agree = 0
for f in files:
    why = compare_file(f)
    agree += not why
    if why or verbose:
        print(f"{f}: {why or 'agrees'}")
print(f"{agree}/{len(files)} submit files read as HTCondor reads them")
sys.exit(0 if agree == len(files) else 1)
