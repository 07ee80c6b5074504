"""Writes crates/apimachinery/src/managedfields/zero.rs: what a Go zero value of each
built-in kind serializes, from the struct definitions of k8s.io/api at a tag.

A field is there in the zero value when it is a non-pointer struct (encoding it never
omits it; a time's zero is null), or when its json tag has no omitempty (null, "", 0
or false). Upstream's
field manager compares a created object with its kind's zero value, so these are the
fields a create does not add (structured-merge-diff's Compare).

Usage: python3 hack/gen-zero-values/gen.py <k8s.io/api git dir> [tag, default v0.33.0]
"""
import re, subprocess, sys, json
G = sys.argv[1]; TAG = sys.argv[2] if len(sys.argv) > 2 else "v0.33.0"
files = [f for f in subprocess.check_output(["git","-C",G,"ls-tree","-r","--name-only",TAG]).decode().split() if f.endswith(".go") and not f.endswith("_test.go") and "generated" not in f and f.count("/") == 2]
SCALARS = {"string","bool","int","int32","int64","uint","uint32","uint64","float32","float64","byte"}
# cross-package types that serialize as scalars or atoms
# Non-pointer fields of these types are written, as null, when zero, omitempty or not.
GO_TIMES = {"metav1.Time", "metav1.MicroTime"}
LEAF_TYPES = {"metav1.Time","metav1.MicroTime","metav1.Duration","resource.Quantity","intstr.IntOrString","runtime.RawExtension","metav1.FieldsV1","apiextensionsv1.JSON"}
structs = {}   # def -> list of (json, gotype, omitempty, inline)
named = {}     # def -> underlying go type
pkg_of = {}
def defname(pkgdir, t):
    g, v = pkgdir.split("/")
    return f"io.k8s.api.{g}.{v}.{t}"
for f in files:
    pkgdir = "/".join(f.split("/")[:2])
    src = subprocess.check_output(["git","-C",G,"show",f"{TAG}:{f}"]).decode()
    imports = {}
    for m in re.finditer(r'^\s*(\w+)?\s*"(k8s\.io/[^"]+)"', src, re.M):
        alias, path = m.group(1), m.group(2)
        imports[alias or path.split("/")[-1]] = path
    # strip comments
    src_nc = re.sub(r"//[^\n]*", "", src)
    for m in re.finditer(r"^type (\w+) struct \{(.*?)^\}", src_nc, re.M | re.S):
        name, body = m.group(1), m.group(2)
        fields = []
        for line in body.split("\n"):
            line = line.strip()
            if not line: continue
            fm = re.match(r"^(\w+)\s+([\*\[\]\w\.]+(?:\[[\w\.]+\][\*\w\.\[\]]+)?)\s+`json:\"([^\"]*)\"", line)
            if fm:
                fname, gotype, tag = fm.group(1), fm.group(2), fm.group(3)
            else:
                em = re.match(r"^([\*\w\.]+)\s+`json:\"([^\"]*)\"", line)
                if not em:
                    continue
                fname, gotype, tag = "", em.group(1), em.group(2)
            jn = tag.split(",")[0]
            inline = ",inline" in tag
            if jn == "-": continue
            fields.append((jn, gotype, "omitempty" in tag, inline))
        structs[defname(pkgdir, name)] = (pkgdir, imports, fields)
    for m in re.finditer(r"^type (\w+) ([\w\.\[\]\*]+)\s*$", src_nc, re.M):
        named[defname(pkgdir, m.group(1))] = (pkgdir, m.group(2))

def resolve(pkgdir, imports, t):
    """-> ('struct', def) | ('scalar', zero) | ('ptr',) | ('coll',) | ('leaf',)"""
    if t.startswith("*"): return ("ptr",)
    if t.startswith("[]") or t.startswith("map["): return ("coll",)
    if t in SCALARS:
        return ("scalar", "" if t == "string" else (False if t == "bool" else 0))
    if "." in t:
        alias, tn = t.split(".", 1)
        if t in LEAF_TYPES: return ("leaf",)
        path = imports.get(alias, "")
        if path == "k8s.io/apimachinery/pkg/apis/meta/v1":
            return ("struct", f"io.k8s.apimachinery.pkg.apis.meta.v1.{tn}") if tn in ("ObjectMeta","ListMeta","LabelSelector") else ("leaf",)
        if path.startswith("k8s.io/api/"):
            return resolve_def(defname("/".join(path.split("/")[2:4]), tn))
        return ("leaf",)
    return resolve_def(defname(pkgdir, t))

def resolve_def(d):
    if d in structs: return ("struct", d)
    if d in named:
        pkgdir, under = named[d]
        return resolve(pkgdir, structs.get(d, (pkgdir, {}, []))[1] if d in structs else {}, under) if not under.startswith(("[]","map[","*")) else resolve(pkgdir, {}, under)
    return ("leaf",)

out = {}
for d, (pkgdir, imports, fields) in sorted(structs.items()):
    rows = []
    for jn, gotype, omit, inline in fields:
        r = resolve(pkgdir, imports, gotype)
        if inline:
            continue
        if r[0] == "struct":
            rows.append((jn, "struct", r[1]))
        elif not omit or gotype in GO_TIMES:
            # A time is a struct to encoding/json, never empty: its zero is null.
            rows.append((jn, r[0], r[1] if r[0] == "scalar" else None))
    out[d] = rows
roots = [d for d, rows in out.items()
         if any(r[0] == "metadata" and r[1] == "struct" and r[2].endswith(".ObjectMeta") for r in rows)]
seen = set(); stack = list(roots)
while stack:
    d = stack.pop()
    if d in seen: continue
    seen.add(d)
    stack.extend(x for _, kind, x in out.get(d, []) if kind == "struct")
def zero(kind, x):
    if kind == "struct": return f'Zero::Struct("{x}")'
    if kind in ("ptr", "coll", "leaf"): return "Zero::Null"
    if x == "": return "Zero::EmptyString"
    if x is False: return "Zero::False"
    return "Zero::Number"
rows = sorted((d, jn, zero(kind, x)) for d in seen for (jn, kind, x) in out.get(d, []))
# meta/v1's ObjectMeta (another module): its zero value holds creationTimestamp, a
# metav1.Time whose encoding of the zero time is null.
rows = sorted(rows + [("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "creationTimestamp", "Zero::Null")])
here = __file__.rsplit("/", 3)[0]
with open(f"{here}/crates/apimachinery/src/managedfields/zero.rs", "w") as f:
    f.write(f"""// Generated by hack/gen-zero-values/gen.py from k8s.io/api {TAG}; do not edit.
// Rows are sorted by definition, then field: lookups binary-search (a test checks it).

use super::typed::Zero;

/// `(definition, field, zero value)` for every field a Go zero value of the
/// definition serializes, for the definitions reachable from a kind's root through
/// non-pointer struct fields.
pub(super) static ZERO_FIELDS: &[(&str, &str, Zero)] = &[
""")
    for d, jn, z in rows:
        f.write(f'    ("{d}", "{jn}", {z}),\n')
    f.write("];\n")
print(len(rows), "rows")
