"""A sandbox program for the sandbox tests: runs the code it is given and reports the value of `result`.

Loaded by the runner before the uid drop (like _harness.py), so the modules it
imports stay usable in fallback mode too.
"""

import gc
import json
import os
import resource


class Context:
    def __init__(self, report_fd: int, workdir: str):
        self.report_fd, self.workdir = report_fd, workdir


def run(args: dict, ctx: Context) -> None:
    namespace = {"ctx": ctx, "gc": gc, "os": os, "resource": resource}
    exec(args["code"], namespace)
    os.write(ctx.report_fd, json.dumps(namespace.get("result")).encode())
