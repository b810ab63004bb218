"""Run a Pulumi Python program under the mock runtime and print what it registered, as JSON lines.

Standalone on purpose: the package test copies it (with stacks/offline/mocks.py beside it) out of the repository and
runs it with an interpreter that sees the library only as installed from its wheel, so the program can use nothing
of this checkout. Usage: python example_harness.py <program dir> <project> <stack> [key=value secret config...]
"""

import json
import runpy
import sys

import pulumi
from mocks import RenderMocks  # the copy beside this file
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await


class Recording(RenderMocks):
    def __init__(self) -> None:
        super().__init__("1.34")
        self.registered: list[dict] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs):  # type: ignore[override]
        self.registered.append({"type": args.typ, "name": args.name})
        return super().new_resource(args)


def main() -> None:
    program, project, stack, *pairs = sys.argv[1:]
    config = dict(pair.split("=", 1) for pair in pairs)
    mocks = Recording()
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False)
    pulumi.runtime.set_all_config({f"{project}:{k}": v for k, v in config.items()},
                                  [f"{project}:{k}" for k in config])
    _sync_await(run_pulumi_func(lambda: runpy.run_path(f"{program}/__main__.py", run_name="__main__")))
    import llm_serving

    print(json.dumps({"library": llm_serving.__file__, "resources": mocks.registered}))


if __name__ == "__main__":
    main()
