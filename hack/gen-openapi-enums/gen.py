#!/usr/bin/env python3
"""Generates crates/openapi/src/enums.rs: the enum values of the built-in types'
fields, which upstream's OpenAPI documents carry (an `enum` list and a "Possible enum
values" paragraph in the description) and the k8s-openapi types do not.

Upstream's openapi-gen (kube-openapi pkg/generators/enum.go) finds them in the Go
types: a string type marked `+enum`, its constants, and the struct fields of that
type. This script reads the same Go sources, so the table follows a release exactly:

    hack/gen-openapi-enums/gen.py <k8s.io/api checkout> <k8s.io/apiextensions-apiserver checkout> \
        > crates/openapi/src/enums.rs && cargo fmt -p ferrokube-openapi

with both checkouts at the release's tags (v0.33.0 for Kubernetes 1.33; the
checked-in table is the formatted output). Run on v0.28.0, the table matched every
enum field of a 1.28 apiserver's served /openapi/v2 but two, where kube-openapi
changed since: two constants of one value are one entry now (the longer comment
kept), and an inline embedded struct's pointer field (RuleWithOperations.scope) has
its enum. Lists of an enum type get their items' enum since 2024 too.
"""

import os
import re
import sys

TYPE_RE = re.compile(r"^type\s+(\w+)\s+string\s*$")
STRUCT_RE = re.compile(r"^type\s+(\w+)\s+struct\s*{\s*$")
# `Name Type = <expr>` or `Name = <expr>`, in a const block or a single const.
CONST_RE = re.compile(r"^(?:const\s+|\t)(\w+)\s+(?:([\w.]+)\s+)?=\s*(.+?)\s*(//.*)?$")
FIELD_RE = re.compile(r'^\s*(\w+)\s+(\*?)(\[\])?([\w.]+)\s+`[^`]*json:"([^"]*)"')
EMBEDDED_RE = re.compile(r'^\s*\*?([\w.]+)\s+`[^`]*json:",inline"')
IMPORT_RE = re.compile(r'^\s*(\w+)?\s*"([^"]+)"\s*$')
STRING_RE = re.compile(r'^"((?:[^"\\]|\\.)*)"$')
CONVERSION_RE = re.compile(r"^([\w.]+)\((.+)\)$")


def go_files(directory):
    for name in sorted(os.listdir(directory)):
        if (
            name.endswith(".go")
            and not name.endswith("_test.go")
            and not name.startswith("zz_generated")
            and not name.startswith("generated")
            and "swagger_doc" not in name
        ):
            yield os.path.join(directory, name)


def doc_comment(lines, index):
    """The `//` lines right above line `index`, as gengo keeps them."""
    comment = []
    i = index - 1
    while i >= 0 and lines[i].strip().startswith("//"):
        text = lines[i].strip()[2:]
        comment.insert(0, text[1:] if text.startswith(" ") else text)
        i -= 1
    return comment


def parse_package(directory, import_path):
    """Enum types, typed string constants, struct fields and imports of one package."""
    enums, constants, fields, embedded, imports = set(), [], [], [], {}
    for path in go_files(directory):
        lines = open(path, encoding="utf-8").read().split("\n")
        struct = None
        in_imports = False
        for i, line in enumerate(lines):
            stripped = line.strip()
            if stripped.startswith("import ("):
                in_imports = True
                continue
            if in_imports:
                if stripped == ")":
                    in_imports = False
                    continue
                m = IMPORT_RE.match(line)
                if m:
                    alias = m.group(1) or m.group(2).rsplit("/", 1)[-1]
                    imports[alias] = m.group(2)
                continue
            m = TYPE_RE.match(line)
            if m and any(c.strip() == "+enum" for c in doc_comment(lines, i)):
                enums.add(m.group(1))
                continue
            m = STRUCT_RE.match(line)
            if m:
                struct = m.group(1)
                continue
            if struct is not None:
                if line.startswith("}"):
                    struct = None
                    continue
                m = FIELD_RE.match(line)
                if m:
                    _, pointer, slice_, type_name, tag = m.groups()
                    json_name = tag.split(",")[0]
                    if json_name and json_name != "-":
                        fields.append((struct, json_name, type_name, bool(slice_)))
                    continue
                m = EMBEDDED_RE.match(line)
                if m:
                    embedded.append((struct, m.group(1)))
                continue
            m = CONST_RE.match(line)
            if m and not line.startswith("\t\t"):
                name, type_name, expression, _ = m.groups()
                comment = " ".join(doc_comment(lines, i))
                constants.append((name, type_name, expression, comment))
    return {
        "path": import_path,
        "enums": enums,
        "constants": constants,
        "fields": fields,
        "embedded": embedded,
        "imports": imports,
    }


def packages(root, import_prefix, definition_prefix):
    for directory, _, files in os.walk(root):
        if not any(f == "types.go" for f in files):
            continue
        relative = os.path.relpath(directory, root)
        if relative.startswith(("testdata", "vendor")) or "/internal" in relative:
            continue
        package = parse_package(directory, f"{import_prefix}/{relative}")
        package["definition"] = f"{definition_prefix}.{relative.replace('/', '.')}"
        yield package


def description(name, value, comment):
    """kube-openapi's `enumValue.Description`."""
    comment = comment.strip()
    if comment.startswith(name):
        comment = comment[len(name):]
    comment = re.sub(r"\s+", " ", comment.strip())
    # The description generator trims each line's trailing spaces.
    return f' - `"{value}"` {comment}'.rstrip()


def rust_string(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    api, apiextensions = sys.argv[1], sys.argv[2]
    all_packages = list(packages(api, "k8s.io/api", "io.k8s.api"))
    all_packages += list(
        packages(
            os.path.join(apiextensions, "pkg/apis/apiextensions"),
            "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions",
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions",
        )
    )
    by_path = {p["path"]: p for p in all_packages}
    # Every constant's type and value, resolved through conversions
    # (`PathType("Exact")`) and references to other constants.
    declared = {}
    for p in all_packages:
        for name, type_name, expression, comment in p["constants"]:
            declared[(p["path"], name)] = (p, type_name, expression, comment)

    def evaluate(key, depth=0):
        """(type key or None, string value or None) of constant `key`."""
        if key not in declared or depth > 8:
            return None, None
        p, type_name, expression, _ = declared[key]
        typed = resolve(p, type_name) if type_name else None
        m = STRING_RE.match(expression)
        if m:
            return typed, bytes(m.group(1), "utf-8").decode("unicode_escape")
        m = CONVERSION_RE.match(expression)
        if m:
            inner_type, value = evaluate_expression(p, m.group(2), depth)
            return typed or resolve(p, m.group(1)), value
        if re.match(r"^[\w.]+$", expression):
            ref_type, value = evaluate(resolve(p, expression), depth + 1)
            return typed or ref_type, value
        return typed, None

    def evaluate_expression(p, expression, depth):
        m = STRING_RE.match(expression.strip())
        if m:
            return None, m.group(1)
        return evaluate(resolve(p, expression.strip()), depth + 1)

    # Enum types by (import path, name) with their values; of two constants of one
    # value the one with the longer comment wins (kube-openapi's addIfNotPresent).
    values = {}
    for p in all_packages:
        for name in p["enums"]:
            values[(p["path"], name)] = []
    for p in all_packages:
        for name, _, _, comment in p["constants"]:
            type_key, value = evaluate((p["path"], name))
            if type_key not in values or value is None:
                continue
            entries = values[type_key]
            for i, (existing_name, existing_value, existing_comment) in enumerate(entries):
                if existing_value == value:
                    if len(existing_comment) < len(comment) or (
                        len(existing_comment) == len(comment) and existing_comment > comment
                    ):
                        entries[i] = (name, value, comment)
                    break
            else:
                entries.append((name, value, comment))

    # Struct fields, with those of inline embedded structs.
    struct_fields = {}
    for p in all_packages:
        for struct, json_name, type_name, is_slice in p["fields"]:
            struct_fields.setdefault((p["path"], struct), []).append(
                (json_name, resolve(p, type_name), is_slice)
            )
    embedded = {}
    for p in all_packages:
        for struct, type_name in p["embedded"]:
            embedded.setdefault((p["path"], struct), []).append(resolve(p, type_name))

    def all_fields(key, depth=0):
        out = list(struct_fields.get(key, []))
        for inner in embedded.get(key, []):
            if depth < 4:
                out += all_fields(inner, depth + 1)
        return out

    used = {}
    fields = []
    for p in all_packages:
        structs = {s for s, _, _, _ in p["fields"]} | {s for s, _ in p["embedded"]}
        for struct in structs:
            for json_name, type_key, is_slice in all_fields((p["path"], struct)):
                if values.get(type_key):
                    enum_name = f"{by_path[type_key[0]]['definition']}.{type_key[1]}"
                    used[enum_name] = [
                        (value, description(name, value, comment))
                        for name, value, comment in values[type_key]
                    ]
                    fields.append((f"{p['definition']}.{struct}", json_name, enum_name, is_slice))
    out = [
        "//! Generated by hack/gen-openapi-enums/gen.py from k8s.io/api and",
        "//! k8s.io/apiextensions-apiserver v0.33.0: the `+enum` string types of the",
        "//! built-in types, their values with their constants' comments, and the fields of",
        "//! those types. Do not edit.",
        "",
        "/// Each enum type: its values and each value's line of the description, as",
        "/// kube-openapi writes them (`` - `\"Recreate\"` Kill all existing pods ...``).",
        "pub(crate) const ENUM_TYPES: &[(&str, &[(&str, &str)])] = &[",
    ]
    for name in sorted(used):
        out.append(f"    ({rust_string(name)}, &[")
        for value, line in used[name]:
            out.append(f"        ({rust_string(value)}, {rust_string(line)}),")
        out.append("    ]),")
    out.append("];")
    out.append("")
    out.append(
        "/// Each field of an enum type, or a list of one (`true`): its definition, its"
    )
    out.append("/// property and the enum type.")
    out.append("pub(crate) const ENUM_FIELDS: &[(&str, &str, &str, bool)] = &[")
    for definition, prop, enum_name, is_slice in sorted(set(fields)):
        out.append(
            f"    ({rust_string(definition)}, {rust_string(prop)}, {rust_string(enum_name)}, "
            f"{'true' if is_slice else 'false'}),"
        )
    out.append("];")
    print("\n".join(out))


def resolve(package, type_name):
    if "." in type_name:
        alias, name = type_name.split(".", 1)
        return (package["imports"].get(alias, alias), name)
    return (package["path"], type_name)


if __name__ == "__main__":
    main()
