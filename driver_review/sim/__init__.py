"""The simulated vendor catalog: a real HTTP server on loopback that plays the external
service for the demo, the tests and the benchmark (rate limit, latency, faults, generated
changes, signed webhook pings, deterministic ground truth).

::

    with SimServer(SimSettings(drivers=500, seed=7, rate_limit=50)) as sim:
        ...  # talk to sim.url; read sim.state or GET {sim.url}/_sim/truth

Modules: ``data`` (seeded catalog and fates), ``state`` (catalog, decisions, truth),
``stats``, ``ratelimit`` (token bucket and headers), ``faults``, ``edge`` (what wraps the
routes), ``app`` (routes), ``generator`` (changes), ``webhooks`` (sender), ``settings``,
``server`` (start/stop), ``cli`` (flags).
"""

from driver_review.sim.server import SimServer, serve_forever
from driver_review.sim.settings import SimSettings

__all__ = ["SimServer", "SimSettings", "serve_forever"]
