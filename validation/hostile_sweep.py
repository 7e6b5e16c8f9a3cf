"""A broad hostile-input sweep of every command and flag (a script, not a test).

    python validation/hostile_sweep.py [--quick] [--json validation/results/hostile_sweep.json]

Every case runs a command (in-process through its ``main``, or as a real process where the
process matters: closed stdout, Ctrl-C) and is judged by one oracle:

- never a traceback, never an exit code other than 0, 1, 2 (130 for Ctrl-C, 141 a broken pipe);
- a failing run prints exactly one ``error`` line;
- a successful run wrote its output, whole and strict JSON (no NaN / Infinity), and not empty;
- inputs are never changed, no temporary file is left behind, an old output is kept whole when
  the run fails;
- where the answer is known the exit code must match (output = input -> 2; empty input -> 1;
  a full disk -> 1; an output that is a folder -> 2).

The cases: every flag of every command with hostile values (empty, zero, negative, nan, inf,
huge integers, garbage, unknown enum values); every output flag as the input, a symlink to a new
file and to the input, ``/dev/stdout``, ``/dev/full``, a folder, a file under a file, a read-only
mount and a full tmpfs (when this runs as root and may mount; else those are skipped); every
input as an empty file, blank lines, a BOM, malformed lines, huge integers, nan sizes; a closed
stdout and SIGINT at several moments for every command (real processes).

It prints a table of failures by class and writes them as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

HOSTILE = ["", "0", "-1", "nan", "inf", "-inf", "1e400", str(2**64), "9" * 60, "abc", "1e-9", "1,,2"]
QUICK_HOSTILE = ["", "0", "-1", "nan", "inf", str(2**64), "abc"]

MOONCAKE = "".join(
    json.dumps({"timestamp": 1000 * i, "input_length": 1536, "output_length": 4, "hash_ids": [0, 1 + i % 3, 10 + i]}) + "\n"
    for i in range(8))
KEYS = "a\nb\na\nb\nc\nd\na\n"
TTFT = (REPO / "data" / "ttft.jsonl").read_text()


# ------------------------------------------------------------------ running one case
def _run_in_process(entry: str, argv: list[str]) -> tuple[int | None, str, str, str]:
    """(exit code, stdout, stderr, escaped exception) of one in-process run."""
    from stackdist.cli.main import main as stackdist_main

    if entry == "stackdist":
        main = stackdist_main
    elif entry == "kvlab":
        from kvlab.__main__ import main
    else:
        from kvlab.placement.__main__ import main
    out_bytes = io.BytesIO()
    out = io.TextIOWrapper(out_bytes, encoding="utf-8", write_through=True)
    err = io.StringIO()
    old_in = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")
    escaped = ""
    code: int | None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            except BaseException as exc:  # noqa: BLE001 - that is the finding
                code, escaped = None, f"{type(exc).__name__}: {exc}"
    finally:
        sys.stdin = old_in
    out.flush()
    return code, out_bytes.getvalue().decode("utf-8", "replace"), err.getvalue(), escaped


def _strict_json(text: str) -> bool:
    def bad(_: str) -> Any:
        raise ValueError("not strict JSON")

    try:
        for line in ([text] if text.lstrip().startswith(("{", "[")) and "\n{" not in text.strip() else text.splitlines()):
            if line.strip():
                json.loads(line, parse_constant=bad)
        return bool(text.strip())
    except ValueError:
        return False


def _digest(paths: list[Path]) -> dict[str, str]:
    out = {}
    for p in paths:
        if p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


class Sweep:
    """Holds the cases' results."""

    def __init__(self) -> None:
        self.cases = 0
        self.failures: list[dict[str, Any]] = []

    def fail(self, kind: str, case: str, detail: str) -> None:
        self.failures.append({"class": kind, "case": case, "detail": detail[-400:]})

    def judge(self, case: str, code: int | None, out: str, err: str, escaped: str, *, expect: set[int] | None = None,
              outputs: list[Path] = (), json_stdout: bool = False, inputs_before: dict[str, str] | None = None,
              inputs: list[Path] = (), folder: Path | None = None, old: dict[str, bytes] | None = None,
              allow: set[int] = frozenset({0, 1, 2})) -> None:
        self.cases += 1
        if escaped:
            self.fail("traceback (exception escaped main)", case, escaped)
            return
        if "Traceback" in err:
            self.fail("traceback on stderr", case, err)
        if code not in allow:
            self.fail("exit code outside the convention", case, f"exit {code}: {err}")
        if expect is not None and code not in expect:
            self.fail("wrong exit code", case, f"exit {code}, expected {sorted(expect)}: {err.strip()[-300:]}")
        if code not in (0, None) and code in (1, 2):
            lines = [ln for ln in err.splitlines() if ": error:" in ln or ln.startswith("error:")]
            if len(lines) != 1:
                self.fail("not one error line", case, err)
        if code == 0:
            for p in outputs:
                if not p.exists() or (p.is_file() and not _strict_json(p.read_text(errors="replace"))):
                    self.fail("exit 0 with a missing, empty or non-strict JSON output", case, str(p))
            if json_stdout and not _strict_json(out):
                self.fail("exit 0 with empty or non-strict JSON on stdout", case, out[:200])
        if inputs_before is not None and _digest(list(inputs)) != inputs_before:
            self.fail("lost input (an input changed)", case, str(inputs))
        if old is not None and code != 0:
            for p, data in old.items():
                if not Path(p).exists() or Path(p).read_bytes() != data:
                    self.fail("lost file (old output not kept on failure)", case, p)
        if folder is not None:
            stray = [p.name for p in folder.rglob("*") if p.name.endswith(".tmp") or p.name.startswith(".staging")]
            if stray:
                self.fail("temporary file left behind", case, ", ".join(stray))


# ------------------------------------------------------------------ the commands
def commands(d: Path) -> list[dict[str, Any]]:
    """Every command with a small valid base invocation, its inputs and outputs."""
    t, r, ttft = d / "t.csv", d / "r.jsonl", d / "ttft.jsonl"
    o = d / "out.json"
    return [
        {"name": "curve", "entry": "stackdist", "argv": ["curve", str(t), "-o", str(o)], "inputs": [t], "outputs": {"-o": o}},
        {"name": "curve --plot", "entry": "stackdist", "argv": ["curve", str(t), "-o", str(o), "--plot", str(d / "c.png")],
         "inputs": [t], "outputs": {"-o": o}, "png": {"--plot"}},
        {"name": "tiers", "entry": "stackdist", "argv": ["tiers", str(t), "--gpu", "2", "-o", str(o)], "inputs": [t],
         "outputs": {"-o": o}},
        {"name": "plan", "entry": "stackdist", "argv": ["plan", str(r), "--json", str(o)], "inputs": [r], "outputs": {"--json": o}},
        {"name": "plan vllm", "entry": "stackdist", "argv": ["plan", str(r), "--semantics", "vllm", "--json", str(o),
                                                              "--per-request", str(d / "pr.csv")],
         "inputs": [r], "outputs": {"--json": o}},
        {"name": "plan sampled", "entry": "stackdist", "argv": ["plan", str(r), "--sample-rate", "0.5", "--json", str(o)],
         "inputs": [r], "outputs": {"--json": o}},
        {"name": "curve sampled", "entry": "stackdist", "argv": ["curve", str(t), "--sample-rate", "0.5", "-o", str(o)],
         "inputs": [t], "outputs": {"-o": o}},
        {"name": "watch", "entry": "stackdist", "argv": ["watch", str(t), "--no-follow", "-o", str(o)], "inputs": [t],
         "outputs": {"-o": o}, "append": True},
        {"name": "kvlab scenario", "entry": "kvlab", "argv": ["scenario", "--docs", "3", "--tokens", "64", "--gpu", "128"],
         "inputs": [], "outputs": {}, "json_stdout": True},
        {"name": "kvlab summarize", "entry": "kvlab", "argv": ["summarize", str(ttft), str(o)], "inputs": [ttft],
         "outputs": {"OUTPUT": o}},
        {"name": "kvlab block-lab", "entry": "kvlab", "argv": ["block-lab", "--gpu", "128", "--docs", "3", "--tokens", "64",
                                                               "--question-tokens", "16", "--json", str(o)],
         "inputs": [], "outputs": {"--json": o}},
        {"name": "kvlab run-lab", "entry": "kvlab", "argv": ["run-lab", "--out", str(d / "lab"), "--measured", str(ttft)],
         "inputs": [ttft], "outputs": {}, "folder_out": d / "lab"},
        {"name": "placement simulate", "entry": "placement", "argv": ["simulate", "--workload", "chat", "--param",
                                                                      "n_sessions=2", "--param", "accesses_per_session=200"],
         "inputs": [], "outputs": {}, "json_stdout": True},
        {"name": "placement simulate mooncake", "entry": "placement",
         "argv": ["simulate", "--workload", f"mooncake:{r}", "--model", "qwen3-8b", "--gpu", "h100"],
         "inputs": [r], "outputs": {}, "json_stdout": True},
        {"name": "placement calibration", "entry": "placement", "argv": ["calibration"], "inputs": [], "outputs": {},
         "json_stdout": True},
        {"name": "placement generate", "entry": "placement", "argv": ["generate", "chat", "--param", "n_sessions=2",
                                                                      "--out", str(d / "g.jsonl")],
         "inputs": [], "outputs": {"--out": d / "g.jsonl"}},
    ]


def _fresh(d: Path) -> None:
    for p in list(d.iterdir()):
        if p.is_dir() and not p.is_mount():
            shutil.rmtree(p, ignore_errors=True)
        elif not p.is_dir():
            p.unlink()
    (d / "t.csv").write_text(KEYS)
    (d / "r.jsonl").write_text(MOONCAKE)
    (d / "ttft.jsonl").write_text(TTFT)


def _parser_actions(cmd: dict[str, Any]) -> list[argparse.Action]:
    """The optional arguments of ``cmd`` (from its own parser)."""
    entry, sub = cmd["entry"], cmd["argv"][0]
    if entry == "stackdist":
        from stackdist.cli.main import build_parser

        parser = build_parser()
    elif entry == "placement":
        from kvlab.placement.__main__ import build_parser as placement_parser

        parser = placement_parser()
    else:
        import kvlab.__main__ as kv

        modules = {"scenario": "kvlab.scenario", "summarize": "kvlab.summarize", "block-lab": "kvlab.blocklab"}
        if sub in modules:
            import importlib

            return [a for a in importlib.import_module(modules[sub]).build_parser()._actions if a.option_strings]
        parser = kv.build_parser()
    subs = next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)
    target = subs.choices[sub] if subs is not None else parser
    return [a for a in target._actions if a.option_strings]


def _with(argv: list[str], flag_strings: list[str], value: str) -> list[str]:
    """``argv`` with the flag set to ``value`` (replaced if present, else appended)."""
    out = list(argv)
    for i, a in enumerate(out):
        if a in flag_strings and i + 1 < len(out):
            out[i + 1] = value
            return out
    return [*out, f"{flag_strings[-1]}={value}"] if value.startswith("-") else [*out, flag_strings[-1], value]


def sweep_flags(s: Sweep, d: Path, values: list[str], only: str | None) -> None:
    for cmd in commands(d):
        if only and only not in cmd["name"]:
            continue
        for action in _parser_actions(cmd):
            if action.nargs == 0 or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            tries = ["bogus_enum", ""] if action.choices else values
            for value in tries:
                _fresh(d)
                argv = _with(cmd["argv"], action.option_strings, value)
                before = _digest(cmd["inputs"])
                code, out, err, escaped = _run_in_process(cmd["entry"], argv)
                s.judge(f"{cmd['name']} {action.option_strings[-1]} {value!r}", code, out, err, escaped,
                        outputs=[] if value in ("-", "") or set(action.option_strings) & set(cmd["outputs"])
                        or action.option_strings[-1] in ("--output", "--json") else list(cmd["outputs"].values()),
                        json_stdout=cmd.get("json_stdout", False) and action.option_strings[-1] not in ("--json",),
                        inputs=cmd["inputs"], inputs_before=before, folder=d)


# ------------------------------------------------------------------ outputs
def sweep_outputs(s: Sweep, d: Path, mounts: dict[str, Path]) -> None:
    for cmd in commands(d):
        for flag, path in cmd["outputs"].items():
            index = cmd["argv"].index(str(path))
            targets: list[tuple[str, Any, set[int] | None]] = []
            for i, src in enumerate(cmd["inputs"]):
                targets.append((f"the input {i}", src, {2}))
                targets.append((f"a symlink to the input {i}", ("link-to", src), {2}))
            targets += [("a symlink to a new file", ("link-new", None), {0}), ("/dev/stdout", "/dev/stdout", {0}),
                        ("/dev/full", "/dev/full", {1}), ("a folder", d, {2}), ("a file under a file", d / "t.csv" / "x", {1, 2}),
                        ("an empty name", "", {2})]
            if "ro" in mounts:
                targets.append(("a read-only folder", mounts["ro"] / "o.json", {1}))
            if "full" in mounts:
                targets.append(("a full disk (old file kept)", ("full", mounts["full"] / "o.json"), {1}))
            for label, target, expect in targets:
                _fresh(d)
                old = None
                if isinstance(target, tuple) and target[0] == "link-to":
                    link = d / "link"
                    link.symlink_to(target[1])
                    target = link
                elif isinstance(target, tuple) and target[0] == "link-new":
                    link = d / "link"
                    link.symlink_to(d / "new.json")
                    target = link
                elif isinstance(target, tuple) and target[0] == "full":
                    full = target[1]
                    for p in full.parent.iterdir():
                        p.unlink()
                    full.write_text("old output\n")
                    with contextlib.suppress(OSError), open(full.parent / "filler", "wb") as f:
                        f.write(b"x" * 10**6)  # fill the tmpfs
                    old, target = {str(full): full.read_bytes()}, full
                argv = list(cmd["argv"])
                argv[index] = str(target)
                before = _digest(cmd["inputs"])
                code, out, err, escaped = _run_in_process(cmd["entry"], argv)
                outputs = [d / "new.json"] if label == "a symlink to a new file" else []
                appended = cmd.get("append") and label in ("/dev/full", "a full disk (old file kept)")  # may fit its page
                s.judge(f"{cmd['name']} {flag} = {label}", code, out, err, escaped, expect=None if appended else expect, outputs=outputs, inputs=cmd["inputs"], inputs_before=before,
                        folder=d, old=None if appended else old)
                if label == "a symlink to a new file" and code == 0 and not (d / "link").is_symlink():
                    s.fail("symlinked output replaced instead of written through", cmd["name"], str(d / "link"))
                if label == "/dev/stdout" and not Path("/dev/stdout").exists():
                    s.fail("/dev/stdout replaced", cmd["name"], "")


# ------------------------------------------------------------------ inputs
BAD_INPUTS = {
    "empty": ("", {1}),
    "blank lines": ("\n\n  \n", {1}),
    "a BOM then data": ("\ufeffa\nb\na\n", {0, 1}),
    "malformed lines": ("a,1\nb,notanumber\n", {1, 2}),
    "huge integers": (f"a,{2**70}\nb,{2**70}\na,{2**70}\n", {1, 2}),
    "nan sizes": ("a,nan\nb,inf\na,nan\n", {1, 2}),
    "negative sizes": ("a,-5\nb,0\na,-5\n", {0, 1, 2}),
    "a key changing size": ("a,1\na,2\n", {1}),
}
BAD_REQUESTS = {
    "empty": ("", {1}),
    "blank lines": ("\n\n", {1}),
    "not JSON": ("{not json\n", {1}),
    "hash_ids not a list": ('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": 5}\n', {1}),
    "huge integers": (json.dumps({"timestamp": 10**400, "input_length": 2**70, "output_length": 1, "hash_ids": [2**70]}) + "\n",
                      {1}),
    "nan timestamp": ('{"timestamp": NaN, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n', {1}),
    "negative lengths": ('{"timestamp": 0, "input_length": -10, "output_length": -1, "hash_ids": [1]}\n', {1}),
    "no prompt blocks": ('{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}\n', {1}),
}
BAD_TTFT = {
    "empty": ("", {0, 1}),  # the lab's spec: empty sections and a warning
    "not JSON": ("{x\n", {1}),
    "huge numbers": ('{"config": "baseline", "pass": "p", "ttft_ms": 1e400}\n', {1}),
    "nan": ('{"config": "baseline", "pass": "p", "ttft_ms": NaN}\n', {1}),
    "401 digits": ('{"config": "baseline", "pass": "p", "ttft_ms": ' + "9" * 401 + "}\n", {1}),
}


def sweep_inputs(s: Sweep, d: Path) -> None:
    for cmd in commands(d):
        for src in cmd["inputs"]:
            table = BAD_REQUESTS if src.name == "r.jsonl" else BAD_TTFT if src.name == "ttft.jsonl" else BAD_INPUTS
            for label, (content, expect) in table.items():
                _fresh(d)
                src.write_text(content, encoding="utf-8")
                code, out, err, escaped = _run_in_process(cmd["entry"], cmd["argv"])
                s.judge(f"{cmd['name']} input {src.name} = {label}", code, out, err, escaped, expect=expect,
                        outputs=list(cmd["outputs"].values()), folder=d)
    for argv, expect in ((["curve", "/dev/null"], {2}), (["curve", "/dev/null", "--format", "csv"], {1}),
                         (["plan", "/dev/null"], {1}), (["tiers", "/dev/null", "--gpu", "1", "--format", "jsonl"], {1})):
        code, out, err, escaped = _run_in_process("stackdist", argv)  # without --format: no extension to guess from
        s.judge(f"{' '.join(argv)}", code, out, err, escaped, expect=expect)


# ------------------------------------------------------------------ real processes
def _process_argv(cmd: dict[str, Any]) -> list[str]:
    module = {"stackdist": "stackdist", "kvlab": "kvlab", "placement": "kvlab.placement"}[cmd["entry"]]
    return [sys.executable, "-m", module, *cmd["argv"]]


def sweep_processes(s: Sweep, d: Path, delays: list[float]) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for cmd in commands(d):
        _fresh(d)
        proc = subprocess.run(_process_argv(cmd), cwd=d, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, timeout=300, preexec_fn=lambda: os.close(1), check=False)
        s.judge(f"{cmd['name']} with a closed stdout", proc.returncode, "", proc.stderr, "",
                expect={0, 1} if cmd["outputs"] or cmd.get("folder_out") else {1}, outputs=[], folder=d)
        if proc.returncode == 0 and not cmd["outputs"] and not cmd.get("folder_out"):
            s.fail("exit 0 with a closed stdout (the answer went nowhere)", cmd["name"], "")
        for p in cmd["outputs"].values():
            if not p.exists() and not cmd.get("append"):
                s.fail("closed stdout lost the output file", cmd["name"], str(p))
        for delay in delays:
            _fresh(d)
            old = {str(p): b"old\n" for p in cmd["outputs"].values()}
            for p in cmd["outputs"].values():
                p.write_bytes(b"old\n")
            child = subprocess.Popen(_process_argv(cmd), cwd=d, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
            time.sleep(delay)
            child.send_signal(signal.SIGINT)
            out, err = child.communicate(timeout=300)
            code = child.returncode
            s.judge(f"{cmd['name']} with SIGINT after {delay} s", code, out, err, "", allow={0, 130, -2},
                    folder=d)
            if code == 130 and len([ln for ln in err.splitlines() if "interrupted" in ln]) != 1:
                s.fail("Ctrl-C is not one line", f"{cmd['name']} after {delay} s", err)
            if code == 0 and "Traceback" not in err:
                for p in cmd["outputs"].values():
                    if p.read_bytes() == b"old\n" and not cmd.get("append"):
                        s.fail("exit 0 after SIGINT without the new output", f"{cmd['name']} after {delay} s", str(p))
            elif code != 0:
                for p, data in old.items():  # interrupted: the old file, or (written just before) a whole new one
                    now = Path(p).read_bytes()
                    if now != data and not cmd.get("append") and not _strict_json(now.decode(errors="replace")):
                        s.fail("SIGINT left a partial output", f"{cmd['name']} after {delay} s", p)


# ------------------------------------------------------------------ main
def _mounts(base: Path) -> dict[str, Path]:
    """A read-only and a tiny tmpfs (root only); {} when mounting is not possible."""
    out: dict[str, Path] = {}
    if os.geteuid() != 0:
        return out
    for name, opts in (("ro", "ro,size=64k"), ("full", "size=64k")):
        p = base / name
        p.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(p)], capture_output=True, check=False).returncode == 0:
            out[name] = p
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer hostile values and one SIGINT moment")
    ap.add_argument("--only", help="only commands whose name contains this")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: flags,outputs,inputs,processes")
    ap.add_argument("--json", default=str(REPO / "validation" / "results" / "hostile_sweep.json"))
    args = ap.parse_args()
    result_path, home = Path(args.json).resolve(), os.getcwd()
    base = Path(tempfile.mkdtemp(prefix="hostile_sweep."))
    d = base / "work"
    d.mkdir()
    os.chdir(d)  # relative output names given as hostile values land here
    mounts = _mounts(base)
    s = Sweep()
    skip = set(args.skip.split(","))
    started = time.perf_counter()
    try:
        if "flags" not in skip:
            sweep_flags(s, d, QUICK_HOSTILE if args.quick else HOSTILE, args.only)
        if "outputs" not in skip:
            sweep_outputs(s, d, mounts)
        if "inputs" not in skip:
            sweep_inputs(s, d)
        if "processes" not in skip:
            sweep_processes(s, d, [0.3] if args.quick else [0.05, 0.3, 0.8, 1.5])
    finally:
        os.chdir(home)
        for p in mounts.values():
            subprocess.run(["umount", str(p)], check=False)
        shutil.rmtree(base, ignore_errors=True)
    by_class = Counter(f["class"] for f in s.failures)
    print(f"{s.cases} cases, {len(s.failures)} failures ({time.perf_counter() - started:.0f} s; mounts: "
          f"{', '.join(mounts) or 'none'})")
    for kind, n in by_class.most_common():
        print(f"  {n:5d}  {kind}")
        for f in [f for f in s.failures if f["class"] == kind][:6]:
            print(f"           {f['case']}: {f['detail'][-160:]!r}")
    result_path.parent.mkdir(parents=True, exist_ok=True)
    result_path.write_text(json.dumps({"cases": s.cases, "failures": s.failures, "by_class": dict(by_class),
                                       "quick": args.quick, "mounts": list(mounts)}, indent=1) + "\n")
    return 1 if s.failures else 0


if __name__ == "__main__":
    sys.exit(main())
