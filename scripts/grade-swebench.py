#!/usr/bin/env python3
"""Grade a workspace against a SWE-bench task spec (the JSON a SWE-bench task is published as).

usage: grade-swebench.py SPEC.json TRAJECTORY.json WORKSPACE

1. compares `git diff` of WORKSPACE with the trajectory's info.submission
   (lines starting "index " may differ);
2. runs test_files_reset_cmd, applies test_patch, runs test_cmd with
   PYTHONPATH=src under /usr/bin/python3 (Debian's, with the task's
   debian_packages installed);
3. checks that every FAIL_TO_PASS and PASS_TO_PASS id is reported PASSED
   (ids are the first word after PASSED, as the SWE-bench log parser reads them);
4. takes the test patch out again, so that WORKSPACE's diff is as it was
   (a second grading gives the same answer).
Exit status 0 when the diff matches and the task is resolved.
"""
import ast
import json
import os
import subprocess
import sys


def main():
    spec_path, traj_path, ws = sys.argv[1:4]
    spec = json.load(open(spec_path))
    traj = json.load(open(traj_path))
    sub = traj["info"]["submission"]
    diff = subprocess.run(["git", "diff"], cwd=ws, capture_output=True, text=True, check=True).stdout
    strip = lambda s: [l for l in s.splitlines() if not l.startswith("index ")]
    same = strip(diff) == strip(sub)
    print(f"diff equals info.submission (ignoring index lines): {same}")
    env = dict(os.environ, PYTHONPATH="src", PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    subprocess.run(spec["test_files_reset_cmd"], shell=True, cwd=ws, check=True, env=env)
    subprocess.run(["git", "apply", "-"], input=spec["test_patch"], text=True, cwd=ws, check=True)
    try:
        cmd = spec["test_cmd"].replace("pytest", "/usr/bin/python3 -m pytest", 1)
        res = subprocess.run(cmd, shell=True, cwd=ws, capture_output=True, text=True, env=env)
    finally:
        # Leave the workspace as it was, so that a second grading
        # compares the same diff: take the test patch out again, and
        # put back what the workspace's own diff had in the test files
        # the reset command reset.
        subprocess.run(["git", "apply", "-R", "-"], input=spec["test_patch"], text=True, cwd=ws, check=True)
        tests = [l[len("+++ b/"):] for l in spec["test_patch"].splitlines() if l.startswith("+++ b/")]
        if diff and tests:
            subprocess.run(["git", "apply"] + ["--include=" + t for t in tests] + ["-"], input=diff, text=True, cwd=ws, check=True)
    passed = {l.split()[1] for l in res.stdout.splitlines() if l.startswith("PASSED ")}
    want = spec["fail_to_pass"] + (ast.literal_eval(spec["pass_to_pass"]) if isinstance(spec["pass_to_pass"], str) else spec["pass_to_pass"])
    missing = [t for t in want if t not in passed]
    print(f"tests passed: {len(want) - len(missing)} of {len(want)}")
    for t in missing:
        print("  NOT PASSED:", t)
    resolved = not missing
    print(f"resolved: {resolved}")
    sys.exit(0 if same and resolved else 1)


if __name__ == "__main__":
    main()
