"""``attnsim validate``: measured vs published for the bundled validation set."""
from __future__ import annotations



def register(sub) -> None:
    v = sub.add_parser("validate", help="run the bundled validation set (GPU calibration, AttAcc, limits)",
                       description="Prints measured vs published with the error of each row; exit status 1 if any "
                       "row is outside its stated tolerance.")
    v.add_argument("--set", dest="sets", action="append",
                   help="only these validation sets (repeatable; default all)")
    v.add_argument("--json", action="store_true")
    v.set_defaults(func=validate_cmd)


def validate_cmd(args) -> int:
    from attnsim.report import table
    from attnsim.validate import run
    rows = run(args.sets)
    if args.json:
        from attnsim.results import dumps
        print(dumps([r.as_dict() for r in rows], indent=1))
    else:
        body = [[r.set, r.name, f"{r.measured:.4g}", f"{r.published:.4g}",
                 f"{r.error:+.1%}" if r.check == "relative" else "-",
                 f"±{r.tolerance:.0%}" if r.check == "relative" else "<= 1", "ok" if r.ok else "FAIL"] for r in rows]
        print(table(body, ["set", "row", "measured", "published", "error", "tolerance", ""]))
        bad = sum(not r.ok for r in rows)
        print(f"\n{len(rows) - bad} of {len(rows)} rows within tolerance" + (f"; {bad} outside" if bad else ""))
    return 1 if any(not r.ok for r in rows) else 0
