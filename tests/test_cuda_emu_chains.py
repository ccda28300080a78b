"""The emulated kernels' process chains (tests/cuda_emu/cases.py run_cases): a case that
never ends fails as hung and the chain goes on after it; a case that aborts its process
fails with the report and the chain goes on. A stand-in child plays the emulation process."""

from __future__ import annotations

import sys
import time

from tests.cuda_emu.cases import _run_chain

#: Reads the cases, and for each prints {"start": id}, then the verdict its "do" asks for:
#: "ok", "hang" (sleeps past any timeout here), or "abort" (exits 3 with a report).
CHILD = r"""
import json, sys, time
for case in json.load(sys.stdin):
    print(json.dumps({"start": case["id"]}), flush=True)
    if case["do"] == "hang":
        time.sleep(120)
    if case["do"] == "abort":
        print("cuda-emu: a check failed here", file=sys.stderr, flush=True)
        sys.exit(3)
    print(json.dumps({"id": case["id"], "status": "passed"}), flush=True)
"""


def test_a_hung_case_fails_alone_and_the_chain_goes_on() -> None:
    # Bug: the whole chain had one bound (1200 s): on a loaded machine a chain of healthy
    # cases passed it and every case of it errored (624 errors, 2026-12-01), while a real
    # hang was only found after the chain's whole time.
    cases = [{"id": "a", "do": "ok"}, {"id": "b", "do": "hang"}, {"id": "c", "do": "abort"},
             {"id": "d", "do": "ok"}]
    began = time.monotonic()
    results = _run_chain(cases, 3.0, (sys.executable, "-c", CHILD))
    assert time.monotonic() - began < 60  # not the hung case's 120 s
    assert {k: v["status"] for k, v in results.items()} == {
        "a": "passed", "b": "failed", "c": "failed", "d": "passed"}
    assert "taken for hung" in results["b"]["message"]
    assert "exit 3" in results["c"]["message"] and "a check failed here" in results["c"]["message"]
