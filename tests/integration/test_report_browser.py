"""`noderoll report` renders in a real browser (issue 27 item 3): Debian's chromium, driven by selenium.

A fleet of 3 fleetsim nodes, a canary of one and one Package whose `apply` fails for good on one
node (the last in the fleet's order, so not the canary), two attempts per stage: the rollout ends
Failed with one node erroring. `noderoll report POLICY -o FILE` (the real command, a process) writes
the page; headless chromium opens it from disk and the test reads from the DOM: a timeline row per
node, failure marks on the failed node only, a retry mark, the canary and batch marks, the failure
with its message in the failures list, and no request left the page (its Content-Security-Policy
forbids any). The page and a screenshot are kept as test artifacts in `$NODEROLL_TEST_ARTIFACTS`
(default `.noderoll/test-artifacts/` in the checkout), the paths printed.

Needs /usr/bin/chromium and /usr/bin/chromedriver (`scripts/install-browser`, run by
`scripts/bootstrap`); skips saying so without them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from kubernetes.client import ApiClient
from temporalio.client import Client

from fleetsim.faults import Fault
from localstack.state import StackInfo
from planning.rollout.compartments import stable_order
from protocol.names import fleet_workflow_id
from tests.helpers import assert_eventually_async, unique_name
from tests.helpers.fleet import running_fleet
from tests.helpers.packages import SYSCTL_IMAGE, package_spec
from tests.helpers.processes import NoderollProcesses, noderoll_fixture
from tests.integration.bridge_support import (
    create_package,
    create_policy,
    delete_package,
    delete_policy,
    fleet_progress,
)

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS_ENV = "NODEROLL_TEST_ARTIFACTS"
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,900")


run = noderoll_fixture(stage_attempts=2, retry_backoff_seconds=1)


def browser() -> object:
    """A headless chromium under chromedriver, with a fresh profile; skips when they are not installed."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: run scripts/install-browser (apt-get install chromium "
                    "chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium missing: pip install -e '.[test]'")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tempfile.mkdtemp(prefix='noderoll-chromium-')}")
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    return webdriver.Chrome(options=options, service=service)


async def test_report_renders_rows_failures_and_marks_in_chromium(
    run: NoderollProcesses, local_stack: StackInfo, kube_api_client: ApiClient, temporal_client: Client, tmp_path: Path
) -> None:
    driver = browser()  # before the rollout: a missing browser skips at once
    labels = {"report-test": unique_name("rep")}
    policy, package = unique_name("pol"), unique_name("pkg")
    try:
        with running_fleet(local_stack, nodes=3, labels=labels) as fleet:
            bad = stable_order(fleet.node_names, fleet_workflow_id(policy))[-1]
            fleet.options.faults.add(Fault("fail-stage", nodes=bad, mode="apply", package=package, exit_code=7))
            try:
                create_policy(kube_api_client, run, policy, {
                    "canary": {"count": 1, "soakSeconds": 1},
                    "default": {"budget": {"count": 2}, "strategy": {"type": "fixed", "initialBatch": 2}}})
                create_package(kube_api_client, run.package(package, package_spec(SYSCTL_IMAGE, policy=policy, labels=labels)))

                async def ended_with_one_node_erroring() -> bool:
                    report = await fleet_progress(temporal_client, policy)
                    assert report.counts == {"complete": 2, "erroring": 1}, report.counts
                    return True

                await assert_eventually_async(ended_with_one_node_erroring, timeout=300)
                page = tmp_path / "report.html"
                written = subprocess.run(
                    [str(Path(sys.executable).parent / "noderoll"), "report", policy, "-o", str(page),
                     "--temporal-address", local_stack.temporal_address, "--kubeconfig", str(local_stack.kubeconfig)],
                    capture_output=True, text=True, timeout=120)
                assert written.returncode == 0, written.stderr
            finally:
                delete_package(kube_api_client, package)
                delete_policy(kube_api_client, policy)
        html = page.read_text()
        assert "<script" not in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
        driver.get(page.as_uri())  # type: ignore[attr-defined]
        find = driver.find_elements  # type: ignore[attr-defined]
        rows = {e.get_attribute("data-node") for e in find("css selector", "g.node-row")}
        assert rows == set(fleet.node_names)
        assert {e.get_attribute("data-node") for e in find("css selector", ".failure-mark")} == {bad}
        assert find("css selector", f'g.node-row[data-node="{bad}"] .retry-mark')
        assert len(find("css selector", ".batch-mark.canary")) == 1 and len(find("css selector", ".batch-mark")) >= 2
        # Stage pods split by their containers' own times (run_stage_pod reports them): stages and checks.
        assert find("css selector", "rect.bar.stage") and find("css selector", "rect.bar.check")
        failures = [e.text for e in find("css selector", "#failures li.failure")]
        assert failures and all(bad in text for text in failures) and any("exited 7" in t for t in failures), failures
        assert {e.get_attribute("data-node") for e in find("css selector", "#node-table tr[data-node]")} == rows
        artifacts = Path(os.environ.get(ARTIFACTS_ENV) or REPO / ".noderoll" / "test-artifacts")
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "report.png"
        assert driver.save_screenshot(str(shot))  # type: ignore[attr-defined]
        shutil.copyfile(page, artifacts / "report.html")
        print(f"report screenshot: {shot}; page: {artifacts / 'report.html'}")
        if shutil.which("file"):
            assert "PNG" in subprocess.run(["file", str(shot)], capture_output=True, text=True).stdout
    finally:
        driver.quit()  # type: ignore[attr-defined]
