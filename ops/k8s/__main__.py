"""`python -m ops.k8s [OVERLAY …]`: each overlay rendered and checked, its object counts and
every problem (make kubernetes-render)."""

from __future__ import annotations

import sys

from .checks import POLICIES, check
from .render import OVERLAYS, K8sError, kinds, render


def main(argv: list[str] | None = None) -> int:
    overlays = (argv if argv is not None else sys.argv[1:]) or list(OVERLAYS)
    failed = False
    for overlay in overlays:
        if overlay not in POLICIES:
            print(f"unknown overlay {overlay!r}: one of {', '.join(OVERLAYS)}", file=sys.stderr)
            return 2
        try:
            objects = render(overlay)
        except K8sError as error:
            print(error, file=sys.stderr)
            return 1
        problems = check(objects, POLICIES[overlay])
        counted = ", ".join(f"{n} {kind}" for kind, n in sorted(kinds(objects).items()))
        print(f"{overlay}: {len(objects)} objects ({counted}): {len(problems) or 'no'} problems")
        for problem in problems:
            print(f"  {problem}")
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
