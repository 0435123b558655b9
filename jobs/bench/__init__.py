"""The benchmark: ``python -m jobs.bench [--quick] [--out DIR] [--only a,b]`` (also
``driver-review bench …`` and ``ray job submit -- python -m jobs.bench …``).

Every scenario runs on this machine, one after the other, against the simulated catalog
on loopback, and every comparison is a ratio of two figures measured side by side in the
same run — a loaded 2-core machine makes absolute numbers noisy, ratios much less so.

Scenarios (``--only`` takes these names):

==============  ==========================================================================
utilization     one sweep at an undisclosed rate limit R, and once more with RateLimit
                headers: useful calls/s ÷ R, 429 share, active wall ÷ the minimum
endpoints       one sweep, two endpoints with their own undisclosed limits (the catalog
                and a far scarcer check service): per endpoint useful calls/s ÷ its
                limit while it was the constraint, and its 429 share
peers           the same sweep by competent peers: bounded asyncio fan-out, a tuned Ray
                Data pool, botocore's adaptive (CUBIC) client; each the best of a small
                grid, counted only when it reaches the truth: wall, 429s, calls/decision
ceiling         an unlimited catalog: decisions/s and per CPU-second, driver-review
                against one asyncio process (same checks, same client); full mode adds
                a two-node loopback cluster (scale-out ratio)
cache           one running service: 1% of the drivers change; driver fetches per changed
                version and package downloads
latency         pings at a steady rate into the live service: acceptance to decision, and
                that minus the time spent in external calls
ingress         signed pings/s (wrk, pre-signed) through the Serve ingress behind Serve's
                default proxy and behind its HAProxy ingress, against a plain uvicorn
                endpoint (ceiling) and a Serve no-op deployment (the engine's own cost)
ledger          1M and 5M drivers (quick: 50k, 200k) in the columnar ledger against a
                dict of objects: bytes per driver, staleness slice, snapshot write/load
isolation       one stage made ~10x slower: the other stages' throughput as a ratio
==============  ==========================================================================

Output: ``<out>/bench.json`` (figures with units in their names, a ``targets`` section per
scenario saying met or missed with the value, the settings, the machine) and
``<out>/bench.png`` (needs matplotlib, the ``bench`` extra; skipped with a note without).

Modules: ``runner`` (order, machine, output), ``common`` (sizes, call log, targets), one
module per scenario (``utilization``, ``endpoints``, ``peers`` with ``peer_runners``,
``peer_review``, ``peer_scoring`` and ``cubic``, ``ceiling`` with ``cpu`` and
``two_node``, ``live`` with ``latency`` and ``ingress`` (``ingress_load``, ``wrk_load``,
``plain_asgi``), ``ledger_scale`` with ``ledger_probe``, ``isolation``), ``chart``.
"""

from jobs.bench.runner import SCENARIOS, parse_only, run_bench

__all__ = ["SCENARIOS", "parse_only", "run_bench"]
