"""The catalog seam: a full sweep against a vendor API of another shape, through the
adapter a team would write for it (``tests/integration/other_vendor.py``)."""

from __future__ import annotations

import re

import httpx
import pytest

from driver_review.catalog.adapter import load_factory
from driver_review.config import load_config
from driver_review.errors import ConfigError
from driver_review.results import read_results
from driver_review.sim import SimSettings
from driver_review.sweep import SweepOptions, run_sweep
from tests.integration.other_vendor import HubServer

ADAPTER = "tests.integration.other_vendor:HubCatalog"


@pytest.mark.ray
@pytest.mark.usefixtures("ray_session")
@pytest.mark.timeout(300)
def test_a_sweep_through_another_vendors_api_reaches_the_truth(sim_factory, tmp_path) -> None:
    sim = sim_factory(SimSettings(drivers=150, seed=21, rate_limit=400))
    hub = HubServer(sim.url).start()
    try:
        config = load_config().with_overrides(
            catalog={"url": hub.url, "adapter": ADAPTER, "page_size": 40},
            window={"lease_s": 30.0, "batch_size": 32},
            results={"rollover_s": 2.0},
        )
        summary = run_sweep(config, SweepOptions(data_dir=str(tmp_path), timeout_s=240))
    finally:
        hub.stop()
    truth = httpx.get(f"{sim.url}/_sim/truth", timeout=30).json()["drivers"]
    state = httpx.get(f"{sim.url}/_sim/state", timeout=30).json()["drivers"]
    wrong = [
        d
        for d, t in truth.items()
        if (state[d]["status"], state[d]["stage"]) != (t["status"], t["stage"])
    ]
    assert len(truth) == 150 and wrong == [], wrong[:5]
    # Every call went through the hub's routes, paced under the hub's own key.
    routes = set(summary["external_calls"])
    assert routes and all(r.split()[1].startswith("/hub/v2/") for r in routes), routes
    assert any(hub.url.split("//")[1] in key for key in summary["governor"]), summary["governor"]
    verdicts = set(read_results(str(tmp_path)).column("verdict").to_pylist())
    assert {"approved", "rejected"} <= verdicts


def test_an_adapter_that_cannot_be_loaded_is_one_line_naming_it() -> None:
    for spec, says in (
        ("no_such_pkg.mod:make", "cannot import no_such_pkg.mod"),
        ("tests.integration.other_vendor:Nope", "has no attribute 'Nope'"),
        ("tests.integration.other_vendor:STATES", "is not callable"),
    ):
        with pytest.raises(ConfigError, match=re.escape(says)) as err:
            load_factory(spec)
        assert "\n" not in str(err.value)
    config = load_config().with_overrides(catalog={"adapter": "no_such_pkg.mod:make"})
    with pytest.raises(ConfigError, match=r"catalog\.adapter"):
        config.check_environment()  # what the CLI and start_system call before any actor
    with pytest.raises(ConfigError, match=r"catalog\.adapter"):
        load_config().with_overrides(catalog={"adapter": "not a spec"})
