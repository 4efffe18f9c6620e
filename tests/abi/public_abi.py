"""What the public headers declare, read from their text: structs and their fields, DSV4_API
functions and integer constants. Shared by the ABI generators (gen_c_symbols.py,
gen_layout_pins.py, gen_abi_table.py) so that they agree on what "the public ABI" is.

The numbers (sizes, offsets, constant values) are never computed here: the generators emit C that
the compiler evaluates.
"""
import re

# Macros that are not values a binding mirrors: export decoration and include guards.
_NOT_CONSTANTS = {"DSV4_API", "DSV4_BUILDING_LIBRARY"}


def strip_comments(text):
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def struct_names(text):
    """typedef'd structs with a body, in declaration order (opaque handles are not listed)."""
    return re.findall(r"typedef struct (\w+) \{", strip_comments(text))


def struct_fields(text, name):
    """Field names of `typedef struct name {...} name;`, in declaration order."""
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), text, re.S)
    if not m:
        raise ValueError("struct %s not found" % name)
    out = []
    for decl in strip_comments(m.group(1)).split(";"):
        decl = " ".join(decl.split())
        if not decl:
            continue
        fn = re.search(r"\(\*\s*(\w+)\)", decl)
        if fn:
            out.append(fn.group(1))
            continue
        ident = re.search(r"(\w+)\s*(\[[^\]]*\])?$", decl)
        out.append(ident.group(1))
    return out


def functions(text):
    """DSV4_API function names; "(dsv4_x_init)(" declares a function a same-named macro wraps."""
    found = re.findall(r"DSV4_API\b[^;{]*?\b(dsv4_\w+)\)?\s*\((?!dsv4_\w+\))",
                       strip_comments(text))
    return sorted(set(found))


def constants(text):
    """Object-like DSV4_* macros with a value (not include guards, not DSV4_API)."""
    names = []
    for m in re.finditer(r"^#define (DSV4_\w+)(?!\()[ \t]+\S", strip_comments(text), re.M):
        name = m.group(1)
        if name not in _NOT_CONSTANTS and not name.endswith("_H") and name not in names:
            names.append(name)
    return names
