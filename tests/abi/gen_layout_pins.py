#!/usr/bin/env python3
"""Prints the sizeof/offsetof pins for layout_asserts.c from the current public headers.

Run once when a struct intentionally grows (append-only), then paste the output into
layout_asserts.c:  python3 tests/abi/gen_layout_pins.py > /tmp/pins.inc
Needs a C compiler (cc). Fields are read from the headers; the numbers come from the compiler.
"""
import os
import subprocess
import sys
import tempfile

from public_abi import struct_fields

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADERS = ["include/dsv4/dsv4_types.h", "include/dsv4/dsv4.h", "include/dsv4/dsv4_paged.h",
           "backends/include/dsv4_backend.h"]
STRUCTS = ["dsv4_device", "dsv4_dtype", "dsv4_tensor", "dsv4_kv_cache_desc", "dsv4_kv_layout_info",
           "dsv4_ctx_options", "dsv4_backend_info", "dsv4_device_info", "dsv4_ctx_info",
           "dsv4_plan_options", "dsv4_plan_info", "dsv4_run_args", "dsv4_kv_write_args", "dsv4_export_args",
           "dsv4_merge_args",
           "dsv4_backend_iface"]


def main():
    text = "".join(open(os.path.join(ROOT, h)).read() for h in HEADERS)
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include <dsv4/dsv4_paged.h>',
             '#include "dsv4_backend.h"', "int main(void) {"]
    for s in STRUCTS:
        lines.append('printf("PIN_SIZE(%s, %%zu);\\n", sizeof(%s));' % (s, s))
        for f in struct_fields(text, s):
            lines.append('printf("PIN_OFFSET(%s, %s, %%zu);\\n", offsetof(%s, %s));' % (s, f, s, f))
    lines.append("return 0; }")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "pins.c")
        exe = os.path.join(tmp, "pins")
        open(src, "w").write("\n".join(lines) + "\n")
        subprocess.check_call(["cc", "-std=c99", "-I", os.path.join(ROOT, "include"),
                               "-I", os.path.join(ROOT, "backends/include"), src, "-o", exe])
        sys.stdout.write(subprocess.check_output([exe]).decode())


if __name__ == "__main__":
    main()
